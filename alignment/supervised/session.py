"""The run scaffolding SFT (alignment/sft_run.py) and expert iteration (alignment/expert_iteration.py) share.

`open_run` loads the policy, rollout engine, grader, held-out task and metrics log, and restores a checkpoint on
--resume; `SFTRun.evaluate` is log_generations into metrics.jsonl (summary) and rollouts.jsonl (every example, kind
"eval"); `sft_steps` takes optimizer steps over examples in seeded order. Rows are keyed by `grpo_step`, the logs'
step axis, which here counts optimizer steps (SFT) or EI steps.

Under `torchrun --nproc-per-node N` every process runs the same run with 1/N of the policy
(alignment/distributed/sharding.py, alignment/run/setup.py's `learner_group`): each samples and grades its share
of the questions and trains on its share of every step's microbatches; rank 0 alone writes the run folder, logs and
prints, and every rank writes its checkpoint shards.
"""

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from alignment.config.settings import write_run_settings
from alignment.data.sft_examples import SFTExample
from alignment.data.task import Task
from alignment.distributed.sharding import ShardGroup
from alignment.generation_log import log_generations
from alignment.grading.parallel import ParallelGrader
from alignment.models.loading import load_tokenizer
from alignment.models.policy_folder import push_weights
from alignment.prompts import stop_strings
from alignment.rollout.interface import RolloutEngine, SamplingConfig
from alignment.run.checkpoint import export_policy, load_checkpoint
from alignment.run.metrics_log import MetricsLog
from alignment.run.setup import PromptOrder, build_engine, devices, load_policy, make_grader, model_dtype
from alignment.run.threads import use_torch_threads
from alignment.supervised.config import SFTTrainingSettings
from alignment.supervised.trainer import SFTTrainer, check_prompt_lengths, save_run_state


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
        sampling = SamplingConfig(
            temperature=c.eval_temperature,
            top_p=c.eval_top_p,
            max_tokens=c.eval_max_tokens,
            stop=stop_strings(c.prompt),
            seed=c.seed,
        )
        self.sync_engine()
        summary, rows = log_generations(
            self.engine, self.trainer.policy, self.trainer.tokenizer, self.validation, self.grader, sampling
        )
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


def open_run(
    config: SFTTrainingSettings,
    resume: bool,
    examples: Sequence[SFTExample],
    validation: Task,
    group: ShardGroup | None = None,
) -> SFTRun:
    """Model, engine, grader and log for a checked config; `examples` are length-checked before the model loads.
    With `group` (learner_group), the policy is sharded over its processes."""
    tokenizer = load_tokenizer(config.model)
    check_prompt_lengths(examples, tokenizer, config.max_seq_length)
    main = group is None or group.main
    if group is not None:
        group.barrier()  # every rank has looked at the output folder before rank 0 writes to it
    if main:  # before any model loads; `--resume DIR` alone reads them (resumable changes included)
        write_run_settings(config)
    torch.manual_seed(config.seed)
    policy_device, rollout_device = devices(config)
    use_torch_threads(config.torch_threads, main)
    policy, tokenizer = load_policy(config, policy_device, model_dtype(config, policy_device), shard=group is not None)
    trainer = SFTTrainer(policy, tokenizer, config)
    state: dict[str, Any] = {}
    if resume:
        state = load_checkpoint(config.output_dir, config, trainer.policy, trainer.optimizer)
    engine = build_engine(config, policy, tokenizer, rollout_device, policy_device, group=group)
    grader = make_grader(validation, config.grader_workers, group)
    log = MetricsLog(
        config.output_dir, config.to_json(), config.wandb_project, config.wandb_mode, state.get("step", 0), enabled=main
    )
    run = SFTRun(config, trainer, engine, grader, validation, log, group, step=state.get("step", 0), state=state)
    run.started -= state.get("elapsed_s", 0.0)
    return run


def sft_steps(
    run: SFTRun,
    examples: Sequence[SFTExample],
    epochs: int,
    seed: int,
    position: int = 0,
    on_step: Callable[[dict[str, float], int], None] | None = None,
) -> list[dict[str, float]]:
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
