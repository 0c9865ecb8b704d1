"""The code-based search for kissing configurations: shells, conflict graphs, the local search, programs."""

import itertools

import numpy as np

from alignment.kissing.search import (
    IndependentSetSearch,
    ball,
    code_seed,
    conflict_graph,
    constant_weight_code,
    distance_conflict_graph,
    johnson_bound,
    program_source,
    search_shell,
    shell,
)
from alignment.kissing.verifier import evaluate_program, verify_points


def test_shell_counts_match_the_theta_series():
    assert len(shell(1, 11)) == 22
    assert len(shell(2, 11)) == 4 * 55  # D11 roots
    assert len(shell(4, 11)) == 22 + 16 * 330  # ±2e_i and ±1 on four coordinates
    assert set((shell(4, 11) ** 2).sum(axis=1).tolist()) == {4}


def test_conflict_graph_joins_exactly_the_pairs_over_the_limit():
    x = shell(2, 4)
    adjacency = conflict_graph(x, 1, chunk_rows=5)
    for i, j in itertools.combinations(range(len(x)), 2):
        assert (j in adjacency[i]) == (int(x[i] @ x[j]) > 1) == (i in adjacency[j])


def test_mixed_shells_and_their_distance_graph():
    x = ball(3, 4, min_norm=2)
    assert len(x) == 4 * 6 + 8 * 4  # ±e_i ± e_j and ±1 on three coordinates in Z^4
    adjacency = distance_conflict_graph(x, 3, chunk_rows=7)
    for i, j in itertools.combinations(range(len(x)), 2):
        assert (j in adjacency[i]) == (int(((x[i] - x[j]) ** 2).sum()) < 3) == (i in adjacency[j])
    chosen = IndependentSetSearch(adjacency, seed=0).run(budget_s=0.3)
    assert verify_points(x[chosen].tolist(), dimension=4).validity == 1.0  # mixed norms, still valid


def test_local_search_finds_the_maximum_independent_set_of_a_cycle():
    n = 11  # an odd cycle: the optimum is 5
    cycle = [[(v - 1) % n, (v + 1) % n] for v in range(n)]
    best = IndependentSetSearch(cycle, seed=3).run(budget_s=1.0, target=5)
    assert len(best) == 5 and all(u not in best for v in best for u in cycle[v])


def test_constant_weight_code_reaches_the_johnson_bound_and_its_lift_is_582():
    assert johnson_bound(11, 4, 2) == 35
    blocks = constant_weight_code(11, 4, 2, budget_s=20.0, seed=0)
    assert len(blocks) == 35
    assert all(len(set(a) & set(b)) <= 2 for a, b in itertools.combinations(blocks, 2))
    points = code_seed(11, budget_s=20.0, seed=0)
    m = verify_points(points.tolist())
    assert (m.validity, m.score, m.min_squared_distance, m.max_squared_norm) == (1.0, 582.0, 4, 4)


def test_search_shell_result_is_valid_and_written_program_verifies():
    points, history = search_shell(2, 6, budget_s=0.5, seed=1)
    assert verify_points(points.tolist(), dimension=6).validity == 1.0
    assert history and history[-1][1] == len(points) and len(points) >= 30  # D6 roots: 60; greedy gets far
    source = program_source(np.array([[2] + [0] * 10, [0, 2] + [0] * 9]), "two axis vectors\nfrom a test")
    assert source.startswith("# two axis vectors\n# from a test\n")
    assert evaluate_program(source).score == 2.0
