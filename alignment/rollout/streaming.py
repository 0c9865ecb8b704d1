"""Streaming generation with in-flight weight updates: the contract between a generating engine and the threads
that feed it (alignment/ray/actors.py's Generator under --strategy async).

An engine that streams (`StreamingEngine`: the hf and vLLM engines) takes work from a `StreamFeed` as it comes,
yields each group (one prompt's n rollouts) the moment its last response finishes, and takes the newest weights
offered to the feed:
- with partial rollouts, between two decode steps: unfinished responses continue under the new policy;
- without, only when no response is running (between units for hf; vLLM stops admitting prompts, drains, loads).
Every token records the version of the weights that sampled it (Rollout.versions) beside its log-prob under the
distribution it was drawn from (the behaviour log-prob), so the learner can weigh and clip each token against
the right policy (alignment/grpo/objective.py, the decoupled objective).

After an in-flight load the keys and values already cached were computed by the old weights:
- recompute (AReaL's interruptible generation): they are computed again under the new weights from the prompt
  and the tokens so far, so every later token is exactly a sample of the new policy;
- keep (PipelineRL): the cache stays, later tokens are sampled by the new weights attending to the old keys and
  values (cheaper at scale; neither policy's exact sample).

A new unit never starts on weights older than the newest offered, nor below its `floor`: the driver's staleness
bound (alignment/ray/async_driver.py) rests on that. Threads: only the thread iterating `stream` touches the engine;
any other thread may offer weights, submit work or stop the feed.
"""

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

from alignment.rollout.interface import Rollout, SamplingConfig

KVAfterLoad = Literal["recompute", "keep"]


@dataclass(frozen=True)
class Barrier:
    """Work that is not sampling (e.g. a validation): the engine finishes every running response, makes sure it holds
    weights of at least version `floor`, then yields the barrier for the caller to carry out."""

    floor: int


@dataclass(frozen=True)
class Unit:
    """Prompts sampled together with one seed (as one `generate` call would), n rollouts each; `keys` name each prompt's
    group for the caller. Not started on weights older than version `floor`. `positions`: each prompt's position in
    the call whose seed the unit carries (None: 0, 1, ...; interface.prompt_seed), so that no two parts of a call
    handed out in several units draw the same random numbers (on vLLM, which seeds each prompt's request, a part
    samples exactly as in the whole call)."""

    keys: tuple[int, ...]
    prompts: tuple[str, ...]
    n: int
    sampling: SamplingConfig
    floor: int = 0
    positions: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.positions is not None and len(self.positions) != len(self.prompts):
            raise ValueError(f"a unit of {len(self.prompts)} prompts needs as many positions, got {self.positions}")

    def seed_positions(self) -> tuple[int, ...]:
        return tuple(range(len(self.prompts))) if self.positions is None else self.positions


@dataclass
class FinishedGroup:
    key: int
    rollouts: list[Rollout]  # the prompt's n rollouts, with per-token versions; prompt_index 0


class StreamFeed:
    """Work and weights for a streaming engine, shared between its thread and the threads that feed it."""

    def __init__(self, version: int = 0) -> None:
        self._lock = threading.Condition(threading.RLock())
        self._items: deque[Unit | Barrier] = deque()
        self._weights: tuple[dict[str, torch.Tensor], int] | None = None
        self._stopped = False
        self.version = version  # of the weights the engine holds (written by the engine's thread)
        self.idle_s = 0.0  # seconds the engine waited with nothing it could do
        self.load_s = 0.0  # seconds spent loading weights
        self.loads = 0

    # --- any thread
    def offer(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Weights of `version` for the engine to take; an older offer not yet taken is replaced."""
        with self._lock:
            if version > self.version and (self._weights is None or version > self._weights[1]):
                self._weights = (state_dict, version)
                self._lock.notify_all()

    def submit(self, items: Sequence[Unit | Barrier]) -> None:
        with self._lock:
            self._items.extend(items)
            self._lock.notify_all()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._lock.notify_all()

    # --- the engine's thread
    @property
    def stopped(self) -> bool:
        return self._stopped

    def head(self) -> Unit | Barrier | None:
        with self._lock:
            return self._items[0] if self._items else None

    def pop(self) -> Unit | Barrier:
        with self._lock:
            return self._items.popleft()

    def has_weights(self) -> bool:
        return self._weights is not None

    def take_weights(self) -> tuple[dict[str, torch.Tensor], int] | None:
        with self._lock:
            offered, self._weights = self._weights, None
            return offered

    def wait(self, ready: Callable[[], bool]) -> bool:
        """Block until `ready()` or the feed stops (counted as idle); returns False when stopped."""
        with self._lock:
            start = time.perf_counter()
            self._lock.wait_for(lambda: self._stopped or ready())
            self.idle_s += time.perf_counter() - start
            return not self._stopped

    def next_item(self) -> Unit | Barrier | None:
        """The next item, waiting for one; None once stopped."""
        return self.pop() if self.wait(lambda: bool(self._items)) else None

    def load(self, apply: Callable[[dict[str, torch.Tensor], int], None], floor: int = 0) -> bool:
        """Apply the newest offered weights, if any, waiting for an offer while they are older than `floor`;
        False when the feed stopped first. `apply(state_dict, version)` loads them into the engine."""
        while True:
            offered = self.take_weights()
            if offered is not None:
                start = time.perf_counter()
                apply(*offered)
                self.version = offered[1]
                self.load_s += time.perf_counter() - start
                self.loads += 1
            if self.version >= floor:
                return True
            if not self.wait(self.has_weights):
                return False


class StreamingEngine(Protocol):
    def stream(self, feed: StreamFeed, partial: bool, kv: KVAfterLoad) -> Iterator[FinishedGroup | Barrier]:
        """Sample the feed's units as they come, yielding each group once its n rollouts are finished and each barrier
        once the engine is drained; returns when the feed is stopped."""
        ...


def groups_of_rows(rows: Iterator[tuple[int, Rollout]], n: int) -> Iterator[tuple[int, list[Rollout]]]:
    """(row, rollout) pairs in any order, rows of prompt i being i * n .. (i + 1) * n - 1 -> (prompt i, its n rollouts
    in row order) as soon as the last of them arrives."""
    pending: dict[int, dict[int, Rollout]] = {}
    for row, rollout in rows:
        group = pending.setdefault(row // n, {})
        group[row] = rollout
        if len(group) == n:
            del pending[row // n]
            yield row // n, [group[r] for r in sorted(group)]
