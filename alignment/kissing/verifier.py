"""Exact verification of kissing configurations (PKU NLPDL HW3 §7).

A set C of integer vectors in Z^11 with 0 not in C and min over x != y of |x - y|^2 >= max over x of |x|^2
proves tau_11 >= |C| (the handout's lemma: the directions x / |x| are then pairwise at least 60 degrees
apart). The score is |C| when the set is valid.

What a program may give, and the verdicts, follow the course's evaluator: `run_code()` (its result, or the
first item of the tuple or list it returns), else `get_centers()`, else a global `points`; any array-like of
Python or NumPy integers (integer-valued floats such as NumPy's default dtype count as the integers they are).
Its messages are the course's: "Minimum squared distance 36 < maximum squared norm 40", "Set contains 0 vector
or is empty.", "Need at least 2 points."; the closest pair is reported beside the message, not in it. Where this
verifier is stricter it says so: the dimension must be 11 (the handout's rule), and a coordinate that is not
an integer is refused rather than rounded.

Arithmetic is exact: numpy int64 while every value provably fits (|coordinate| <= 2^28 keeps squared
distances below 44 * 2^56 < 2^63), Python integers through object arrays for larger coordinates on small sets,
and a clear refusal beyond that. Pairs are scanned in row chunks of the Gram matrix, so 10,000 points take
seconds in bounded memory.
"""

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from alignment.kissing.sandbox import SandboxLimits, run_untrusted

DIMENSION = 11
INT64_SAFE_COORD = 2**28  # 4 * 11 * (2^28)^2 = 44 * 2^56 < 2^63: norms, Gram entries and distances all fit
PYTHON_INT_MAX_POINTS = 1000  # above int64's range, exact object arithmetic is O(n^2) Python work
PYTHON_INT_MAX_DIGITS = 100
CHUNK_ENTRIES = 4_000_000  # Gram-matrix entries per chunk (32 MB of int64)
PROGRAM_ENTRIES = ("run_code()[0]", "get_centers()", "points")  # the course evaluator's order
RECORD = 593  # the course evaluator's `combined_score` is num_points / 593 (AlphaEvolve's 2025 bound)
EMPTY_OR_ZERO = "Set contains 0 vector or is empty."
TOO_FEW = "Need at least 2 points."


@dataclass
class KissingMetrics:
    num_points: int = 0
    dimension: int = DIMENSION
    validity: float = 0.0  # 1.0 when every condition holds
    score: float = 0.0  # num_points when valid, else 0
    message: str = ""  # on failure the one specific reason, in the course evaluator's words; on success its summary
    min_squared_distance: int | None = None
    max_squared_norm: int | None = None
    closest_pair: tuple[int, int] | None = None  # the indices of a pair at the minimum distance
    combined_score: float = 0.0  # the course evaluator's normalised score: num_points / RECORD when valid
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the sandbox's protections and run time

    def to_json(self) -> dict[str, Any]:
        row = asdict(self)
        return row | row.pop("extra")


class InvalidPoints(ValueError):
    """The value is not a list of integer 11-vectors; the message names the first bad point."""


def parse_points(value: Any, dimension: int = DIMENSION) -> list[list[int]]:
    """Check the shape and types: integers, and floats that are integers (2.0); booleans, strings and 2.5 are refused,
    not converted (the course's evaluator rounds 2.5: the set it checks is then not the one written)."""
    if not isinstance(value, (list, tuple)):
        raise InvalidPoints(
            f"`points` must be a list of {dimension}-dimensional integer vectors, got {type(value).__name__}"
        )
    if value and all(type(c) in (int, float) for c in value):
        raise InvalidPoints(
            f"`points` is one vector of {len(value)} numbers, not a list of vectors "
            "(a run_code() that returns a list gives its first item: return (points,))"
        )
    rows = []
    for i, point in enumerate(value):
        if not isinstance(point, (list, tuple)):
            raise InvalidPoints(f"point {i} is a {type(point).__name__}, not a list of {dimension} integers")
        if len(point) != dimension:
            raise InvalidPoints(f"point {i} has {len(point)} coordinates; expected {dimension}")
        row = []
        for j, c in enumerate(point):
            if type(c) is float and c.is_integer():  # e.g. np.zeros(11) filled with integers
                c = int(c)
            if type(c) is not int:
                raise InvalidPoints(
                    f"point {i}, coordinate {j} is {c!r} ({type(c).__name__}); coordinates must be integers"
                )
            row.append(c)
        rows.append(row)
    return rows


def _as_array(points: list[list[int]]) -> np.ndarray:
    """int64 when safe, Python-int objects when small enough, else a refusal naming the largest coordinate."""
    largest = max((abs(c) for point in points for c in point), default=0)
    if largest <= INT64_SAFE_COORD:
        return np.array(points, dtype=np.int64)
    if len(points) > PYTHON_INT_MAX_POINTS or len(str(largest)) > PYTHON_INT_MAX_DIGITS:
        where = next(i for i, point in enumerate(points) if largest in (abs(c) for c in point))
        raise InvalidPoints(
            f"point {where} has a coordinate of {len(str(largest))} digits: above 2^28 the exact check handles "
            f"at most {PYTHON_INT_MAX_POINTS} points of at most {PYTHON_INT_MAX_DIGITS} digits (rescale the set)"
        )
    return np.array(points, dtype=object)


def closest_pair(x: np.ndarray) -> tuple[int, int, int]:
    """(min squared distance, i, j) over pairs i < j of the rows of x (n, d), n >= 2; the first pair on ties.

    Row chunks of the upper triangle of D = |x_i|^2 + |x_j|^2 - 2 <x_i, x_j>, so memory stays bounded."""
    n = len(x)
    norms = (x * x).sum(axis=1)
    above_any = 4 * int(norms.max()) + 1  # exceeds every squared distance; fits int64 on that path
    best = (above_any, 0, 0)
    chunk = max(1, CHUNK_ENTRIES // n)
    for start in range(0, n - 1, chunk):
        stop = min(start + chunk, n - 1)
        gram = x[start:stop] @ x[start:].T  # (rows, n - start); column c is point start + c
        dist = norms[start:stop, None] + norms[None, start:] - 2 * gram
        upper = np.arange(n - start)[None, :] > np.arange(stop - start)[:, None]
        dist = np.where(upper, dist, above_any)
        r, c = np.unravel_index(int(np.argmin(dist)), dist.shape)
        if int(dist[r, c]) < best[0]:
            best = (int(dist[r, c]), start + int(r), start + int(c))
    return best


def verify_points(value: Any, dimension: int = DIMENSION) -> KissingMetrics:
    """The handout's metrics for a candidate set (already plain Python data, e.g. from the sandbox)."""
    try:
        points = parse_points(value, dimension)
        if not points:
            return KissingMetrics(dimension=dimension, message=EMPTY_OR_ZERO)
        x = _as_array(points)
    except InvalidPoints as err:
        count = len(value) if isinstance(value, (list, tuple)) else 0
        return KissingMetrics(num_points=count, dimension=dimension, message=str(err))
    n = len(points)
    norms = (x * x).sum(axis=1)
    zero = np.flatnonzero(norms == 0)
    if len(zero):
        return KissingMetrics(n, dimension, message=EMPTY_OR_ZERO, extra={"zero_vector": int(zero[0])})
    max_norm = int(norms.max())
    if n == 1:
        return KissingMetrics(n, dimension, message=TOO_FEW, max_squared_norm=max_norm)
    min_dist, i, j = closest_pair(x)
    found = {"min_squared_distance": min_dist, "max_squared_norm": max_norm, "closest_pair": (i, j)}
    if min_dist < max_norm:  # a repeated point too: squared distance 0
        message = f"Minimum squared distance {min_dist} < maximum squared norm {max_norm}"
        return KissingMetrics(n, dimension, 0.0, 0.0, message, **found)
    message = f"Verified: dimension={dimension}, kissing lower bound >= {n}"
    return KissingMetrics(n, dimension, 1.0, float(n), message, **found, combined_score=n / RECORD)


def evaluate_program(source: str, limits: SandboxLimits | None = None, dimension: int = DIMENSION) -> KissingMetrics:
    """Run an untrusted program in the sandbox and verify its global `points`; never raises for a bad program."""
    result = run_untrusted(source, PROGRAM_ENTRIES, limits)
    extra = {"entry": result.entry, "elapsed_s": round(result.elapsed_s, 3), "protections": result.protections}
    if not result.ok:
        return KissingMetrics(dimension=dimension, message=f"program failed: {result.error}", extra=extra)
    metrics = verify_points(result.value, dimension)
    metrics.extra |= extra
    return metrics
