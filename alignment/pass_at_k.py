"""pass@k and Best@k estimated without bias from n >= k samples per problem."""

from collections.abc import Sequence
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct.

    1 - C(n - c, k) / C(n, k)  (Chen et al., 2021).
    """
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)


def best_at_k(correct: Sequence[bool], scores: Sequence[float], k: int) -> float:
    """Expected correctness of the highest-scoring sample among k drawn without replacement from n.

    Rank samples by score (ties: earlier sample first); the sample of rank r (0 = best) is the pick of a
    random k-subset exactly when it is in the subset and the others come from the n - 1 - r below it:
    C(n - 1 - r, k - 1) / C(n, k). At k = 1 every sample weighs 1/n, so Best@1 = pass@1.
    """
    n = len(correct)
    if len(scores) != n:
        raise ValueError(f"{n} correctness flags but {len(scores)} scores")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, n={n}], got {k}")
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    total = comb(n, k)
    return sum(comb(n - 1 - rank, k - 1) for rank, i in enumerate(ranked) if correct[i]) / total
