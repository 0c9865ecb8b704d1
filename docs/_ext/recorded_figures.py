"""Figures of measured runs, read from docs/benchmarks/recorded_runs.toml, for the pages that quote them.

    recorded("keyword_demo.date")       a field as recorded: "2026-11-28"
    recorded("keyword_demo.points")     derived by the code that prints it, from the recorded rows: "+78.1"
    recorded("keyword_demo.summary")    the whole line the run printed (scripts/train_grpo.py's report)
    recorded("keyword_demo.rewards")    its held-out reward at each validation: "0.219, 0.688, ... and 1.000"
                                        (also reward_steps, first_reward, last_reward, last_step)

Nothing here imports Sphinx (docs/_ext/site_directives.py renders the figures; tests/test_recorded_figures.py checks
the quotes a role cannot reach: README.md and text fences).
"""

import functools
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "docs" / "benchmarks" / "recorded_runs.toml"


@functools.cache
def runs() -> dict[str, dict[str, Any]]:
    return tomllib.loads(RECORDED.read_text())


def derived(run: dict[str, Any], field: str) -> str | None:
    """A figure the code computes from the recorded validation rows, as the run printed it; None for other fields."""
    from alignment.experiments.plotting import describe_held_out, held_out_points

    rows = run["validations"]
    if field == "points":
        return held_out_points(rows[0], rows[-1])
    if field == "summary":
        return describe_held_out(rows[0], rows[-1])
    if field == "rewards":  # "0.219, 0.688 and 1.000"
        rewards = [f"{row['eval_reward']:.3f}" for row in rows]
        return f"{', '.join(rewards[:-1])} and {rewards[-1]}"
    if field in ("first_reward", "last_reward"):  # "0.484"
        return f"{rows[0 if field == 'first_reward' else -1]['eval_reward']:.3f}"
    if field == "last_step":
        return str(rows[-1]["grpo_step"])
    if field == "reward_steps":  # "0, 4 and 8"
        steps = [str(row["grpo_step"]) for row in rows]
        return f"{', '.join(steps[:-1])} and {steps[-1]}"
    return None


def recorded(name: str) -> str:
    """`ENTRY.FIELD` of the recorded runs; a ValueError naming what is missing."""
    entry, _, field = name.strip().partition(".")
    if entry not in runs():
        raise ValueError(f"no run {entry!r} in {RECORDED.name} (it has {', '.join(runs())})")
    run = runs()[entry]
    value = derived(run, field) if "validations" in run else None
    if value is None:
        if field not in run or isinstance(run[field], (dict, list)):
            raise ValueError(f"run {entry!r} in {RECORDED.name} records no figure {field!r}")
        value = str(run[field])
    return value
