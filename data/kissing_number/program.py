"""Your program for PKU NLPDL HW3 §7: a set C of integer vectors in Z^11 with 0 not in C and
min over x != y of |x - y| >= max over x of |x|, which proves the kissing number tau_11 >= |C|.

    python data/kissing_number/evaluator.py data/kissing_number/program.py

This is the simple starter: the 22 vectors +-2 e_i (squared norm 4; two of them differ by squared distance 8 or
16), valid with |C| = 22. The handout states 595 <= tau_11 <= 870; the largest published set we know of has 604
vectors (arXiv:2606.10402, 2026; before it 593, AlphaEvolve, arXiv:2506.13131). Replace this construction with
yours: the evaluator calls run_code() (a tuple whose first item is the points), else get_centers(), else reads a
global `points`.
"""

import numpy as np

DIMENSION = 11


def axis_vectors(dimension: int = DIMENSION, length: int = 2) -> np.ndarray:
    """The 2 * dimension vectors +-length * e_i, one per row."""
    eye = np.eye(dimension, dtype=np.int64) * length
    return np.concatenate([eye, -eye])


def run_code() -> tuple[np.ndarray, int]:
    points = axis_vectors()
    return points, points.shape[1]


if __name__ == "__main__":
    found, dimension = run_code()
    print(f"{len(found)} vectors in dimension {dimension}")
