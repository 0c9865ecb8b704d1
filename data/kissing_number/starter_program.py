"""The starter kissing configuration for dimension 11 (PKU NLPDL HW3 §7), and the discovery loop's default seed:
define a global `points`.

The roots of D11, ±e_i ± e_j: squared norm 2, and any two distinct roots are at squared distance >= 2,
so the set is valid with 4 * C(11, 2) = 220 points. Improve on it: the best known lower bound is 593.
"""

import itertools

DIMENSION = 11

points = []
for i, j in itertools.combinations(range(DIMENSION), 2):
    for si, sj in itertools.product((1, -1), repeat=2):
        v = [0] * DIMENSION
        v[i], v[j] = si, sj
        points.append(v)
