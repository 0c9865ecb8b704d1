"""Runs as rows of metrics, whatever they were saved as: our metrics.jsonl files or wandb CSV exports.

wandb exports come in two shapes. A run's history ("Export as CSV" on a run's page) has one column per metric
and `_step`; a chart panel's export has `Step` and one column per run, "<run name> - <metric>", with
"__MIN"/"__MAX" companions when the panel smooths or groups. Both become {run: rows}, each row a dict
with `grpo_step`, like the lines of metrics.jsonl; wandb's `_runtime` stands in for `time_elapsed_s`.
"""

import csv
import glob
from pathlib import Path

from alignment.run.metrics_log import read_metrics_jsonl

STEP_COLUMNS = ("_step", "Step", "grpo_step")
PANEL_SEPARATOR = " - "
DROPPED = ("_timestamp", "_wandb")


def _number(text: str | None) -> float | None:
    if text is None or text.strip() in ("", "NaN", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _step_column(header: list[str], path: Path) -> str:
    for name in STEP_COLUMNS:
        if name in header:
            return name
    raise ValueError(
        f"{path}: no step column (expected one of {', '.join(STEP_COLUMNS)}); columns: {', '.join(header)}"
    )


def read_wandb_export(path: Path) -> dict[str, list[dict]]:
    """{run name: rows sorted by step} from a wandb CSV export of either shape (see the module docstring).
    A run history export is named after its file."""
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        records = list(reader)
    step = _step_column(header, path)
    panel = [c for c in header if PANEL_SEPARATOR in c and not c.endswith(("__MIN", "__MAX"))]
    columns = (
        {c: tuple(c.split(PANEL_SEPARATOR, 1)) for c in panel}
        if panel
        else {c: (path.stem, c) for c in header if c != step and not c.startswith(DROPPED)}
    )
    runs: dict[str, dict[float, dict]] = {}
    for record in records:
        at = _number(record[step])
        if at is None:
            continue
        for column, (run, metric) in columns.items():
            value = _number(record.get(column))
            if value is not None:
                row = runs.setdefault(run, {}).setdefault(at, {"grpo_step": at})
                row["time_elapsed_s" if metric == "_runtime" else metric] = value
    return {run: [rows[s] for s in sorted(rows)] for run, rows in runs.items()}


def matching(patterns: list[str], root: Path) -> list[Path]:
    """Files matching glob patterns, each sorted; a relative pattern is taken from `root` (the repository, wherever
    a notebook's kernel started), a pattern without wildcards is the file itself even when missing (to be reported)."""
    paths: list[Path] = []
    for pattern in patterns:
        base = Path(pattern) if Path(pattern).is_absolute() else root / pattern
        if not any(c in pattern for c in "*?["):
            paths.append(base)
            continue
        paths += sorted(Path(p) for p in glob.glob(str(base)))
    return paths


def _merge_by_step(earlier: list[dict], later: list[dict]) -> list[dict]:
    by_step: dict[float, dict] = {}
    for row in earlier + later:
        by_step.setdefault(row["grpo_step"], {}).update(row)
    return [by_step[step] for step in sorted(by_step)]


def load_runs(paths: list[Path]) -> dict[str, list[dict]]:
    """Every run in the given files: a metrics.jsonl is one run named after its folder; a CSV export holds
    one or more, and the same run in several panel exports (one per metric) is merged step by step."""
    runs: dict[str, list[dict]] = {}
    for path in paths:
        if path.suffix == ".csv":
            for run, rows in read_wandb_export(path).items():
                runs[run] = _merge_by_step(runs.get(run, []), rows)
            continue
        run = path.parent.name or path.stem
        if run in runs:
            raise ValueError(f"two runs named {run!r} (the folder of {path}); give the runs distinct folders")
        runs[run] = read_metrics_jsonl(path)  # several rows per step (training, then validation): kept as logged
    return runs


def final_rewards(rows: list[dict]) -> dict[str, float] | None:
    """Final and best validation reward, the last validation's step and wall time; None without any."""
    evals = [row for row in rows if "eval_reward" in row]
    if not evals:
        return None
    last = evals[-1]
    return {
        "step": last["grpo_step"],
        "final": last["eval_reward"],
        "best": max(r["eval_reward"] for r in evals),
        "time_s": last.get("time_elapsed_s", float("nan")),
    }


def final_rewards_table(runs: dict[str, list[dict]]) -> str:
    """Markdown: one row per run with its final and best validation reward."""
    lines = ["| run | step | final validation reward | best | wall time (s) |", "|---|---|---|---|---|"]
    for run, rows in runs.items():
        result = final_rewards(rows)
        lines.append(
            f"| {run} | - | no validation | - | - |"
            if result is None
            else f"| {run} | {result['step']:g} | {result['final']:.3f} | {result['best']:.3f} | "
            f"{result['time_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"
