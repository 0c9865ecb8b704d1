"""Grading many responses at once in worker processes (sympy is single-threaded and holds the GIL)."""

import base64
import importlib
import math
import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from alignment.grading.worker_process import WorkerProcess, serve

RewardFn = Callable[[str, Any], dict[str, float]]
_MIN_PAIRS_PER_WORKER = 16  # below this, handing work out costs more than it saves
_SECONDS_PER_RESPONSE_BOUND = 10.0  # far above the grader's own per-call deadline plus a restart


def _import(path: str) -> RewardFn:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


_unpickled: dict[str, Any] = {}  # a worker's reward objects, by their pickled form


def _reward_object(reference: str) -> Any:
    """A reward object sent pickled (a task's RewardSet, which pickles as its source), built once per worker."""
    if reference not in _unpickled:
        _unpickled[reference] = pickle.loads(base64.b64decode(reference))
    return _unpickled[reference]


def _grade(request: dict[str, Any]) -> list[dict[str, float]] | dict[str, str]:
    pairs = request["pairs"]
    if "reward_object" in request:
        try:
            grader = _reward_object(request["reward_object"])
            return grader.grade_batch([response for response, _ in pairs], [truth for _, truth in pairs])
        except Exception as error:  # the parent raises it again: a worker's message, not a lost worker
            return {"error": f"{type(error).__name__}", "message": str(error)}
    reward_fn = _import(request["reward_fn"])
    return [reward_fn(response, truth) for response, truth in pairs]


def _serve() -> None:
    serve(_grade)


def _reference(reward_fn: Any) -> dict[str, str]:
    """How a worker finds `reward_fn`: an object that grades batches (a task's RewardSet) travels pickled, as its
    source; a function by its module and name."""
    if hasattr(reward_fn, "grade_batch"):
        return {"reward_object": base64.b64encode(pickle.dumps(reward_fn)).decode()}
    return {"reward_fn": _importable_name(reward_fn)}


def _importable_name(reward_fn: RewardFn) -> str:
    name = f"{reward_fn.__module__}:{reward_fn.__qualname__}"
    try:
        if _import(name) is reward_fn:
            return name
    except (AttributeError, ImportError, ValueError):
        pass
    raise ValueError(f"reward_fn {reward_fn!r} must be a module-level function to grade in parallel (or use workers=1)")


REWARD_PREFIX = "reward_"  # a task's per-function score key: reward_<name> (alignment/tasks/rewards.py)


class RewardError(ValueError):
    """A reward function that raised or returned something other than a score; the message names its task, the
    function and the row (alignment/tasks/rewards.py)."""


def _raised(reply: dict[str, str]) -> Exception:
    """A worker's error as the exception it raised (a RewardError stays one: its message names the row)."""
    kind = RewardError if reply["error"] == "RewardError" else RuntimeError
    return kind(reply["message"] if kind is RewardError else f"{reply['error']}: {reply['message']}")


class ParallelGrader:
    """Grades with `workers` long-lived processes; small batches are graded in this process.

    Workers start on first use and live until close(), so a train loop pays their start-up once.
    The reward function travels by name (module:function), so it must be importable.
    """

    def __init__(self, reward_fn: RewardFn, workers: int | None = None) -> None:
        self.reward_fn = reward_fn
        self.workers = workers if workers is not None else max(1, min(8, os.cpu_count() or 1))
        self._reference = _reference(reward_fn) if self.workers > 1 else {}
        self._processes = [WorkerProcess("alignment.grading.parallel", "_serve") for _ in range(self.workers)]

    def __call__(self, responses: Sequence[str], truths: Sequence[Any]) -> list[dict[str, float]]:
        if len(responses) != len(truths):
            raise ValueError(f"{len(responses)} responses but {len(truths)} ground truths")
        pairs = list(zip(responses, truths))
        if self.workers <= 1:
            return self._grade_here(pairs)
        # a task's rewards (user code) always run in the pool, under its deadline; the math grader only when large
        batching = "reward_object" in self._reference
        if not batching and len(pairs) < self.workers * _MIN_PAIRS_PER_WORKER:
            return self._grade_here(pairs)
        if not pairs:
            return []
        size = math.ceil(len(pairs) / min(self.workers, math.ceil(len(pairs) / _MIN_PAIRS_PER_WORKER)))
        chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
        for process, chunk in zip(self._processes, chunks):
            if not process.send(self._reference | {"pairs": chunk}, _SECONDS_PER_RESPONSE_BOUND * len(chunk)):
                raise RuntimeError("a grading worker died; see its reward function for crashes")
        scores: list[dict[str, float]] = []
        for process, chunk in zip(self._processes, chunks):
            reply = process.receive()
            if reply is None:
                raise RuntimeError(
                    f"a grading worker gave no answer for {len(chunk)} responses within "
                    f"{_SECONDS_PER_RESPONSE_BOUND * len(chunk):.0f} s (a reward that hangs or crashes its process)"
                )
            if isinstance(reply, dict):
                raise _raised(reply)
            scores += reply
        return scores

    def _grade_here(self, pairs: list[tuple[str, Any]]) -> list[dict[str, float]]:
        if hasattr(self.reward_fn, "grade_batch"):
            return self.reward_fn.grade_batch([r for r, _ in pairs], [t for _, t in pairs])
        return [self.reward_fn(response, truth) for response, truth in pairs]

    def close(self) -> None:
        for process in self._processes:
            process.close()

    def __enter__(self) -> "ParallelGrader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
