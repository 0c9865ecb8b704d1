"""The environments `--env NAME` selects: how to build one (a fresh instance per episode) and its tasks.

A new environment is a class implementing alignment.envs.base.Environment and one line here.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alignment.data.task import Task
from alignment.envs.base import Environment
from alignment.envs.calculator import CalculatorEnv, arithmetic_tasks
from alignment.kissing.environment import HANDOUT_PROMPT, grade_reply, kissing_environment
from alignment.run.setup import math_tasks


@dataclass(frozen=True)
class EnvSpec:
    make: Callable[[Any], Environment]  # run settings -> a fresh environment
    tasks: Callable[[Any], tuple[Task, Task]]  # run settings -> (training, validation) tasks
    about: str


def _generated(config: Any) -> tuple[Task, Task]:
    return arithmetic_tasks(config.n_train_prompts, config.n_eval_examples, config.seed)


def _kissing_tasks(config: Any) -> tuple[Task, Task]:
    """The handout's one task, n_train_prompts times for training (each group plays it anew) and
    n_eval_examples times for validation."""

    def copies(n: int) -> Task:
        return Task([HANDOUT_PROMPT] * n, [""] * n, "{question}", grade_reply)

    return copies(config.n_train_prompts), copies(config.n_eval_examples)


ENVIRONMENTS: dict[str, EnvSpec] = {
    "calculator": EnvSpec(
        lambda c: CalculatorEnv(c.env_max_turns or 4), math_tasks, "calculator tool on --dataset (e.g. gsm8k)"
    ),
    "calculator_arithmetic": EnvSpec(
        lambda c: CalculatorEnv(c.env_max_turns or 4), _generated, "calculator tool on generated word problems"
    ),
    "arithmetic_no_tool": EnvSpec(
        lambda c: CalculatorEnv(1, tool=False), _generated, "the generated word problems, one turn, no tool"
    ),
    "kissing": EnvSpec(
        lambda c: kissing_environment(max_turns=c.env_max_turns or 4),
        _kissing_tasks,
        "PKU HW3 §7: write a kissing configuration's program, read the evaluator's verdict, refine",
    ),
}


def env_spec(name: str) -> EnvSpec:
    """The registered environment `name`; a ValueError naming --env and the choices otherwise."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"--env {name!r} is not an environment; choose one of {', '.join(sorted(ENVIRONMENTS))}")
    return ENVIRONMENTS[name]
