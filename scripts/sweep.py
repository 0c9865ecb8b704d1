"""Run every arm of an experiment preset, then compare them.

    uv run scripts/sweep.py configs/experiments/grpo_baselines.toml
    uv run scripts/sweep.py configs/experiments/grpo_learning_rate.toml --launcher ray

Each run (an arm, at each of the preset's seeds) trains in its own folder <output-root>/<preset>/<run>/ as a
subprocess of the preset's script (scripts/train_grpo.py unless it names another), with its settings written
to <output-root>/<preset>/configs/<run>.toml and its output to logs/<run>.log. Finished runs are skipped and
runs with an earlier checkpoint resume, so re-running the command after an interruption picks up where it
stopped. With several GPUs (or a Ray cluster) runs go side by side through Ray, each on the GPUs it needs (2 when
its rollouts use vLLM: a policy GPU and a rollout GPU, as the handouts run; else 1; --gpus-per-arm sets a
number); on a CPU they run one after another. At the end: plots/ (one
line per run: validation reward vs step and vs wall time, entropy, response length, gradient norm, clip
fraction, KL) and results.md (final validation rewards).
"""

import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import typer

from alignment.config.cli import option_parameters, typer_app
from alignment.config.settings import setting
from alignment.experiments.plotting import plot_rows
from alignment.experiments.sweep import (
    ArmRun,
    Preset,
    changed_settings,
    gpus_needed,
    launch,
    load_preset,
    read_metrics,
    results_table,
    run_command,
    run_state,
    run_styles,
    write_run_config,
)
from alignment.utils.atomic import atomic_write_text


@dataclass
class SweepConfig:
    output_root: Path = setting(Path("outputs"), "Runs go to <output-root>/<preset name>/<run>/.")
    launcher: Literal["auto", "local", "ray"] = setting(
        "auto",
        "local: one run after another; ray: side by side on a Ray cluster; auto: ray when at least two "
        "runs fit on this machine's GPUs or --ray-address is given.",
    )
    gpus_per_arm: int | None = setting(
        None,
        "GPUs each run gets under Ray (default: what the run needs: 2 when its rollouts use vLLM, a policy GPU and a "
        "rollout GPU as the handouts run; else 1).",
    )
    ray_address: str | None = setting(None, "Address of a running Ray cluster (default: start one here).")


def use_ray(config: SweepConfig, gpus: list[int]) -> bool:
    """Ray when asked, or when at least two of the runs (`gpus`: each one's GPU count) fit this machine's GPUs."""
    if config.launcher != "auto":
        return config.launcher == "ray"
    if config.ray_address is not None:
        return True
    import torch

    return len(gpus) > 1 and torch.cuda.device_count() >= sum(sorted(gpus)[:2])


def run_on_ray(jobs: dict[str, tuple[list[str], Path]], gpus: dict[str, int], config: SweepConfig) -> dict[str, int]:
    """Every job as a Ray task holding its GPUs; Ray sets CUDA_VISIBLE_DEVICES for each."""
    from alignment.ray.env import ray

    ray.init(address=config.ray_address)
    try:
        pending = {
            ray.remote(num_gpus=gpus[label])(launch).remote(command, log): label
            for label, (command, log) in jobs.items()
        }
        statuses = {}
        while pending:
            done, _ = ray.wait(list(pending))
            label = pending.pop(done[0])
            statuses[label] = ray.get(done[0])
            typer.echo(f"{label}: exit status {statuses[label]}")
        return statuses
    finally:
        ray.shutdown()


def prepare(preset: Preset, root: Path) -> dict[str, tuple[list[str], Path]]:
    """The command and log file of every run still to do; finished runs are reported and left alone, unless
    the preset now gives them other settings: that is an error before anything runs."""
    states = {run.label: run_state(root / run.label, preset.total_steps(run)) for run in preset.runs}
    for run in preset.runs:
        run_dir = root / run.label
        changed = (
            changed_settings(root / "configs" / f"{run.label}.toml", run.settings | {"output_dir": run_dir})
            if states[run.label] == "finished"
            else []
        )
        if changed:  # its results would be reported under settings it never had
            raise typer.BadParameter(
                f"run {run.label} finished with other settings ({', '.join(changed)}); "
                f"move {run_dir} away or rename the arm",
                param_hint="'PRESET'",
            )
    jobs = {}
    for run in preset.runs:
        run_dir, state = root / run.label, states[run.label]
        typer.echo(f"{run.label}: {state}")
        if state == "finished":
            continue
        # a run stopped before its first checkpoint starts over in its own folder
        settings = run.settings | {"output_dir": run_dir} | ({"overwrite": True} if state == "restart" else {})
        config_path = write_run_config(root / "configs" / f"{run.label}.toml", settings)
        jobs[run.label] = (
            run_command(preset.script, config_path, run_dir, resume=state == "resume"),
            root / "logs" / f"{run.label}.log",
        )
    return jobs


def compare(preset: Preset, root: Path, runs: list[ArmRun]) -> list[Path]:
    """plots/ and results.md over every run that has metrics."""
    rows = {run.label: read_metrics(root / run.label) for run in runs}
    written = plot_rows({k: v for k, v in rows.items() if v}, root / "plots", run_styles(runs), phases=False)
    atomic_write_text(root / "results.md", f"# {preset.name}\n\n" + results_table(preset, root))
    return written + [root / "results.md"]


def main(preset: Path, **flags: Any) -> None:
    config = SweepConfig(**flags)
    if config.gpus_per_arm is not None and config.gpus_per_arm < 0:
        raise typer.BadParameter(f"must be >= 0, got {config.gpus_per_arm}", param_hint="'--gpus-per-arm'")
    try:
        loaded = load_preset(preset)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'PRESET'") from None
    root = config.output_root / loaded.name
    jobs = prepare(loaded, root)
    gpus = {
        run.label: config.gpus_per_arm if config.gpus_per_arm is not None else gpus_needed(run.settings)
        for run in loaded.runs
        if run.label in jobs
    }
    if jobs and use_ray(config, list(gpus.values())):
        statuses = run_on_ray(jobs, gpus, config)
    else:
        statuses = {}
        for i, (label, (command, log)) in enumerate(jobs.items(), start=1):
            typer.echo(f"[{i}/{len(jobs)}] {label}: running (log: {log})")
            started = time.perf_counter()
            statuses[label] = launch(command, log)
            typer.echo(
                f"[{i}/{len(jobs)}] {label}: exit status {statuses[label]} after {time.perf_counter() - started:.0f} s"
            )
    for path in compare(loaded, root, loaded.runs):
        typer.echo(f"wrote {path}")
    typer.echo((root / "results.md").read_text())
    failed = sorted(label for label, status in statuses.items() if status != 0)
    if failed:
        typer.echo(f"failed runs (see {root / 'logs'}): {', '.join(failed)}", err=True)
        raise typer.Exit(1)


app = typer_app(
    main,
    [
        inspect.Parameter(
            "preset",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Path,
            default=typer.Argument(..., help="A preset TOML file, e.g. configs/experiments/grpo_baselines.toml."),
        )
    ]
    + option_parameters(SweepConfig),
    "Run every arm of an experiment preset, then plot and tabulate them (see the module docstring).",
)

if __name__ == "__main__":
    app()
