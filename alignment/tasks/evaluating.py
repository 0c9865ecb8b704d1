"""Evaluating any --task with the generation scripts (scripts/eval_zero_shot.py, scripts/best_of_n.py): its
validation rows, checked before any model loads, sampled and graded by its own rewards."""

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer

from alignment.data.math_datasets import spread_subset
from alignment.data.task import Task
from alignment.evaluation import GradedRollout, generate_and_grade
from alignment.grading.parallel import ParallelGrader
from alignment.models.loading import load_tokenizer
from alignment.prompts import chat_renderer
from alignment.run import generation
from alignment.tasks.building import evaluation_task, needs_chat_template, task_stop


def task_records(config: Any, n: int = 1) -> tuple[Task, list[GradedRollout], dict[str, float], Path]:
    """--task's validation rows (--limit of them, spread by seed 0) checked before any model loads, then sampled `n`
    times each and graded by its rewards: (the Task, the records, question-major, the phase timings, the output
    folder). `config` is a generation script's (alignment/run/generation.py) with the --task settings."""
    try:
        if config.limit is not None and config.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {config.limit}")
        task = evaluation_task(config)  # rows, prompts and rewards checked: each error in one line
        stop = task_stop(config)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    setup = generation.set_up(config, task_stop=stop)
    if needs_chat_template(config):
        task = evaluation_task(config, chat_renderer(load_tokenizer(config.model)), check=False)
    subset = spread_subset(list(range(len(task.questions))), config.limit)
    task = replace(
        task,
        questions=[task.questions[i] for i in subset],
        truths=[task.truths[i] for i in subset],
        categories=None if task.categories is None else [task.categories[i] for i in subset],
    )
    with ParallelGrader(task.reward_fn, config.grader_workers) as grader:
        records, timings = generate_and_grade(
            setup.engine, task.questions, task.truths, task.template, grader, setup.sampling, n
        )
    return task, records, timings, setup.output_dir
