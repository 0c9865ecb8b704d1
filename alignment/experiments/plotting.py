"""Figures of GRPO runs from metrics.jsonl files or wandb CSV exports: several runs per figure.

Beside one curve per metric: where the time went (`time_breakdown_figure`: each run's seconds per phase, against
its wall time; `time_per_step_figure`: the mean seconds per GRPO step of each phase, UW A3 v1 problem 14's "time
breakdown per GRPO step"), KL with validation reward on one GRPO-step axis (`kl_validation_figure`: per-token means,
UW v1 problem 15; and the sums of UW v2's Eq. 8 over each response, problem 6) and pass@N / Best@N against N from
scripts/best_of_n.py's summary.json files (`pass_at_n_figure`).
"""

import json
import math
import statistics
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from alignment.config.settings import SETTINGS_FILE  # noqa: E402
from alignment.experiments.run_table import read_wandb_export  # noqa: E402
from alignment.experiments.seeds import arm_of, per_step, seed_band, spread  # noqa: E402
from alignment.run.metrics_log import read_metrics_jsonl  # noqa: E402

PHASES = ("rollout", "grading", "old_logprob", "train", "weight_sync")
CURVES = {  # file name -> (y label, metric keys)
    "token_entropy": ("token entropy (nats)", ["token_entropy"]),
    "grad_norm": ("gradient norm (before clipping)", ["grad_norm"]),
    "response_length": ("response tokens", ["response_length_mean", "response_length_max"]),
    "kl": ("KL estimate", ["kl_ref_k1", "kl_ref_k3", "kl_prev_step_k1", "kl_prev_step_k3", "kl_prev_k1", "kl_prev_k3"]),
    "clip_fraction": ("clipped token fraction", ["clip_fraction"]),
    "train_reward": ("train reward", ["train_reward", "train_format_reward"]),
    "eval_format_reward": ("validation format reward", ["eval_format_reward"]),
}


# Every row's `grpo_step` is the step of its own run's kind; a setting that only one script's runs have names it
STEP_UNITS = {"n_grpo_steps": "GRPO step", "n_ei_steps": "EI step", "data_format": "SFT step"}


def step_label(run_dirs: Iterable[Path]) -> str:
    """The step axis' label of these runs, from each folder's settings.json: GRPO step, EI step or SFT step; `step`
    when they differ or a folder does not say (a wandb export)."""
    units = set()
    for folder in run_dirs:
        path = folder / SETTINGS_FILE
        settings = json.loads(path.read_text()) if path.is_file() else {}
        units.add(next((unit for key, unit in STEP_UNITS.items() if key in settings), None))
    return units.pop() if len(units) == 1 and None not in units else "step"


def save_png(fig: Any, path: Path) -> None:
    """Every figure of this module is written the same way: laid out tight, 120 dpi PNG."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def read_rows(path: Path) -> list[dict]:
    """Rows of a metrics.jsonl, or of a wandb CSV export of one run (`_step`/`Step` read as grpo_step)."""
    if path.suffix != ".csv":
        return read_metrics_jsonl(path)
    runs = read_wandb_export(path)
    if len(runs) > 1:
        raise ValueError(
            f"{path} holds {len(runs)} runs ({', '.join(runs)}); read it with alignment.experiments.run_table.load_runs"
        )
    return next(iter(runs.values()), [])


def series(rows: list[dict], key: str, x: str = "grpo_step") -> tuple[list[float], list[float]]:
    points = [(row[x], row[key]) for row in rows if key in row and x in row]
    return [p[0] for p in points], [p[1] for p in points]


def arm_groups(labels: Iterable[str], arms: dict[str, str] | None = None) -> dict[str, list[str]]:
    """{arm: its runs' labels}, arms in first-seen order; `arms` maps a label to its arm, else the label's
    <arm>_seed<k> form says it (seeds.arm_of)."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        groups.setdefault((arms or {}).get(label, arm_of(label)), []).append(label)
    return groups


BAND_TITLE = "mean over seeds, 95% band (mean ± 1.96 s/√n); each seed faint"


def draw_seed_bands(ax: Any, runs_by_arm: dict[str, list[list[dict]]], keys: list[str], x: str = "grpo_step") -> bool:
    """Per arm and key: each seed's curve faint, the mean over the seeds bold, and the 95% band (seeds.seed_band)
    shaded where at least two seeds logged the step. Returns whether anything was drawn."""
    drawn, colour = False, 0
    for arm, runs in runs_by_arm.items():
        for key in keys:
            band = seed_band(runs, key, x)
            if not band.xs:
                continue
            colour_name = f"C{colour % 10}"
            colour += 1
            for rows in runs:
                curve = per_step(rows, key, x)
                ax.plot(
                    [p[0] for p in curve.values()],
                    [p[1] for p in curve.values()],
                    color=colour_name,
                    alpha=0.3,
                    linewidth=0.8,
                )
            name = arm if len(keys) == 1 else f"{arm}: {key}"
            ax.plot(band.xs, band.means, color=colour_name, linewidth=2, label=f"{name} (n={len(runs)})")
            if len(runs) > 1:
                ax.fill_between(band.xs, band.lows, band.highs, color=colour_name, alpha=0.2, linewidth=0)
            drawn = True
    return drawn


def line_figure(
    runs: dict[str, list[dict]],
    keys: list[str],
    ylabel: str,
    path: Path,
    x: str = "grpo_step",
    styles: dict[str, dict[str, Any]] | None = None,
    xlabel: str = "GRPO step",
    arms: dict[str, str] | None = None,
) -> bool:
    """One line per run and key; `styles` gives a run's line keyword arguments (colour per arm, dashes per
    seed), used where a figure has one key per run. Where an arm has several runs (seeds: `arms` maps labels to arms,
    else <arm>_seed<k> labels say it), one band per arm instead: draw_seed_bands."""
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    groups = arm_groups(runs, arms)
    if any(len(labels) > 1 for labels in groups.values()):
        drawn = draw_seed_bands(ax, {arm: [runs[k] for k in labels] for arm, labels in groups.items()}, keys, x)
        ax.set_title(BAND_TITLE, fontsize=8)
        runs = {}
    for label, rows in runs.items():
        style = (styles or {}).get(label, {}) if len(keys) == 1 else {}
        for key in keys:
            xs, ys = series(rows, key, x)
            if xs:
                name = label if len(keys) == 1 else f"{label}: {key}"
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=name, **style)
                drawn = True
    if drawn:
        ax.set_xlabel("wall time (s)" if x == "time_elapsed_s" else xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        save_png(fig, path)
    plt.close(fig)
    return drawn


def phase_figure(label: str, rows: list[dict], path: Path) -> bool:
    """Stacked seconds per phase for each GRPO step (the first optimizer-step row of each)."""
    by_step = {row["grpo_step"]: row for row in first_rows_per_step(rows)}
    if not by_step:
        return False
    steps = sorted(by_step)
    fig, ax = plt.subplots(figsize=(6, 4))
    bottom = [0.0] * len(steps)
    for phase in PHASES:
        values = [by_step[s].get(f"time_{phase}_s", 0.0) for s in steps]
        ax.bar(steps, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("seconds")
    ax.set_title(f"time per phase: {label}", fontsize=9)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)
    return True


def first_rows_per_step(rows: list[dict]) -> list[dict]:
    """The first row of each GRPO step that has phase timings (a step's optimizer-step rows share them)."""
    by_step: dict[float, dict] = {}
    for row in rows:
        if any(f"time_{p}_s" in row for p in PHASES):
            by_step.setdefault(row["grpo_step"], row)
    return [by_step[s] for s in sorted(by_step)]


def time_breakdown(rows: list[dict]) -> dict[str, float]:
    """Seconds per phase over a run's GRPO steps, and `wall` (its last time_elapsed_s: validation, checkpoints and
    set-up after the start included). Where phases overlap (disaggregated Ray strategies) they add up past it."""
    steps = first_rows_per_step(rows)
    totals = {phase: sum(row.get(f"time_{phase}_s", 0.0) for row in steps) for phase in PHASES}
    elapsed = [row["time_elapsed_s"] for row in rows if "time_elapsed_s" in row]
    return totals | {"wall": max(elapsed, default=float("nan"))}


def time_breakdown_figure(runs: dict[str, list[dict]], path: Path) -> bool:
    """One stacked bar per run: its seconds in each phase, summed over its steps; a black tick marks its wall time."""
    breakdowns = {label: time_breakdown(rows) for label, rows in runs.items() if first_rows_per_step(rows)}
    if not breakdowns:
        return False
    labels = list(breakdowns)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels)), 4))
    bottom = [0.0] * len(labels)
    for phase in PHASES:
        values = [breakdowns[label][phase] for label in labels]
        ax.bar(labels, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.scatter(labels, [breakdowns[label]["wall"] for label in labels], marker="_", s=600, color="black", zorder=3)
    ax.scatter([], [], marker="_", color="black", label="wall time")
    ax.set_ylabel("seconds (summed over GRPO steps)")
    ax.set_title("where the time went", fontsize=9)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)
    return True


def time_per_step(rows: list[dict]) -> dict[str, float]:
    """Mean seconds per GRPO step of each phase over a run's steps, and `step`, the mean of a whole step's wall time
    where it is logged (GRPO on Ray's time_step_s; there, disaggregated phases overlap and add up past it); with
    `steps`, how many steps were averaged. Empty for a run without phase timings."""
    steps = first_rows_per_step(rows)
    if not steps:
        return {}

    def mean(key: str) -> float:
        values = [row[key] for row in steps if key in row and math.isfinite(row[key])]
        return statistics.fmean(values) if values else 0.0

    means = {phase: mean(f"time_{phase}_s") for phase in PHASES}
    if any("time_step_s" in row for row in steps):
        means["step"] = mean("time_step_s")
    return means | {"steps": float(len(steps))}


def describe_held_out(first: dict, last: dict) -> str:
    """One line: the held-out reward of a run's first and last validation rows and the points it moved."""

    def where(row: dict) -> str:  # with --time-budget the last validation covers more questions
        return f"at step {row['grpo_step']}" + (
            f" ({row['eval_examples']} questions)" if "eval_examples" in row else ""
        )

    return (
        f"held-out reward: {first['eval_reward']:.3f} {where(first)} -> {last['eval_reward']:.3f} {where(last)} "
        f"({held_out_points(first, last)} points)"
    )


def held_out_points(first: dict, last: dict) -> str:
    """The points of held-out reward a run moved, as its summary prints them: "+78.1"."""
    return f"{100 * (last['eval_reward'] - first['eval_reward']):+.1f}"


def describe_time_per_step(rows: list[dict]) -> str | None:
    """One line: the mean seconds per GRPO step of each phase (and of the whole step), or None without timings."""
    means = time_per_step(rows)
    if not means:
        return None
    phases = ", ".join(f"{phase} {means[phase]:.3f}" for phase in PHASES)
    whole = f"; whole step {means['step']:.3f}" if "step" in means else ""
    return f"seconds per GRPO step (mean of {means['steps']:.0f} steps): {phases}{whole}"


def time_per_step_figure(runs: dict[str, list[dict]], path: Path) -> bool:
    """One stacked bar per run: the mean seconds per GRPO step of each phase; a black tick marks the mean step."""
    means = {label: time_per_step(rows) for label, rows in runs.items()}
    means = {label: m for label, m in means.items() if m}
    if not means:
        return False
    labels = list(means)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels)), 4))
    bottom = [0.0] * len(labels)
    for phase in PHASES:
        values = [means[label][phase] for label in labels]
        ax.bar(labels, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values)]
    timed = [label for label in labels if "step" in means[label]]
    if timed:
        ax.scatter(timed, [means[label]["step"] for label in timed], marker="_", s=600, color="black", zorder=3)
        ax.scatter([], [], marker="_", color="black", label="whole step")
    ax.set_ylabel("seconds per GRPO step (mean)")
    ax.set_title("time breakdown per GRPO step", fontsize=9)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)
    return True


# Per-token means: KL to the reference, to the previous step's policy (UW v2 problem 6), across each update
KL_KEYS = ("kl_ref_k1", "kl_ref_k3", "kl_prev_step_k1", "kl_prev_step_k3", "kl_prev_k1", "kl_prev_k3")
# UW v2's Eq. 8: k1 summed over each response's tokens, averaged over responses (the KL of whole responses)
KL_SUM_KEYS = ("kl_ref_k1_sum", "kl_prev_step_k1_sum", "kl_prev_k1_sum")
DASHES = ("-", "--", "-.", ":")


def mean_per_step(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(GRPO steps, the key's mean over each step's rows): an off-policy step logs one value per optimizer step."""
    per_step: dict[float, list[float]] = {}
    for row in rows:
        if key in row:
            per_step.setdefault(row["grpo_step"], []).append(row[key])
    steps = sorted(per_step)
    return steps, [statistics.fmean(per_step[s]) for s in steps]


def kl_validation_figure(
    runs: dict[str, list[dict]],
    path: Path,
    keys: tuple[str, ...] = KL_KEYS,
    ylabel: str = "KL estimate per response token (lines)",
) -> bool:
    """KL estimates `keys` (lines, left axis) and validation accuracy (dots, right axis: eval_answer_reward, else
    eval_reward) against the same GRPO steps, one colour per run that logged a KL."""
    fig, kl_ax = plt.subplots(figsize=(7, 4))
    accuracy_ax = kl_ax.twinx()
    drawn = False
    for i, (label, rows) in enumerate(runs.items()):
        colour, kls = f"C{i % 10}", [key for key in keys if any(key in row for row in rows)]
        for j, key in enumerate(kls):
            kl_ax.plot(*mean_per_step(rows, key), DASHES[j % len(DASHES)], color=colour, label=f"{label}: {key}")
        accuracy = "eval_answer_reward" if any("eval_answer_reward" in row for row in rows) else "eval_reward"
        xs, ys = series(rows, accuracy)
        if kls and xs:
            accuracy_ax.plot(xs, ys, "o", color=colour, alpha=0.6, markersize=4, label=f"{label}: {accuracy}")
        drawn = drawn or bool(kls)
    if drawn:
        kl_ax.set_xlabel("GRPO step")
        kl_ax.set_ylabel(ylabel)
        accuracy_ax.set_ylabel("validation accuracy (dots)")
        kl_ax.grid(alpha=0.3)
        handles = [h for ax in (kl_ax, accuracy_ax) for h in ax.get_legend_handles_labels()[0]]
        kl_ax.legend(handles, [h.get_label() for h in handles], fontsize=7)
        save_png(fig, path)
    plt.close(fig)
    return drawn


def read_best_of_n(path: Path) -> dict[str, dict[int, float]]:
    """pass@N and Best@N by N from scripts/best_of_n.py's summary.json (its N keys are strings in JSON)."""
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    summary = json.loads(path.read_text())
    try:
        return {key: {int(n): float(v) for n, v in summary[key].items()} for key in ("pass_at", "best_at")}
    except (KeyError, AttributeError, ValueError):
        raise ValueError(f"{path}: not a summary.json of scripts/best_of_n.py (no pass_at / best_at by N)") from None


def pass_at_n_figure(summaries: dict[str, dict[str, dict[int, float]]], path: Path) -> bool:
    """pass@N (solid) and Best@N (dashed) against N on a log2 axis, one colour per evaluation."""
    if not summaries:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (label, summary) in enumerate(summaries.items()):
        for key, dash, name in (("pass_at", "-", "pass@N"), ("best_at", "--", "Best@N")):
            ns = sorted(summary[key])
            ax.plot(ns, [summary[key][n] for n in ns], dash, marker="o", color=f"C{i % 10}", label=f"{label}: {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (samples per question)")
    ax.set_ylabel("fraction of questions")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)
    return True


def final_value_figure(
    points: dict[float, list[float]], xlabel: str, ylabel: str, path: Path, failed: dict[float, int] | None = None
) -> bool:
    """A final value (e.g. the last validation reward) against a setting (e.g. the learning rate): each seed a faint
    dot, the mean over seeds joined by a line with its 95% band as an error bar (seeds.spread). A log x axis when the
    settings span a factor of 10 or more; `failed` counts, per setting, the seeds that diverged (no value, noted
    beneath the axis)."""
    settings = sorted(x for x, values in points.items() if values)
    if not settings:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for x in settings:
        ax.scatter([x] * len(points[x]), points[x], color="C0", alpha=0.35, s=14)
    spreads = [spread(points[x]) for x in settings]
    ax.errorbar(
        settings,
        [s.mean for s in spreads],
        yerr=[s.half_width for s in spreads],
        color="C0",
        marker="o",
        capsize=4,
        label="mean over seeds, 95% band",
    )
    if min(settings) > 0 and max(settings) / min(settings) >= 10:
        ax.set_xscale("log")
    for x, count in (failed or {}).items():
        if count:
            ax.annotate(
                f"{count} diverged",
                (x, 0),
                xycoords=("data", "axes fraction"),
                fontsize=7,
                color="C3",
                xytext=(0, 4),
                textcoords="offset points",
                ha="center",
            )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_png(fig, path)
    plt.close(fig)
    return True


def plot_runs(
    paths: list[Path],
    labels: list[str],
    output_dir: Path,
    styles: dict[str, dict[str, Any]] | None = None,
    phases: bool = True,
) -> list[Path]:
    if labels and len(labels) != len(paths):
        raise ValueError(f"got {len(labels)} labels for {len(paths)} runs (--label)")
    labels = labels or [p.parent.name or p.stem for p in paths]
    runs = {label: read_rows(path) for label, path in zip(labels, paths)}
    return plot_rows(runs, output_dir, styles, phases, step_label(p.parent for p in paths))


def plot_rows(
    runs: dict[str, list[dict]],
    output_dir: Path,
    styles: dict[str, dict[str, Any]] | None = None,
    phases: bool = True,
    xlabel: str = "GRPO step",
    arms: dict[str, str] | None = None,
) -> list[Path]:
    """Every figure some run has data for, one line per run, with the time breakdowns (summed, and per step) and KL
    with validation accuracy (per token, and Eq. 8's sums); `phases` adds one time-per-phase figure per run (a time
    series). `xlabel` names the runs' step (step_label). Runs of one arm at several seeds (`arms`, or labels
    <arm>_seed<k>) become the arm's mean with a 95% band, each seed faint beneath (draw_seed_bands)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    figures = {
        "eval_reward_vs_step": (["eval_reward"], "validation reward", "grpo_step"),
        "eval_reward_vs_time": (["eval_reward"], "validation reward", "time_elapsed_s"),
    } | {name: (keys, ylabel, "grpo_step") for name, (ylabel, keys) in CURVES.items()}
    for name, (keys, ylabel, x) in figures.items():
        if line_figure(runs, keys, ylabel, output_dir / f"{name}.png", x, styles, xlabel, arms):
            written.append(output_dir / f"{name}.png")
    drawings = {
        "time_breakdown": time_breakdown_figure,
        "time_per_step": time_per_step_figure,
        "kl_and_validation": kl_validation_figure,
        "kl_sum_and_validation": partial(
            kl_validation_figure, keys=KL_SUM_KEYS, ylabel="KL of whole responses, Eq. 8's sum (lines)"
        ),
    }
    for name, draw in drawings.items():
        if draw(runs, output_dir / f"{name}.png"):
            written.append(output_dir / f"{name}.png")
    for label, rows in runs.items() if phases else ():
        path = output_dir / f"phase_times_{label.replace('/', '_')}.png"
        if phase_figure(label, rows, path):
            written.append(path)
    return written


SFT_FIGURES = {  # an SFT run's figures: file name -> (y label, metric keys)
    "eval_rewards": ("held-out reward", ["eval_format_reward", "eval_answer_reward"]),
    "eval_token_entropy": ("held-out response entropy (nats/token)", ["eval_token_entropy"]),
    "eval_response_length": (
        "held-out response tokens",
        ["eval_response_length", "eval_response_length_correct", "eval_response_length_incorrect"],
    ),
    "train_loss": ("SFT loss (NLL per response token)", ["loss"]),
    "train_token_entropy": ("entropy on the training responses (nats/token)", ["token_entropy"]),
}
EI_FIGURES = SFT_FIGURES | {  # an EI run's: its token_entropy is of the step's rollouts, as GRPO logs it
    "train_token_entropy": ("entropy on the kept rollouts, fine-tuning (nats/token)", ["sft_token_entropy"]),
    "rollout_entropy": ("entropy of the step's rollouts (nats/token)", ["token_entropy"]),
    "kept_fraction": ("correct rollouts kept", ["kept_fraction"]),
}


def plot_sft_run(output_dir: Path) -> list[Path]:
    """The PNG figures of an SFT or expert-iteration run (SFT_FIGURES, EI_FIGURES) in output_dir/plots, against its
    own step; returns those drawn."""
    rows = read_rows(output_dir / "metrics.jsonl")
    (output_dir / "plots").mkdir(exist_ok=True)
    xlabel = step_label([output_dir])
    figures = EI_FIGURES if xlabel == "EI step" else SFT_FIGURES
    paths = [output_dir / "plots" / f"{name}.png" for name in figures]
    return [
        path
        for path, (ylabel, keys) in zip(paths, figures.values())
        if line_figure({output_dir.name: rows}, keys, ylabel, path, xlabel=xlabel)
    ]
