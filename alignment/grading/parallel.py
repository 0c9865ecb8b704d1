"""Grading many responses at once in worker processes (sympy is single-threaded and holds the GIL)."""

import importlib
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from alignment.grading.worker_process import WorkerProcess, serve

RewardFn = Callable[[str, Any], dict[str, float]]
_MIN_PAIRS_PER_WORKER = 16  # below this, handing work out costs more than it saves
_SECONDS_PER_RESPONSE_BOUND = 10.0  # far above the grader's own per-call deadline plus a restart


def _import(path: str) -> RewardFn:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _grade(request: dict[str, Any]) -> list[dict[str, float]]:
    reward_fn = _import(request["reward_fn"])
    return [reward_fn(response, truth) for response, truth in request["pairs"]]


def _serve() -> None:
    serve(_grade)


def _importable_name(reward_fn: RewardFn) -> str:
    name = f"{reward_fn.__module__}:{reward_fn.__qualname__}"
    try:
        if _import(name) is reward_fn:
            return name
    except (AttributeError, ImportError, ValueError):
        pass
    raise ValueError(f"reward_fn {reward_fn!r} must be a module-level function to grade in parallel (or use workers=1)")


class ParallelGrader:
    """Grades with `workers` long-lived processes; small batches are graded in this process.

    Workers start on first use and live until close(), so a train loop pays their start-up once.
    The reward function travels by name (module:function), so it must be importable.
    """

    def __init__(self, reward_fn: RewardFn, workers: int | None = None) -> None:
        self.reward_fn = reward_fn
        self.workers = workers if workers is not None else max(1, min(8, os.cpu_count() or 1))
        self._name = _importable_name(reward_fn) if self.workers > 1 else ""
        self._processes = [WorkerProcess("alignment.grading.parallel", "_serve") for _ in range(self.workers)]

    def __call__(self, responses: Sequence[str], truths: Sequence[Any]) -> list[dict[str, float]]:
        if len(responses) != len(truths):
            raise ValueError(f"{len(responses)} responses but {len(truths)} ground truths")
        pairs = list(zip(responses, truths))
        if self.workers <= 1 or len(pairs) < self.workers * _MIN_PAIRS_PER_WORKER:
            return [self.reward_fn(response, truth) for response, truth in pairs]
        size = math.ceil(len(pairs) / self.workers)
        chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
        for process, chunk in zip(self._processes, chunks):
            if not process.send({"reward_fn": self._name, "pairs": chunk}, _SECONDS_PER_RESPONSE_BOUND * len(chunk)):
                raise RuntimeError("a grading worker died; see its reward function for crashes")
        scores: list[dict[str, float]] = []
        for process, chunk in zip(self._processes, chunks):
            reply = process.receive()
            if reply is None:
                raise RuntimeError(f"a grading worker gave no answer for {len(chunk)} responses")
            scores += reply
        return scores

    def close(self) -> None:
        for process in self._processes:
            process.close()

    def __enter__(self) -> "ParallelGrader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
