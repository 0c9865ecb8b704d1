"""Runs of one arm at several seeds, summarised: at each step the mean over the seeds with a 95% band,
mean +- 1.96 s / sqrt(n) (s the sample standard deviation, n the seeds that logged that step), and the spread of
a final value over the seeds (mean, std, min, max). RL runs differ a lot from seed to seed, so a curve of one seed, or
a mean without its spread, says little; the CS336 2026 handout asks for 4 seeds and a band like this one."""

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

Z_95 = 1.96  # the normal quantile of a two-sided 95% interval
SEED_LABEL = re.compile(r"^(?P<arm>.+)_seed(?P<seed>-?\d+)$")  # the run folders scripts/sweep.py writes


@dataclass(frozen=True)
class Spread:
    """Values of one quantity over n seeds."""

    n: int
    mean: float
    std: float  # sample standard deviation (n - 1 in the denominator); NaN for a single value
    min: float
    max: float

    @property
    def half_width(self) -> float:
        """1.96 s / sqrt(n): half the 95% band around the mean; 0 for a single value (no band to draw)."""
        return 0.0 if self.n < 2 else Z_95 * self.std / math.sqrt(self.n)

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def spread(values: Sequence[float]) -> Spread:
    """The spread of `values` (at least one)."""
    if not values:
        raise ValueError("spread of no values")
    std = statistics.stdev(values) if len(values) > 1 else math.nan
    return Spread(len(values), statistics.fmean(values), std, min(values), max(values))


def arm_of(label: str) -> str:
    """The arm of a run folder named <arm>_seed<k>; any other name is an arm of its own."""
    match = SEED_LABEL.match(label)
    return match["arm"] if match else label


def per_step(rows: list[dict], key: str, x: str = "grpo_step") -> dict[float, tuple[float, float]]:
    """{GRPO step: (mean x, mean value)} of the rows that have both `key` and `x`: an off-policy step logs one value
    per optimizer step, averaged here so that every run has one point per step."""
    points: dict[float, list[tuple[float, float]]] = {}
    for row in rows:
        if key in row and x in row and "grpo_step" in row:
            points.setdefault(row["grpo_step"], []).append((row[x], row[key]))
    return {
        step: (statistics.fmean(p[0] for p in ps), statistics.fmean(p[1] for p in ps))
        for step, ps in sorted(points.items())
    }


@dataclass(frozen=True)
class Band:
    """An arm's curve over its seeds: at each step, the mean x (the step itself, or the mean wall time at it) and the
    spread of the value over the seeds that logged that step."""

    xs: list[float]
    spreads: list[Spread]

    @property
    def means(self) -> list[float]:
        return [s.mean for s in self.spreads]

    @property
    def lows(self) -> list[float]:
        return [s.low for s in self.spreads]

    @property
    def highs(self) -> list[float]:
        return [s.high for s in self.spreads]


def seed_band(runs: list[list[dict]], key: str, x: str = "grpo_step") -> Band:
    """The band of `key` over `runs` (each a run's metric rows), step by step. Runs are aligned by GRPO step, not by
    x: against wall time, the point of a step sits at the seeds' mean time of it."""
    curves = [per_step(rows, key, x) for rows in runs]
    steps = sorted({step for curve in curves for step in curve})
    xs, spreads = [], []
    for step in steps:
        at = [curve[step] for curve in curves if step in curve]
        xs.append(statistics.fmean(p[0] for p in at))
        spreads.append(spread([p[1] for p in at]))
    return Band(xs, spreads)
