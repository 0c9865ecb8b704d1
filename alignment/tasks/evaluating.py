"""Evaluating any --task with the generation scripts (scripts/eval_zero_shot.py, scripts/best_of_n.py), the built-in
math task as a user's: its evaluation rows (alignment/tasks/building.py evaluation_task), checked before any model
loads, sampled and graded by its own rewards."""

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import typer

from alignment.data.task import Task
from alignment.evaluation import GradedRollout, generate_and_grade
from alignment.grading.parallel import ParallelGrader
from alignment.models.loading import load_tokenizer
from alignment.prompts import chat_renderer
from alignment.run import generation
from alignment.tasks.building import evaluation_task, needs_chat_template, task_stop


@dataclass
class TaskEvaluation:
    task: Task  # the rows evaluated: --limit of them
    records: list[GradedRollout]  # question-major, n per question, ground truths as generations.jsonl logs them
    timings: dict[str, float]  # generation_s, grading_s
    output_dir: Path
    backend: str
    answer_graded: bool  # the rewards graded a format and an answer (the course's graders): its categories apply


def task_records(config: Any, n: int = 1, before_sampling: Callable[[Task], None] | None = None) -> TaskEvaluation:
    """--task's evaluation rows (--limit of them, spread by a fixed seed) checked before any model loads, then sampled
    `n` times each and graded by the task's rewards. `before_sampling(task)` sees the Task about to be sampled as soon
    as its prompts are final: before any model loads, or, for a task in the model's chat turn, once the tokenizer is.
    A record's ground truth is its row, or, where the rewards grade a format and an answer as the course's graders do,
    the row's answer field (math's answer string), as the course logs it. `config` is a generation script's
    (alignment/run/generation.py) with the --task settings."""
    check = before_sampling or (lambda task: None)
    try:
        if config.limit is not None and config.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {config.limit}")
        task = evaluation_task(config).subset(config.limit)  # rows, prompts, rewards checked: each error one line
        stop, chat = task_stop(config), needs_chat_template(config)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    if not chat:
        check(task)
    setup = generation.set_up(config, stop)
    if chat:
        task = evaluation_task(config, chat_renderer(load_tokenizer(config.model)), check=False).subset(config.limit)
        check(task)
    with ParallelGrader(task.reward_fn, config.grader_workers) as grader:
        records, timings = generate_and_grade(
            setup.engine, task.questions, task.truths, task.template, grader, setup.sampling, n
        )
    answer_graded = all(r.answer_graded for r in records)
    if answer_graded:  # the course's generations: the answer string (the row's answer_field); else the whole row
        records = [replace(r, ground_truth=task.logged_truth(r.ground_truth)) for r in records]
    return TaskEvaluation(task, records, timings, setup.output_dir, setup.backend, answer_graded)
