"""Search code for kissing configurations: integer vectors of one squared norm N whose pairwise inner products
are at most N / 2 (then |x - y|^2 = 2N - 2<x, y> >= N = max |x|^2, so the set is valid).

Valid sets are the independent sets of the conflict graph on a shell of integer vectors (edge: 2<x, y> > N).
`IndependentSetSearch` is an iterated local search: greedy fill, then moves that force one vertex in, evict
its (at most two) chosen neighbours and refill around them, restarting from the best set when it falls behind.

The seed for N = 4 in dimension 11 is code-based: the 22 vectors ±2e_i, and every sign pattern on the
supports of a binary constant-weight code (weight 4, any two supports sharing at most 2 coordinates, so any
two such vectors have inner product <= 2). The code itself is found by the same search on the graph of
4-subsets; 35 supports (the packing optimum) give 22 + 16 * 35 = 582 vectors.
"""

import itertools
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np


def shell(norm: int, dimension: int) -> np.ndarray:
    """All integer vectors of squared norm `norm` in Z^dimension, (count, dimension) int64, sorted."""
    vectors: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...], remaining: int) -> None:
        if len(prefix) == dimension:
            if remaining == 0:
                vectors.append(prefix)
            return
        limit = int(remaining**0.5)
        for c in range(-limit, limit + 1):
            if c * c <= remaining:
                extend(prefix + (c,), remaining - c * c)

    extend((), norm)
    return np.array(vectors, dtype=np.int64).reshape(-1, dimension)


def conflict_graph(vectors: np.ndarray, limit: int, chunk_rows: int = 512) -> list[list[int]]:
    """Adjacency lists of the graph joining rows whose inner product exceeds `limit` (vectors (n, d))."""
    adjacency: list[list[int]] = []
    for start in range(0, len(vectors), chunk_rows):
        gram = vectors[start : start + chunk_rows] @ vectors.T
        for offset, row in enumerate(gram > limit):
            row[start + offset] = False
            adjacency.append(np.flatnonzero(row).tolist())
    return adjacency


def ball(max_norm: int, dimension: int, min_norm: int = 1) -> np.ndarray:
    """Mixed shells: every integer vector with min_norm <= |x|^2 <= max_norm, (count, dimension) int64."""
    return np.concatenate([shell(norm, dimension) for norm in range(min_norm, max_norm + 1)])


def distance_conflict_graph(vectors: np.ndarray, min_distance: int, chunk_rows: int = 512) -> list[list[int]]:
    """Adjacency lists of the graph joining rows at squared distance below `min_distance` (vectors (n, d)).

    With min_distance = the largest squared norm allowed, its independent sets are valid configurations even
    when the norms differ (the handout's lemma needs only min |x - y|^2 >= max |x|^2)."""
    norms = (vectors * vectors).sum(axis=1)
    adjacency: list[list[int]] = []
    for start in range(0, len(vectors), chunk_rows):
        rows = vectors[start : start + chunk_rows]
        distance = norms[start : start + chunk_rows, None] + norms[None, :] - 2 * rows @ vectors.T
        for offset, row in enumerate(distance < min_distance):
            row[start + offset] = False
            adjacency.append(np.flatnonzero(row).tolist())
    return adjacency


@dataclass
class IndependentSetSearch:
    """Iterated local search for a large independent set of a graph given as adjacency lists."""

    adjacency: list[list[int]]
    seed: int = 0
    max_evictions: int = 2  # a forced insertion may evict this many chosen neighbours
    history: list[tuple[float, int]] = field(default_factory=list)  # (seconds, best size) at each improvement

    def __post_init__(self) -> None:
        n = len(self.adjacency)
        self.rng = random.Random(self.seed)
        self.chosen = [False] * n
        self.tight = [0] * n  # chosen neighbours of each vertex
        self.size = 0
        self.best: list[int] = []

    def _add(self, v: int) -> None:
        self.chosen[v] = True
        self.size += 1
        for u in self.adjacency[v]:
            self.tight[u] += 1

    def _remove(self, v: int) -> None:
        self.chosen[v] = False
        self.size -= 1
        for u in self.adjacency[v]:
            self.tight[u] -= 1

    def _fill(self, candidates: Sequence[int]) -> None:
        for v in candidates:
            if not self.chosen[v] and self.tight[v] == 0:
                self._add(v)

    def _reset(self, members: Sequence[int]) -> None:
        for v in [v for v, c in enumerate(self.chosen) if c]:
            self._remove(v)
        for v in members:
            self._add(v)

    def run(
        self,
        budget_s: float,
        start: Sequence[int] = (),
        on_improve: Callable[[int], None] | None = None,
        target: int | None = None,
    ) -> list[int]:
        """The best independent set found within `budget_s` seconds (or once it reaches `target`), grown from
        `start` (itself independent)."""
        began = time.monotonic()
        self._reset(start)
        order = list(range(len(self.adjacency)))
        self.rng.shuffle(order)
        self._fill(order)
        self.best = [v for v, c in enumerate(self.chosen) if c]
        self.history.append((0.0, len(self.best)))
        while time.monotonic() - began < budget_s and (target is None or len(self.best) < target):
            for _ in range(1000):  # check the clock every thousand moves
                v = self.rng.randrange(len(order))
                if self.chosen[v] or self.tight[v] > self.max_evictions:
                    continue
                evicted = [u for u in self.adjacency[v] if self.chosen[u]]
                for u in evicted:
                    self._remove(u)
                self._add(v)
                around = [w for u in evicted for w in self.adjacency[u]]
                self.rng.shuffle(around)
                self._fill(around)
                if self.size > len(self.best):
                    self.best = [u for u, c in enumerate(self.chosen) if c]
                    self.history.append((time.monotonic() - began, self.size))
                    if on_improve:
                        on_improve(self.size)
                elif self.size < len(self.best) - 3:
                    self._reset(self.best)
        return self.best


def johnson_bound(dimension: int, weight: int, max_common: int) -> int:
    """Upper bound on the number of weight-subsets of range(dimension) pairwise sharing <= max_common elements."""
    if max_common == 0:
        return dimension // weight
    return dimension * johnson_bound(dimension - 1, weight - 1, max_common - 1) // weight


def constant_weight_code(
    dimension: int, weight: int, max_common: int, budget_s: float, seed: int = 0
) -> list[tuple[int, ...]]:
    """Supports (weight-subsets of range(dimension)) pairwise sharing at most `max_common` coordinates; the
    search stops early at the Johnson bound."""
    blocks = list(itertools.combinations(range(dimension), weight))
    incidence = np.zeros((len(blocks), dimension), dtype=np.int64)
    for row, block in enumerate(blocks):
        incidence[row, list(block)] = 1
    search = IndependentSetSearch(conflict_graph(incidence, max_common), seed=seed, max_evictions=1)
    return [blocks[i] for i in search.run(budget_s, target=johnson_bound(dimension, weight, max_common))]


def code_seed(dimension: int, budget_s: float, seed: int = 0) -> np.ndarray:
    """Squared norm 4: ±2e_i, and all 16 sign patterns on each support of a weight-4 code with overlaps <= 2."""
    axes = [2 * s * np.eye(dimension, dtype=np.int64)[i] for i in range(dimension) for s in (1, -1)]
    rows = list(axes)
    for block in constant_weight_code(dimension, 4, 2, budget_s, seed):
        for signs in itertools.product((1, -1), repeat=4):
            v = np.zeros(dimension, dtype=np.int64)
            v[list(block)] = signs
            rows.append(v)
    return np.array(rows, dtype=np.int64)


def search_shell(
    norm: int,
    dimension: int,
    budget_s: float,
    seed: int = 0,
    start: np.ndarray | None = None,
    on_improve: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, list[tuple[float, int]]]:
    """Local search over the whole shell of squared norm `norm`, from `start` (rows of that shell) if given.

    Returns the vectors found and the (seconds, size) history of improvements. Building the shell and its
    graph counts against `budget_s`."""
    began = time.monotonic()
    vectors = shell(norm, dimension)
    index = {tuple(v): i for i, v in enumerate(vectors.tolist())}
    members = [index[tuple(v)] for v in (start.tolist() if start is not None else [])]
    search = IndependentSetSearch(conflict_graph(vectors, norm // 2), seed=seed)
    best = search.run(max(0.0, budget_s - (time.monotonic() - began)), members, on_improve)
    return vectors[sorted(best)], search.history


def program_source(points: np.ndarray, header: str) -> str:
    """A self-contained Python program defining `points` (one row per line, so diffs and prompts stay legible)."""
    rows = "\n".join(" ".join(str(c) for c in row) for row in points.tolist())
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    return (
        f'{comment}ROWS = """\n{rows}\n"""\n\n'
        "points = [[int(c) for c in line.split()] for line in ROWS.strip().splitlines()]\n"
    )


def code_seeded_search(dimension: int, budget_s: float, seed: int = 0) -> tuple[np.ndarray, str]:
    """The code seed (at most half the budget), then local search over the norm-4 shell for the rest.

    Returns the points and a one-line account of what each stage gave."""
    began = time.monotonic()
    start = code_seed(dimension, budget_s / 2, seed)
    seeded_s = time.monotonic() - began
    points, history = search_shell(4, dimension, max(0.0, budget_s - seeded_s), seed, start=start)
    shell_size = 2 * dimension + 16 * math.comb(dimension, 4)  # ±2e_i and ±1 on four coordinates
    note = (
        f"code seed: {len(start)} points ({seeded_s:.1f} s); local search over the {shell_size} "
        f"vectors of squared norm 4: {len(points)} points after {len(history) - 1} improvements "
        f"({time.monotonic() - began:.1f} s in all)"
    )
    return points, note
