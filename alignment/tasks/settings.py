"""The settings that name a run's task, shared by every entry point that takes `--task` (GRPO, GRPO on Ray, the
sweeps' presets, expert iteration, zero-shot evaluation, Best-of-N), defined once here."""

from dataclasses import dataclass

from alignment.config.settings import setting


@dataclass
class TaskSettings:
    task: str = setting(
        "math",
        "What to train on: a built-in task (math: graded answers to --dataset; keywords: write text that uses given "
        "words; arithmetic: generated word problems), path/to/file.py:NAME or package.module:NAME (a TaskDefinition, "
        "or a function of the settings returning one: docs/guides/own_task.md), or reasoning_gym:NAME[,NAME=WEIGHT...] "
        "(reasoning-gym's procedural tasks, a weighted mix).",
    )
    task_data: str | None = setting(
        None,
        "Rows of the task instead of its own: a .jsonl/.json/.parquet/.csv file or folder, or a hub id (read with "
        "`datasets`).",
    )
    task_validation_data: str | None = setting(
        None, "Validation rows (default: the data's test or validation split, else a held-out slice of its rows)."
    )
    task_fields: str | None = setting(
        None,
        "Field renames NAME=COLUMN[,NAME=COLUMN...]: the task reads NAME where the data has COLUMN (e.g. "
        "question=problem,answer=solution).",
    )
    task_config: str | None = setting(
        None,
        "The task's own settings as JSON: for reasoning_gym, per task its configuration, e.g. "
        '{"chain_sum": {"min_terms": 3, "max_terms": 4}}.',
    )
    reward_weights: str | None = setting(
        None, "Override reward weights NAME=WEIGHT[,NAME=WEIGHT...] (NAME: the reward function's name in the logs)."
    )
    curriculum_threshold: float | None = setting(
        None,
        "reasoning_gym tasks: raise a task's difficulty a level (reasoning-gym's curriculum for it) when its mean "
        "score over its last --curriculum-window training rollouts reaches this accuracy; its later training rows are "
        "generated at the new level, validation rows stay at the first. None: no curriculum.",
    )
    curriculum_window: int = setting(64, "Training rollouts of a task whose mean score --curriculum-threshold reads.")
