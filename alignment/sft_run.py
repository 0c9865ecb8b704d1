"""SFT runs end to end (scripts/train_sft.py), and the run scaffolding expert iteration shares.

`open_run` checks the output folder, loads the policy, rollout engine, grader, held-out task and metrics log,
and restores a checkpoint on --resume; `SFTRun.evaluate` is log_generations into metrics.jsonl (summary) and
rollouts.jsonl (every example, kind "eval"). Rows are keyed by `grpo_step`, the logs' step axis, which here
counts optimizer steps (SFT) or EI steps.

Under `torchrun --nproc-per-node N` every process runs the same run with 1/N of the policy (alignment/sharding.py,
grpo_run's `learner_group`): each samples and grades its share of the questions and trains on its share of every step's
microbatches; rank 0 alone writes the run folder, logs and prints, and every rank writes its checkpoint shards.
"""

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from alignment.checkpoint import export_policy, load_checkpoint
from alignment.data import load_math_examples, spread_subset
from alignment.data_splits import check_overlap
from alignment.generation_log import log_generations
from alignment.grader import REWARD_FNS, RewardFn
from alignment.grpo_run import build_engine, devices, learner_group, load_policy, math_task
from alignment.grpo_trainer import PromptOrder
from alignment.metrics_log import MetricsLog
from alignment.models import load_tokenizer
from alignment.parallel_grading import ParallelGrader
from alignment.plotting import line_figure, read_rows
from alignment.policy_folder import push_weights
from alignment.prompts import load_prompt, prompt_question
from alignment.rollout import RolloutEngine, SamplingConfig
from alignment.sharded_rollout import ShardedGrader
from alignment.sharding import ShardGroup
from alignment.sft_config import SFTConfig, SFTTrainingSettings, validate
from alignment.sft_data import SFTExample, load_sft_examples
from alignment.settings import write_run_settings
from alignment.sft_trainer import SFTTrainer, check_prompt_lengths, save_run_state
from alignment.task import Task

FIGURES = {  # file name -> (y label, metric keys)
    "eval_rewards": ("held-out reward", ["eval_format_reward", "eval_answer_reward"]),
    "eval_token_entropy": ("held-out response entropy (nats/token)", ["eval_token_entropy"]),
    "eval_response_length": ("held-out response tokens", ["eval_response_length", "eval_response_length_correct", "eval_response_length_incorrect"]),
    "train_loss": ("SFT loss (NLL per response token)", ["loss"]),
    "train_token_entropy": ("training response entropy (nats/token)", ["token_entropy"]),
    "kept_fraction": ("correct rollouts kept", ["kept_fraction"]),
    "rollout_entropy": ("EI rollout entropy estimate (nats/token)", ["rollout_entropy_estimate"]),
}


def check_output_dir(config: SFTTrainingSettings, resume: bool) -> None:
    earlier = [name for name in ("metrics.jsonl", "checkpoint", "policy") if (config.output_dir / name).exists()]
    if earlier and not resume and not config.overwrite:
        raise ValueError(f"--output-dir {config.output_dir} holds an earlier run ({', '.join(earlier)}); "
                         "pass --resume to continue it or --overwrite to replace it")


def stop_strings(prompt: str) -> tuple[str, ...]:
    return ("</answer>",) if prompt == "r1_zero" else ()


def sft_validation(config: SFTConfig, examples: Sequence[SFTExample]) -> Task:
    """--n-eval-examples held-out questions, none of which (beyond 1%) is the question of a training prompt."""
    try:
        validation = spread_subset(load_math_examples(config.validation_dataset), config.n_eval_examples)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--validation-dataset: {err}") from None
    questions = [prompt_question(load_prompt(config.prompt), e.prompt) for e in examples]
    known = [q for q in questions if q is not None]
    note = check_overlap(known, [e.question for e in validation], config.dataset, config.validation_dataset,
                         config.allow_validation_overlap)
    unknown = f" ({len(questions) - len(known)} training prompts are not in the --prompt template, so not compared)"
    tqdm.write(f"validating on {len(validation)} questions of {config.validation_dataset}; {note}"
               + (unknown if len(known) < len(questions) else ""))
    return math_task(validation, config.prompt)


@dataclass
class SFTRun:
    config: SFTTrainingSettings
    trainer: SFTTrainer
    engine: RolloutEngine
    grader: ParallelGrader
    validation: Task
    log: MetricsLog
    group: ShardGroup | None = None  # this process's place when the policy is sharded over torchrun's processes
    step: int = 0
    started: float = field(default_factory=time.perf_counter)
    state: dict[str, Any] = field(default_factory=dict)  # the restored checkpoint's extra entries

    @property
    def main(self) -> bool:
        """Whether this process writes the run folder and prints: rank 0, or the only process."""
        return self.group is None or self.group.main

    def sync_engine(self) -> None:
        push_weights(self.engine, self.trainer.policy)

    def evaluate(self) -> dict[str, float]:
        c = self.config
        sampling = SamplingConfig(temperature=c.eval_temperature, top_p=c.eval_top_p, max_tokens=c.eval_max_tokens,
                                  stop=stop_strings(c.prompt), seed=c.seed)
        self.sync_engine()
        summary, rows = log_generations(self.engine, self.trainer.policy, self.trainer.tokenizer, self.validation, self.grader, sampling)
        self.log.log({"grpo_step": self.step} | summary | {"time_elapsed_s": self.elapsed()})
        self.log.log_rollouts(self.step, "eval", rows)
        return summary

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def checkpoint(self, extra: dict[str, Any]) -> None:
        save_run_state(self.config.output_dir, self.config, self.trainer, self.step, self.started, extra)

    def finish(self) -> Path:
        """The final checkpoint's policy as `output_dir/policy` (every run checkpoints its last step), by rank 0."""
        return export_policy(self.config.output_dir) if self.main else self.config.output_dir / "policy"

    def close(self) -> None:
        self.grader.close()
        self.log.close()


def open_run(config: SFTTrainingSettings, resume: bool, examples: Sequence[SFTExample], validation: Task,
             group: ShardGroup | None = None) -> SFTRun:
    """Model, engine, grader and log for a checked config; `examples` are length-checked before the model loads.
    With `group` (learner_group), the policy is sharded over its processes."""
    tokenizer = load_tokenizer(config.model)
    check_prompt_lengths(examples, tokenizer, config.max_seq_length)
    main = group is None or group.main
    if group is not None:
        group.barrier()  # every rank has looked at the output folder before rank 0 writes to it
    if main:  # before any model loads; `--resume DIR` alone reads them (resumable changes included)
        write_run_settings(config)
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    policy_device, rollout_device = devices(config)  # type: ignore[arg-type]
    dtype = getattr(torch, config.dtype) if config.dtype else (torch.bfloat16 if policy_device.startswith("cuda") else torch.float32)
    policy, tokenizer = load_policy(config, policy_device, dtype, shard=group is not None)  # type: ignore[arg-type]
    trainer = SFTTrainer(policy, tokenizer, config)
    state: dict[str, Any] = {}
    if resume:
        state = load_checkpoint(config.output_dir, config, trainer.policy, trainer.optimizer)
    engine = build_engine(config, policy, tokenizer, rollout_device, policy_device, group=group)  # type: ignore[arg-type]
    grader = ParallelGrader(validation.reward_fn, config.grader_workers)
    if group is not None:
        grader = ShardedGrader(grader, group)  # type: ignore[assignment]
    log = MetricsLog(config.output_dir, config.to_json(), config.wandb_project, config.wandb_mode, state.get("step", 0),
                     enabled=main)
    run = SFTRun(config, trainer, engine, grader, validation, log, group, step=state.get("step", 0), state=state)
    run.started -= state.get("elapsed_s", 0.0)
    return run


def filter_correct(examples: Sequence[SFTExample], reward_fn: RewardFn, workers: int | None) -> list[SFTExample]:
    """The examples whose response the grader scores correct (reward 1) against their ground truth."""
    missing = [i for i, e in enumerate(examples) if e.ground_truth is None]
    if missing:
        raise ValueError(f"--filter-correct needs a ground_truth on every example; example {missing[0]} has none")
    with ParallelGrader(reward_fn, workers) as grader:
        scores = grader([e.response for e in examples], [e.ground_truth for e in examples])
    return [e for e, s in zip(examples, scores) if s["reward"] == 1.0]


def sft_steps(run: SFTRun, examples: Sequence[SFTExample], epochs: int, seed: int, position: int = 0,
              on_step: Callable[[dict[str, float], int], None] | None = None) -> list[dict[str, float]]:
    """`epochs` passes over `examples` in seeded order, one optimizer step per batch; returns the step rows.

    `position` (examples already taken) resumes mid-run; `on_step(row, position)` runs after each step.
    """
    total = epochs * len(examples)
    order = PromptOrder(len(examples), seed, position)
    rows = []
    while order.position < total:
        batch = [examples[i] for i in order.take(min(run.config.batch_size, total - order.position))]
        row = run.trainer.step(batch) | {"epoch": order.position / len(examples)}
        rows.append(row)
        if on_step is not None:
            on_step(row, order.position)
    return rows


def n_optimizer_steps(n_examples: int, epochs: int, batch_size: int) -> int:
    return math.ceil(n_examples * epochs / batch_size)


def load_training_examples(config: SFTConfig) -> tuple[list[SFTExample], dict[str, int]]:
    """The examples to train on and how many were loaded / kept; every data error names its flag."""
    template = load_prompt(config.prompt)
    try:
        examples = load_sft_examples(config.dataset, config.data_format, template, config.dataset_split, config.n_examples)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--dataset: {err}") from None
    counts = {"n_examples_loaded": len(examples)}
    if config.filter_correct:
        examples = filter_correct(examples, REWARD_FNS[config.prompt], config.grader_workers)
        counts["n_examples_kept"] = len(examples)
        if not examples:
            raise ValueError(f"--filter-correct kept none of the {counts['n_examples_loaded']} examples of {config.dataset}: "
                             "the grader scored no response correct")
    return examples, counts


def write_plots(output_dir: Path) -> list[Path]:
    rows = read_rows(output_dir / "metrics.jsonl")
    (output_dir / "plots").mkdir(exist_ok=True)
    paths = [output_dir / "plots" / f"{name}.png" for name in FIGURES]
    return [path for path, (ylabel, keys) in zip(paths, FIGURES.values())
            if line_figure({output_dir.name: rows}, keys, ylabel, path, xlabel="step")]


def train_sft(config: SFTConfig, resume: bool = False) -> list[dict[str, Any]]:
    """Run (or resume) SFT; returns the metrics rows of this invocation's optimizer steps. Under torchrun, one
    policy sharded over the processes (learner_group)."""
    validate(config)
    with learner_group(config) as group:
        return _train_sft(config, resume, group)


def _train_sft(config: SFTConfig, resume: bool, group: ShardGroup | None) -> list[dict[str, Any]]:
    check_output_dir(config, resume)
    examples, counts = load_training_examples(config)
    tqdm.write(f"training on {len(examples)} examples" + (f" (kept {counts['n_examples_kept']} of {counts['n_examples_loaded']} "
               "graded correct)" if config.filter_correct else ""))
    run = open_run(config, resume, examples, sft_validation(config, examples), group)
    n_steps = n_optimizer_steps(len(examples), config.epochs, config.batch_size)
    rows: list[dict[str, Any]] = []
    try:
        if run.step == 0:
            run.log.log({"grpo_step": 0} | counts)
            if config.eval_at_start:
                run.evaluate()
        bar = tqdm(total=n_steps, initial=run.step, desc="SFT", unit="step", disable=not run.main)

        def after_step(row: dict[str, float], position: int) -> None:
            run.step += 1
            row |= {"grpo_step": run.step, "time_elapsed_s": run.elapsed()}
            run.log.log(row)
            rows.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}")
            bar.update(1)
            if run.step % config.eval_every == 0 or run.step == n_steps:
                bar.set_postfix(eval_reward=f"{run.evaluate()['eval_reward']:.2f}")
            if run.step % config.checkpoint_every == 0 or run.step == n_steps:
                run.checkpoint({"order_position": position})

        sft_steps(run, examples, config.epochs, config.seed, position=run.state.get("order_position", 0), on_step=after_step)
        bar.close()
        run.finish()
    finally:
        run.close()
    return rows
