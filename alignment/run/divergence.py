"""A run whose numbers blew up: the error it stops with, and the marker it leaves in its folder.

The learner raises `Diverged` (a FloatingPointError) at the step whose reward, loss or gradient norm is NaN or inf,
or whose loss is past --divergence-loss-bound, before the optimizer touches the weights. The run's metrics log
(alignment/run/metrics_log.py) sees it leave and writes `diverged.json` into the run folder: the step and the
reason, for the sweep's results table (alignment/experiments/sweep.py) and for anyone looking at the folder.
"""

import json
from pathlib import Path
from typing import Any

from alignment.utils.atomic import atomic_write_json

MARKER = "diverged.json"


class Diverged(FloatingPointError):
    """GRPO step `step` produced a NaN or inf (or a loss past the bound); no update was made."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step

    def __reduce__(self) -> tuple[Any, ...]:  # pickled across processes (Ray) with its step
        return (Diverged, (str(self), self.step))


def divergence_of(error: BaseException | None) -> Diverged | None:
    """The Diverged behind `error`: itself, or the cause Ray wrapped into a RayTaskError; else None."""
    for candidate in (getattr(error, "cause", None), error, getattr(error, "__cause__", None)):
        if isinstance(candidate, Diverged):
            return candidate
    return None


def write_marker(run_dir: Path, diverged: Diverged) -> Path:
    path = run_dir / MARKER
    atomic_write_json(path, {"grpo_step": diverged.step, "reason": str(diverged)})
    return path


def read_marker(run_dir: Path) -> dict[str, Any] | None:
    """{"grpo_step": N, "reason": ...} when the run diverged, else None."""
    path = run_dir / MARKER
    return json.loads(path.read_text()) if path.is_file() else None
