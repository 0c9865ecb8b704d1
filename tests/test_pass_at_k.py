"""pass@k and Best@k against brute-force enumeration of every k-subset."""

from itertools import combinations

import pytest

from alignment.pass_at_k import best_at_k, pass_at_k

CORRECT = [False, True, False, False, True, False]
SCORES = [-0.2, -0.9, -0.1, -0.5, -0.3, -0.1]  # a tie at -0.1: the earlier sample (index 2) ranks first


def brute_pass(correct, k):
    subsets = list(combinations(range(len(correct)), k))
    return sum(any(correct[i] for i in s) for s in subsets) / len(subsets)


def brute_best(correct, scores, k):
    subsets = list(combinations(range(len(correct)), k))
    picks = [max(s, key=lambda i: (scores[i], -i)) for s in subsets]
    return sum(correct[i] for i in picks) / len(subsets)


@pytest.mark.parametrize("k", range(1, 7))
def test_against_enumeration(k):
    assert pass_at_k(6, sum(CORRECT), k) == pytest.approx(brute_pass(CORRECT, k), abs=1e-12)
    assert best_at_k(CORRECT, SCORES, k) == pytest.approx(brute_best(CORRECT, SCORES, k), abs=1e-12)


def test_best_at_1_is_pass_at_1_and_best_at_n_is_top_sample():
    assert best_at_k(CORRECT, SCORES, 1) == pytest.approx(pass_at_k(6, 2, 1)) == pytest.approx(2 / 6)
    assert best_at_k(CORRECT, SCORES, 6) == 0.0  # the top-scored sample (index 2, tie broken early) is wrong
    assert best_at_k([True, False], [-0.1, -0.2], 2) == 1.0
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0


def test_k_out_of_range_raises():
    with pytest.raises(ValueError, match="k must be in"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="k must be in"):
        best_at_k([True], [0.0], 2)
