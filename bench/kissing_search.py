"""The search approaches tried for kissing configurations in dimension 11, each under a time budget: the best
valid size it reached (checked by the exact verifier), its time, and why it stopped.

    nice -n 15 uv run python bench/kissing_search.py --budget-s 240

Approaches (every construction is found here; no coordinates come from elsewhere):
- code-seed: the shipped one, a constant-weight code lifted to sign patterns plus ±2e_i, then local search
  over the norm-4 shell (alignment.kissing.search.code_seeded_search);
- shell-4-random: the same local search over the norm-4 shell from a random greedy start, no code;
- ball-4-seeded: mixed shells, every vector of squared norm 1..4 (6,864), conflicts at squared distance < 4,
  from the code seed: can shorter vectors replace longer ones?
- neighbourhood-shell-4: from the code seed, free every vector on 8 random supports of its four-±1 part and
  re-solve that part exactly (branch and bound over all vectors compatible with the rest), again and again;
- shell-5: the norm-5 shell (15,224 vectors, inner products <= 2), from a random start;
- orbits-z11-shell-4: sets invariant under the cyclic shift of the 11 coordinates and -1: local search over
  the orbits (22 vectors each) of the norm-4 vectors with four ±1 entries, plus the 22 vectors ±2e_i;
- orbits-a11: the sum-zero vectors of Z^12 (a copy of R^11), unions of orbits of PSL(2, 11) or of its affine
  subgroup x -> ax + b (a a square), acting on the 12 points of the projective line over F_11, and of -1;
  the best union of pairwise compatible orbits by exhaustive branch and bound, mapped into Z^11 by the other
  11 rows of a Paley Hadamard matrix of order 12 (squared lengths scale by 12, so the verdict carries over).
"""

import platform
import random
import time

import numpy as np
import typer

from alignment.kissing.search import (
    IndependentSetSearch,
    ball,
    code_seed,
    code_seeded_search,
    conflict_graph,
    distance_conflict_graph,
    shell,
)
from alignment.kissing.verifier import verify_points

Q = 11  # the field F_11; the projective line has Q + 1 = 12 points, infinity numbered Q


def mobius(a: int, b: int, c: int, d: int) -> tuple[int, ...]:
    """x -> (ax + b) / (cx + d) on the projective line over F_11, as a permutation of range(12)."""

    def image(x: int) -> int:
        if x == Q:
            return Q if c == 0 else a * pow(c, -1, Q) % Q
        denominator = (c * x + d) % Q
        return Q if denominator == 0 else (a * x + b) * pow(denominator, -1, Q) % Q

    return tuple(image(x) for x in range(Q + 1))


def closure(generators: list[tuple[int, ...]]) -> np.ndarray:
    """Every product of the generating permutations, (order, 12)."""
    identity = tuple(range(Q + 1))
    group, frontier = {identity}, [identity]
    while frontier:
        frontier = [p for g in frontier for h in generators if (p := tuple(h[i] for i in g)) not in group]
        group.update(frontier)
    return np.array(sorted(group))


def paley_hadamard() -> np.ndarray:
    """A 12 x 12 Hadamard matrix (Paley I, q = 11), signs of columns changed so that row 0 is all ones."""
    residues = {x * x % Q for x in range(1, Q)}
    chi = [0] + [1 if x in residues else -1 for x in range(1, Q)]
    s = np.zeros((Q + 1, Q + 1), dtype=np.int64)
    s[0, 1:], s[1:, 0] = 1, -1
    s[1:, 1:] = [[chi[(j - i) % Q] for j in range(Q)] for i in range(Q)]
    h = np.eye(Q + 1, dtype=np.int64) + s
    assert (h @ h.T == (Q + 1) * np.eye(Q + 1)).all()
    return h * h[0]


def max_weight_independent_set(weights: list[int], neighbours: list[int], budget_s: float) -> tuple[list[int], bool]:
    """Branch and bound over bitsets (neighbours[i]: the bitset of i's neighbours); (best set, proved optimal).

    Bound: cover the candidates greedily by cliques; an independent set takes at most one vertex of each, so
    at most the heaviest of each clique. Branching on the candidate with most candidate neighbours."""
    best: list[list[int]] = [[]]
    best_weight = [0]
    deadline = time.monotonic() + budget_s

    def bound(candidates: int) -> int:
        total = 0
        while candidates:
            low = candidates & -candidates
            clique, heaviest = low, weights[low.bit_length() - 1]
            rest = candidates & ~low & neighbours[low.bit_length() - 1]
            while rest:
                pick = rest & -rest
                clique |= pick
                heaviest = max(heaviest, weights[pick.bit_length() - 1])
                rest &= ~pick & neighbours[pick.bit_length() - 1]
            candidates &= ~clique
            total += heaviest
        return total

    def grow(candidates: int, weight: int, chosen: list[int]) -> bool:
        if weight > best_weight[0]:
            best_weight[0], best[0] = weight, chosen
        if candidates == 0 or weight + bound(candidates) <= best_weight[0]:
            return True
        if time.monotonic() > deadline:
            return False
        members = [i for i in range(len(weights)) if candidates >> i & 1]
        i = max(members, key=lambda j: (neighbours[j] & candidates).bit_count())
        return grow(candidates & ~neighbours[i] & ~(1 << i), weight + weights[i], chosen + [i]) and grow(
            candidates & ~(1 << i), weight, chosen
        )

    proved = grow((1 << len(weights)) - 1, 0, [])
    return best[0], proved


def neighbourhood_search(budget_s: float, supports_freed: int = 8, per_solve_s: float = 10.0) -> tuple[np.ndarray, str]:
    """From the code seed, repeatedly free every vector on `supports_freed` random supports of the four-±1
    part and re-solve exactly which vectors (any support) can go there, keeping the result when no smaller."""
    d = 11
    vectors = shell(4, d)
    vectors = vectors[(np.abs(vectors) == 1).sum(axis=1) == 4]
    adjacency = conflict_graph(vectors, 2)
    index = {tuple(v): i for i, v in enumerate(vectors.tolist())}
    chosen = {index[tuple(v)] for v in code_seed(d, budget_s).tolist() if tuple(v) in index}
    support = [tuple(np.flatnonzero(v)) for v in vectors]
    rng = random.Random(0)
    began, rounds, proved, gains = time.monotonic(), 0, 0, 0
    while time.monotonic() - began < budget_s:
        rounds += 1
        freed = set(rng.sample(sorted({support[v] for v in chosen}), supports_freed))
        kept = {v for v in chosen if support[v] not in freed}
        blocked = kept | {u for v in kept for u in adjacency[v]}
        candidates = [v for v in range(len(vectors)) if v not in blocked]
        position = {v: i for i, v in enumerate(candidates)}
        neighbours = [sum(1 << position[u] for u in adjacency[v] if u in position) for v in candidates]
        best, optimal = max_weight_independent_set([1] * len(candidates), neighbours, per_solve_s)
        proved += optimal
        if len(best) >= len(chosen) - len(kept):
            gains += len(best) > len(chosen) - len(kept)
            chosen = kept | {candidates[i] for i in best}
    axes = np.concatenate([2 * np.eye(d, dtype=np.int64), -2 * np.eye(d, dtype=np.int64)])
    note = (
        f"{rounds} rounds freeing {supports_freed} supports, {proved} solved to optimality, {gains} gains; "
        f"budget reached"
    )
    return np.concatenate([axes, vectors[sorted(chosen)]]), note


def orbit_union(group: np.ndarray, max_norm: int, min_norm: int, budget_s: float) -> tuple[np.ndarray, str]:
    """The best union of compatible orbits of `group` (and -1) on sum-zero vectors of Z^12, mapped into Z^11."""
    vectors = ball(max_norm, Q + 1, min_norm)
    vectors = vectors[vectors.sum(axis=1) == 0]
    index = {tuple(v): i for i, v in enumerate(vectors.tolist())}
    seen = np.zeros(len(vectors), dtype=bool)
    orbits = []
    for i, v in enumerate(vectors):
        if not seen[i]:
            images = np.empty((len(group), Q + 1), dtype=np.int64)
            images[np.arange(len(group))[:, None], group] = v  # coordinate j of v moves to g(j)
            members = sorted({index[tuple(w)] for w in np.concatenate([images, -images]).tolist()})
            seen[members] = True
            orbits.append(vectors[members])

    def compatible(x: np.ndarray, y: np.ndarray, same: bool) -> bool:
        distance = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2 * x @ y.T
        if same:
            np.fill_diagonal(distance, max_norm)
        return bool(distance.min() >= max_norm)

    valid = [o for o in orbits if compatible(o, o, True)]
    neighbours = [
        sum(1 << j for j, b in enumerate(valid) if j != i and not compatible(a, b, False)) for i, a in enumerate(valid)
    ]
    chosen, proved = max_weight_independent_set([len(o) for o in valid], neighbours, budget_s)
    points = np.concatenate([valid[i] for i in chosen]) if chosen else np.zeros((0, Q + 1), dtype=np.int64)
    note = (
        f"{len(vectors)} vectors, {len(orbits)} orbits, {len(valid)} valid alone; "
        f"{'optimal union' if proved else 'budget reached'}"
    )
    return points @ paley_hadamard()[1:].T, note


def cyclic_orbits_shell_4(budget_s: float) -> tuple[np.ndarray, str]:
    """Unions of orbits of <cyclic shift, -1> on the norm-4 vectors with four ±1 entries, pairwise inner
    products <= 2, found by local search over the orbit graph; then the ±2e_i, which fit with all of them."""
    d = 11
    vectors = shell(4, d)
    vectors = vectors[(np.abs(vectors) == 1).sum(axis=1) == 4]
    index = {tuple(v): i for i, v in enumerate(vectors.tolist())}
    seen = np.zeros(len(vectors), dtype=bool)
    orbits = []
    for i, v in enumerate(vectors):
        if not seen[i]:
            images = np.array([np.roll(v, shift) for shift in range(d)])
            members = sorted({index[tuple(w)] for w in np.concatenate([images, -images]).tolist()})
            seen[members] = True
            gram = vectors[members] @ vectors[members].T
            np.fill_diagonal(gram, 0)
            if gram.max() <= 2:
                orbits.append(vectors[members])
    adjacency = [[j for j, b in enumerate(orbits) if j != i and (a @ b.T).max() > 2] for i, a in enumerate(orbits)]
    search = IndependentSetSearch(adjacency)
    chosen = search.run(budget_s)
    axes = np.concatenate([2 * np.eye(d, dtype=np.int64), -2 * np.eye(d, dtype=np.int64)])
    note = (
        f"{len(orbits)} orbits valid alone, {len(chosen)} chosen; last improvement at "
        f"{search.history[-1][0]:.1f} s; budget reached"
    )
    return np.concatenate([axes, *(orbits[i] for i in chosen)]), note


def independent_set(
    vectors: np.ndarray, adjacency: list[list[int]], budget_s: float, start: np.ndarray | None = None
) -> tuple[np.ndarray, str]:
    index = {tuple(v): i for i, v in enumerate(vectors.tolist())}
    members = [index[tuple(v)] for v in start.tolist()] if start is not None else []
    search = IndependentSetSearch(adjacency)
    best = search.run(budget_s, members)
    last = search.history[-1][0]
    return vectors[sorted(best)], f"{len(search.history) - 1} improvements, the last at {last:.1f} s; budget reached"


def main(budget_s: float = 240.0, only: str = "") -> None:
    """Run each approach (or those whose name contains --only) for at most --budget-s of search."""
    d = 11
    shell_4 = shell(4, d)
    approaches = {
        "code-seed": lambda: code_seeded_search(d, budget_s),
        "shell-4-random": lambda: independent_set(shell_4, conflict_graph(shell_4, 2), budget_s),
        "ball-4-seeded": lambda: independent_set(
            ball(4, d), distance_conflict_graph(ball(4, d), 4), budget_s, start=code_seed(d, budget_s)
        ),
        "neighbourhood-shell-4": lambda: neighbourhood_search(budget_s),
        "shell-5": lambda: independent_set(shell(5, d), conflict_graph(shell(5, d), 2), budget_s),
        "orbits-z11-shell-4": lambda: cyclic_orbits_shell_4(budget_s),
        "orbits-a11-psl-norm-2-4": lambda: orbit_union(
            closure([mobius(1, 1, 0, 1), mobius(4, 0, 0, 1), mobius(0, Q - 1, 1, 0)]), 4, 2, budget_s
        ),
        "orbits-a11-affine-norm-4-6": lambda: orbit_union(
            closure([mobius(1, 1, 0, 1), mobius(4, 0, 0, 1)]), 6, 4, budget_s
        ),
    }
    print(f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, budget {budget_s:g} s each")
    print("| approach | best valid size | time (s) | how it stopped |\n|---|---|---|---|")
    for name, approach in approaches.items():
        if only and only not in name:
            continue
        began = time.monotonic()
        points, note = approach()
        elapsed = time.monotonic() - began
        verdict = verify_points(points.tolist())
        size = f"{verdict.num_points}" if verdict.validity == 1.0 else f"invalid: {verdict.message}"
        print(f"| {name} | {size} | {elapsed:.0f} | {note} |", flush=True)


if __name__ == "__main__":
    typer.run(main)
