"""A task's reward functions as one grader: each function's score logged on its own, their weighted sum trained on.

`RewardSet(responses, rows)` is what the grading pool calls (alignment/grading/parallel.py). It travels to worker
processes and Ray actors by name: pickling it keeps only its source and the run's settings, and the receiving
process loads the task again (alignment/tasks/loading.py), so a reward defined in a user's file needs no import
path of its own.
"""

import asyncio
import importlib
import inspect
import json
import math
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from alignment.grading.parallel import REWARD_PREFIX, RewardError
from alignment.tasks.definition import Reward, Row


def describe_row(row: Any, width: int = 100) -> str:
    """A row as a short one-line excerpt for messages."""
    try:
        text = json.dumps(row, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(row)
    return text if len(text) <= width else text[: width - 3] + "..."


def takes_arguments(fn: Any, count: int) -> bool:
    """Whether `fn` can be called with `count` positional arguments."""
    try:
        inspect.signature(fn).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # a builtin without a signature: let the call decide
        return True
    return True


class RewardSet:
    """Reward functions of task `task` with their weights; `reference` (source, settings) rebuilds it elsewhere."""

    def __init__(self, task: str, rewards: Sequence[Reward], reference: tuple[str, dict[str, Any]] | None = None):
        if not rewards:
            raise RewardError(f"task {task}: no reward functions (TaskDefinition.rewards is empty)")
        labels = [r.label for r in rewards]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise RewardError(f"task {task}: two rewards are named {repeated[0]!r}; give one a name=")
        for r in rewards:
            if not callable(r.fn):
                raise RewardError(f"task {task}: reward {r.label} is not callable ({type(r.fn).__name__})")
            if not isinstance(r.weight, (int, float)) or not math.isfinite(r.weight):
                raise RewardError(f"task {task}: reward {r.label} has weight {r.weight!r}; a weight is a finite number")
            if not takes_arguments(r.fn, 2):
                shape = "(completions, rows)" if r.batched else "(completion, row)"
                raise RewardError(f"task {task}: reward {r.label} must take two arguments {shape}")
        self.task, self.rewards, self.reference = task, list(rewards), reference

    @property
    def names(self) -> list[str]:
        return [REWARD_PREFIX + r.label for r in self.rewards if r.log_apart]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self.reference is None:
            raise TypeError(
                f"task {self.task} was given as an object, so its rewards cannot travel to another process; "
                "name it with --task file.py:NAME, or grade in this process (--grader-workers 1)"
            )
        # loading.py builds RewardSets, so it is found by name here rather than imported in a circle
        return importlib.import_module("alignment.tasks.loading").reward_set_for, self.reference

    def __call__(self, response: str, row: Row) -> dict[str, float]:
        return self.grade_batch([response], [row])[0]

    def grade_batch(self, responses: Sequence[str], rows: Sequence[Row]) -> list[dict[str, float]]:
        """One score dict per response: `reward` (the weighted sum of the scores that apply), `reward_<name>` per
        function logged apart (NaN where it returned None) and the extra keys of rewards that return dicts."""
        if len(responses) != len(rows):
            raise ValueError(f"{len(responses)} responses but {len(rows)} rows")
        scores: list[dict[str, float]] = [{"reward": 0.0} for _ in responses]
        for reward in self.rewards:
            values = self._run(reward, responses, rows)
            for i, (value, row) in enumerate(zip(values, rows)):
                number, extra = self._number(reward, value, row)
                if reward.log_apart:
                    scores[i][REWARD_PREFIX + reward.label] = number
                scores[i] |= extra
                if not math.isnan(number):
                    scores[i]["reward"] += reward.weight * number
        return scores

    def _fail(self, reward: Reward, row: Any, what: str) -> RewardError:
        return RewardError(f"task {self.task}: reward {reward.label} on row {describe_row(row)}: {what}")

    def _run(self, reward: Reward, responses: Sequence[str], rows: Sequence[Row]) -> list[Any]:
        if reward.batched:
            try:
                values = _resolve(reward.fn(list(responses), list(rows)))
            except Exception as error:
                raise self._fail(reward, rows[0], f"raised {type(error).__name__}: {error}") from error
            if not isinstance(values, Sequence) or isinstance(values, (str, bytes)) or len(values) != len(rows):
                got = f"{len(values)} values" if isinstance(values, Sequence) else type(values).__name__
                raise self._fail(reward, rows[0], f"a batched reward returns one value per completion, got {got}")
            return list(values)
        values: list[Any] = []
        for response, row in zip(responses, rows):
            try:
                values.append(reward.fn(response, row))
            except Exception as error:
                raise self._fail(reward, row, f"raised {type(error).__name__}: {error}") from error
        if any(inspect.isawaitable(v) for v in values):  # an async reward: its rows' calls run concurrently
            values = _resolve(_gather(values))
            for value, row in zip(values, rows):
                if isinstance(value, BaseException):
                    raise self._fail(reward, row, f"raised {type(value).__name__}: {value}") from value
        return values

    def _number(self, reward: Reward, value: Any, row: Row) -> tuple[float, dict[str, float]]:
        extra: dict[str, float] = {}
        if isinstance(value, Mapping):
            if "reward" not in value:
                raise self._fail(reward, row, f"returned a dict without 'reward' (keys: {', '.join(value)})")
            extra = {k: float(v) for k, v in value.items() if k != "reward"}
            value = value["reward"]
        if value is None:
            return math.nan, extra
        if isinstance(value, bool) or (isinstance(value, (int, float)) and not isinstance(value, complex)):
            number = float(value)
        elif hasattr(value, "item") and callable(value.item):  # a 0-d numpy or torch number
            number = float(value.item())
        else:
            kind = type(value).__name__
            raise self._fail(reward, row, f"returned {value!r} ({kind}); a reward returns a number or None")
        if not math.isfinite(number):
            raise self._fail(reward, row, f"returned {number}; a reward is a finite number or None")
        return number, extra


async def _gather(values: list[Any]) -> list[Any]:
    awaited = (v if inspect.isawaitable(v) else _done(v) for v in values)
    return list(await asyncio.gather(*awaited, return_exceptions=True))


async def _done(value: Any) -> Any:
    return value


def _resolve(value: Any) -> Any:
    """An async reward's result, run to completion on a loop of its own (grading runs outside any event loop)."""
    if not inspect.isawaitable(value):
        return value

    async def wait(awaitable: Awaitable[Any]) -> Any:
        return await awaitable

    return asyncio.run(wait(value))
