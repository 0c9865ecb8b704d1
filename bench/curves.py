"""Held-out accuracy against training time, validations left out: the curves of the benches that set two trainers
side by side (bench/trl_time_to_accuracy.py, bench/reasoning_gym_learning.py)."""

from pathlib import Path

from alignment.experiments.plotting import read_rows


def our_curve(metrics: Path, key: str = "eval_reward") -> list[tuple[float, int, float]]:
    """(training seconds without validations, GRPO step, `key`) at each validation of our run's metrics.jsonl."""
    points, validating_s, last_s = [], 0.0, 0.0  # last_s: the clock when the row before was logged
    for row in read_rows(metrics):
        if "eval_reward" in row:
            points.append((last_s - validating_s, int(row["grpo_step"]), float(row[key])))
            validating_s += row["time_elapsed_s"] - last_s
        if "eval_reward" in row or "train_reward" in row:
            last_s = row["time_elapsed_s"]
    return points


def first_reaching(curve: list[tuple[float, ...]], target: float) -> float | None:
    """Training seconds at the first validation at or above `target` (points are (seconds, step, accuracy, ...))."""
    return next((point[0] for point in curve if point[2] >= target - 1e-9), None)
