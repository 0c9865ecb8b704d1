"""Run every arm of an experiment preset, then compare them.

    uv run scripts/sweep.py configs/experiments/grpo_baselines.toml
    uv run scripts/sweep.py configs/experiments/grpo_learning_rate.toml --launcher ray
    uv run scripts/sweep.py configs/experiments/grpo_baselines.toml --set n_grpo_steps=50 --arms no_baseline
    uv run scripts/sweep.py configs/experiments/grpo_length_normalization.toml --from-best outputs/grpo_learning_rate
    uv run scripts/sweep.py configs/pku/grpo_baselines.toml            # runs in outputs/pku/grpo_baselines/
    uv run scripts/sweep.py configs/cs336_2026/variants_on_policy.toml --seeds 0,1,2,3

Each run (an arm, at each of the preset's seeds) trains in its own folder <output-root>/<preset>/<run>/ as a
subprocess of the preset's script (scripts/train_grpo.py unless it names another, e.g. train_grpo_ray), with its
settings written to <output-root>/<preset>/configs/<run>.toml and its output to logs/<run>.log; <preset> is the
preset's name under the folder it sits in below configs/experiments/ or configs/ (configs/pku/x.toml: pku/x), so that
the handouts' presets of the same name keep their runs apart. Its wandb run (with --set wandb_mode=online) is named
after the run and grouped by <preset>. --set KEY=VALUE overrides a setting for every arm (typed like the setting),
--arms runs only the arms named, and --from-best DIR starts every arm from the settings of the best arm of the earlier
sweep whose output folder is DIR (the folder holding its sweep.json; by the final validation reward, as its results.md
says) in place of the preset's base and its [placeholder] settings. Finished runs are skipped and runs with an earlier
checkpoint resume, so re-running the command after an interruption picks up where it stopped; a run that diverged (a
NaN, or a loss past --set divergence_loss_bound=...) is reported as such and left alone unless --diverged says
otherwise. With several GPUs (or a Ray cluster) runs go side by side through Ray, each on the GPUs it needs (2 when
its rollouts use vLLM: a policy GPU and a rollout GPU, as the handouts run; for GRPO on Ray one per actor holding a
model; else 1; --gpus-per-arm sets a number; on a Ray cluster without GPUs, --cpus-per-run CPUs each); on a CPU
they run one after another unless --launcher ray. --seeds 0,1,2,3 runs every arm once per seed, in place of the
preset's seeds list. At the end: plots/ (one line per run, or per arm run at several seeds its mean with a 95% band,
mean +- 1.96 s / sqrt(n), each seed faint beneath: validation reward vs step and vs wall time, entropy, response
length, gradient norm, clip fraction, KL, the time per phase; where the arms differ in one numeric setting, the final
validation reward against it), results.md (how the sweep was run, each run's status and validation rewards, per arm
the mean, std, min, max and 95% band over its seeds, loop throughput and device-hours for GRPO on Ray, the best arm)
and sweep.json (what --from-best reads).
"""

import inspect
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import typer

from alignment.config.cli import option_parameters, script_help, typer_app
from alignment.config.settings import setting
from alignment.experiments.plotting import final_value_figure, plot_rows, step_label
from alignment.experiments.sweep import (
    SWEEP_FILE,
    ArmRun,
    BestArm,
    Preset,
    base_left_out,
    best_arm,
    changed_settings,
    final_by_setting,
    folder_before_course_folders,
    gpus_needed,
    launch,
    load_preset,
    parse_overrides,
    parse_seeds,
    preset_script,
    read_metrics,
    results_table,
    run_command,
    run_state,
    run_styles,
    script_settings,
    swept_setting,
    toml_value,
    write_run_config,
    write_sweep_record,
)
from alignment.run.checkpoint import complete_step
from alignment.run.divergence import read_marker
from alignment.utils.atomic import atomic_write_text


@dataclass
class SweepConfig:
    output_root: Path = setting(
        Path("outputs"),
        "Runs go to <output-root>/<preset>/<run>/, <preset> being the preset's name under the folder it sits in "
        "below configs/experiments/ or configs/ (configs/pku/grpo_baselines.toml: pku/grpo_baselines).",
    )
    launcher: Literal["auto", "local", "ray"] = setting(
        "auto",
        "local: one run after another; ray: side by side on a Ray cluster; auto: ray when at least two "
        "runs fit on this machine's GPUs or --ray-address is given.",
    )
    gpus_per_arm: int | None = setting(
        None,
        "GPUs each run gets under Ray (default: what the run needs: 2 when its rollouts use vLLM, a policy GPU and a "
        "rollout GPU as the handouts run; for GRPO on Ray, 1 colocated, else one per learner process and one for the "
        "generator; else 1).",
    )
    ray_address: str | None = setting(
        None,
        "Address of a running Ray cluster (default: start one here, or use the one this process is connected to).",
    )
    cpus_per_run: int = setting(
        1, "CPUs each run holds under Ray on a cluster without GPUs (runs side by side up to its CPUs)."
    )
    seeds: str | None = setting(
        None,
        "Comma-separated seeds, e.g. 0,1,2,3: every arm runs once per seed (run folders <arm>_seed<k>), in place of "
        "the preset's own seeds list. Plots then show each arm's mean with a 95% band, results.md its spread.",
    )
    set: list[str] = setting(
        [],
        "KEY=VALUE: a setting for every arm, over the preset's (repeatable; typed like the setting, e.g. "
        "--set learning_rate=3e-5 --set kl_prev=true --set divergence_loss_bound=100).",
    )
    arms: str | None = setting(None, "Comma-separated arms to run (default: all); results.md still lists every run.")
    from_best: Path | None = setting(
        None,
        "The output folder of an earlier sweep, the one holding its sweep.json (e.g. outputs/grpo_learning_rate, "
        "written by the grpo_learning_rate preset): its best arm's settings, by final validation reward, replace "
        "the preset's base and its [placeholder] settings.",
    )
    diverged: Literal["skip", "resume", "restart"] = setting(
        "skip",
        "Runs that diverged: skip them (reported as diverged), resume them from their last checkpoint, or restart "
        "them from scratch.",
    )


def use_ray(config: SweepConfig, gpus: list[int]) -> bool:
    """Ray when asked, or when at least two of the runs (`gpus`: each one's GPU count) fit this machine's GPUs."""
    if config.launcher != "auto":
        return config.launcher == "ray"
    if config.ray_address is not None:
        return True
    import torch

    return len(gpus) > 1 and torch.cuda.device_count() >= sum(sorted(gpus)[:2])


def task_resources(gpus: dict[str, int], cluster_gpus: float, cpus_per_run: int) -> dict[str, dict[str, float]]:
    """Each run's Ray resources: its GPUs; on a cluster without GPUs, `cpus_per_run` CPUs instead (runs side by side
    up to the cluster's CPUs). A run needing more GPUs than the cluster has would wait forever: an error naming it."""
    if not cluster_gpus:
        return {label: {"num_gpus": 0, "num_cpus": cpus_per_run} for label in gpus}
    too_big = {label: n for label, n in gpus.items() if n > cluster_gpus}
    if too_big:
        runs = ", ".join(f"{label} ({n})" for label, n in too_big.items())
        raise typer.BadParameter(
            f"the Ray cluster has {cluster_gpus:g} GPUs, fewer than these runs need: {runs}",
            param_hint="'--gpus-per-arm'",
        )
    return {label: {"num_gpus": n, "num_cpus": 1} for label, n in gpus.items()}


def run_on_ray(jobs: dict[str, tuple[list[str], Path]], gpus: dict[str, int], config: SweepConfig) -> dict[str, int]:
    """Every job as a Ray task holding its GPUs (Ray sets CUDA_VISIBLE_DEVICES for each: one run per free GPU when
    each needs one), or its CPUs on a cluster without GPUs. A Ray connection this process already has is used and
    left open; one started here is shut down at the end."""
    from alignment.ray.env import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=config.ray_address, include_dashboard=False)
    try:
        resources = task_resources(gpus, ray.cluster_resources().get("GPU", 0), config.cpus_per_run)
        pending = {
            ray.remote(**resources[label])(launch).remote(command, log): label for label, (command, log) in jobs.items()
        }
        statuses = {}
        while pending:
            done, _ = ray.wait(list(pending))
            label = pending.pop(done[0])
            statuses[label] = ray.get(done[0])
            typer.echo(f"{label}: exit status {statuses[label]}")
        return statuses
    finally:
        if started:
            ray.shutdown()


def prepare(preset: Preset, root: Path, arms: list[str], diverged: str) -> dict[str, tuple[list[str], Path]]:
    """The command and log file of every run of `arms` still to do. Finished runs, and diverged ones unless
    `diverged` says resume or restart, are reported and left alone, unless the preset now gives them other settings:
    that is an error before anything runs."""
    states = {run.label: run_state(root / run.label, preset.total_steps(run)) for run in preset.runs}
    chosen = [run for run in preset.runs if run.arm in arms]
    for run in chosen:
        run_dir, state = root / run.label, states[run.label]
        kept = state == "finished" or (state == "diverged" and diverged == "skip")
        changed = (
            changed_settings(root / "configs" / f"{run.label}.toml", settings_of(preset, run, root)) if kept else []
        )
        if changed:  # its results would be reported under settings it never had
            redo = "pass --diverged restart, " if state == "diverged" else ""
            raise typer.BadParameter(
                f"run {run.label} {state} with other settings ({', '.join(changed)}); {redo}"
                f"move {run_dir} away or rename the arm",
                param_hint="'PRESET'",
            )
    jobs = {}
    for run in chosen:
        run_dir, state = root / run.label, states[run.label]
        if state == "diverged":
            marker = read_marker(run_dir) or {}
            if diverged == "skip":
                typer.echo(
                    f"{run.label}: diverged at step {marker.get('grpo_step')}, skipped (--diverged resume or restart "
                    "runs it again)"
                )
                continue
            state = "resume" if diverged == "resume" and complete_step(run_dir) is not None else "restart"
            typer.echo(f"{run.label}: diverged at step {marker.get('grpo_step')}; {state}")
        else:
            typer.echo(f"{run.label}: {state}")
        if state == "finished":
            continue
        # a run stopped before its first checkpoint starts over in its own folder
        settings = settings_of(preset, run, root) | ({"overwrite": True} if state == "restart" else {})
        config_path = write_run_config(root / "configs" / f"{run.label}.toml", settings)
        jobs[run.label] = (
            run_command(preset.script, config_path, run_dir, resume=state == "resume"),
            root / "logs" / f"{run.label}.log",
        )
    return jobs


def settings_of(preset: Preset, run: ArmRun, root: Path) -> dict[str, Any]:
    """Every setting the run's script gets: the arm's, its folder, and its wandb group (the preset)."""
    known = script_settings(preset.script)
    group = (
        {"wandb_group": preset.folder.as_posix()}
        if known is not None and "wandb_group" in known[0].__dataclass_fields__ and "wandb_group" not in run.settings
        else {}
    )
    return run.settings | {"output_dir": root / run.label} | group


def how_it_ran(record: dict[str, Any]) -> list[str]:
    """Markdown lines at the top of results.md: the preset, and what the last command changed about it."""
    lines = [f"Preset: `{record['preset']}` (script `{record['script']}`)."]
    if record["set"]:
        lines.append(
            "Settings given with --set (to every arm the last command ran): "
            + ", ".join(f"`{k} = {toml_value(v)}`" for k, v in record["set"].items())
            + "."
        )
    if record.get("seeds"):
        lines.append(f"Seeds (--seeds): {', '.join(map(str, record['seeds']))}.")
    if record["from_best"]:
        lines.append(f"Base (--from-best): {record['from_best']}.")
    if record["arms"]:
        lines.append(f"Arms the last command ran (--arms): {', '.join(record['arms'])}.")
    return lines


def compare(preset: Preset, root: Path, runs: list[ArmRun], record: dict[str, Any]) -> list[Path]:
    """plots/ and results.md over every run that has metrics (diverged runs too: their curves up to the NaN)."""
    rows = {run.label: read_metrics(root / run.label) for run in runs}
    written = plot_rows(
        {k: v for k, v in rows.items() if v},
        root / "plots",
        run_styles(runs),
        phases=preset.script == "train_grpo_ray",  # UW v2 problem 7's time series of each strategy's phases
        xlabel=step_label(root / label for label, run_rows in rows.items() if run_rows),
        arms={run.label: run.arm for run in runs},
    )
    setting = swept_setting(preset)
    if setting is not None:  # e.g. CS336's grpo_learning_rate: final validation reward against the learning rate
        points, failed = final_by_setting(preset, root, setting)
        path = root / "plots" / f"final_reward_vs_{setting}.png"
        if final_value_figure(points, setting.replace("_", " "), "final validation reward", path, failed):
            written.append(path)
    text = f"# {preset.folder.as_posix()}\n\n" + "\n".join(how_it_ran(record)) + "\n\n" + results_table(preset, root)
    atomic_write_text(root / "results.md", text)
    return written + [root / "results.md"]


def main(preset: Path, **flags: Any) -> None:
    config = SweepConfig(**flags)
    if config.gpus_per_arm is not None and config.gpus_per_arm < 0:
        raise typer.BadParameter(f"must be >= 0, got {config.gpus_per_arm}", param_hint="'--gpus-per-arm'")
    try:
        script = preset_script(preset)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'PRESET'") from None
    try:
        overrides = parse_overrides(script, config.set)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'--set'") from None
    base: BestArm | None = None
    if config.from_best is not None:
        try:
            base = best_arm(config.from_best)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="'--from-best'") from None
        left_out = base_left_out(script, base)
        typer.echo(
            f"base: {base.describe()}"
            + (f"; left out (no {script} setting): {', '.join(left_out)}" if left_out else "")
        )
    try:
        seeds = None if config.seeds is None else parse_seeds(config.seeds)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'--seeds'") from None
    if config.cpus_per_run < 1:
        raise typer.BadParameter(f"must be >= 1, got {config.cpus_per_run}", param_hint="'--cpus-per-run'")
    try:
        loaded = load_preset(preset, overrides, base, seeds)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="'PRESET'") from None
    if loaded.placeholder:
        held = ", ".join(loaded.placeholder)
        typer.echo(
            f"placeholder settings ({held}) replaced by the base above"
            if base is not None
            else f"placeholder settings ({held}): the preset's stand-ins; --from-best DIR takes them from the best "
            "arm of the earlier sweep whose output folder is DIR"
        )
    arms = loaded.arms if config.arms is None else [a.strip() for a in config.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in loaded.arms]
    if unknown or not arms:
        raise typer.BadParameter(
            f"no arm {', '.join(unknown) or '(none given)'} in {preset.name}; its arms: {', '.join(loaded.arms)}",
            param_hint="'--arms'",
        )
    root = config.output_root / loaded.folder
    before = folder_before_course_folders(config.output_root, preset, loaded)
    if before is not None:
        raise typer.BadParameter(
            f"this preset's runs so far are in {before}, its folder before each course's presets had their own; "
            f"move it to {root} to continue them (or away, to start over)",
            param_hint="'PRESET'",
        )
    record = {
        "seeds": seeds,
        "set": overrides,
        "arms": None if config.arms is None else arms,
        "from_best": None if base is None else base.describe(),
    }
    write_sweep_record(root, preset, loaded, record)
    jobs = prepare(loaded, root, arms, config.diverged)
    gpus = {
        run.label: config.gpus_per_arm if config.gpus_per_arm is not None else gpus_needed(run.settings, loaded.script)
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
    for path in compare(loaded, root, loaded.runs, {"preset": str(preset), "script": loaded.script} | record):
        typer.echo(f"wrote {path}")
    typer.echo(f"wrote {root / SWEEP_FILE}")
    typer.echo((root / "results.md").read_text())
    diverged = sorted(label for label, status in statuses.items() if status != 0 and read_marker(root / label))
    failed = sorted(label for label, status in statuses.items() if status != 0 and label not in diverged)
    if diverged:
        typer.echo(f"diverged runs (results.md says at which step): {', '.join(diverged)}", err=True)
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
    script_help(__doc__, "scripts/sweep.py"),
    SweepConfig,
)

if __name__ == "__main__":
    app()
