"""The built-in environments, written against the contract a user's follows (alignment/envs/definition.py):
module attributes that `--env NAME` loads through alignment/envs/loading.py's BUILTIN_ENVS, as it loads
`--env file.py:NAME`. Each is a function of the run's settings returning an EnvironmentDefinition.
"""

from typing import Any

from alignment.data.task import Task
from alignment.envs.calculator import CalculatorEnv, arithmetic_tasks
from alignment.envs.definition import EnvironmentDefinition
from alignment.kissing.environment import HANDOUT_PROMPT, kissing_environment
from alignment.tasks.builtin import math_rows
from alignment.tasks.definition import Row


def _rows(task: Task) -> list[Row]:
    return [{"question": q, "answer": a} for q, a in zip(task.questions, task.truths)]


def _math_rows(settings: Any) -> tuple[list[Row], list[Row]]:
    """The math task's questions and answers (--dataset's, as `--task math` picks them), its notes printed."""
    chosen = math_rows(settings)
    for note in chosen.notes:
        print(note)
    train, validation = (
        [{"question": r["question"], "answer": r["answer"]} for r in rows] for rows in (chosen.train, chosen.validation)
    )
    return train, validation


def _generated_rows(settings: Any) -> tuple[list[Row], list[Row]]:
    train, validation = arithmetic_tasks(settings.n_train_prompts, settings.n_eval_examples, settings.seed)
    return _rows(train), _rows(validation)


def calculator(settings: Any) -> EnvironmentDefinition:
    """The calculator tool on --dataset's problems (e.g. gsm8k)."""
    return EnvironmentDefinition(lambda: CalculatorEnv(settings.env_max_turns or 4), rows=_math_rows)


def calculator_arithmetic(settings: Any) -> EnvironmentDefinition:
    """The calculator tool on generated word problems."""
    return EnvironmentDefinition(lambda: CalculatorEnv(settings.env_max_turns or 4), rows=_generated_rows)


def arithmetic_no_tool(settings: Any) -> EnvironmentDefinition:
    """The generated word problems in one turn, without the tool."""
    return EnvironmentDefinition(lambda: CalculatorEnv(1, tool=False), rows=_generated_rows)


def kissing(settings: Any) -> EnvironmentDefinition:
    """PKU HW3 §7: write a kissing configuration's program, read the evaluator's verdict, refine. The handout's one
    task, --n-train-prompts times for training (each group plays it anew), --n-eval-examples times for validation."""

    def copies(n: int) -> list[Row]:
        return [{"question": HANDOUT_PROMPT, "answer": ""} for _ in range(n)]

    return EnvironmentDefinition(
        lambda: kissing_environment(max_turns=settings.env_max_turns or 4),
        rows=lambda s: (copies(s.n_train_prompts), copies(s.n_eval_examples)),
    )
