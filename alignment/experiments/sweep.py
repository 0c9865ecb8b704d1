"""Experiment presets: a TOML file naming a script, shared settings and arms, expanded into one run per arm
and seed, each in its own folder; which runs are finished, diverged or to resume; the results table and the best
arm, which a later sweep may take as its base (--from-best); --set values typed like the script's settings.

    script = "train_grpo"            # scripts/<script>.py; it takes --config FILE and --resume DIR
    base = "../grpo_handout_starter.toml"  # optional: a settings file under [shared], relative to the preset
    seeds = [0, 1]                   # optional: every arm once per seed (run folders <arm>_seed<k>)
    [placeholder]                    # optional: over the base, standing in for an earlier sweep's best arm until
    epochs_per_rollout_batch = 2     #   --from-best DIR gives it (the base and these are then replaced together)
    [shared]                         # the script's settings, common to every arm (over the base's)
    n_grpo_steps = 200
    [arms.no_baseline]               # one table per arm: settings that differ from [shared]
    loss_type = "no_baseline"

A preset's runs go to <output-root>/<its folder>/<run>/, its folder being its name under the course folder it sits
in (preset_folder): presets of the same name for different handouts keep their runs apart.
"""

import difflib
import importlib
import json
import math
import statistics
import subprocess
import sys
import tomllib
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from alignment.config.settings import choices_of, upgraded
from alignment.experiments.run_table import final_rewards
from alignment.experiments.seeds import spread
from alignment.rollout.backends import vllm_build
from alignment.run.checkpoint import complete_step
from alignment.run.divergence import read_marker
from alignment.run.metrics_log import read_metrics_jsonl
from alignment.utils.atomic import atomic_write_json, atomic_write_text

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "scripts"
CONFIGS_DIR = SCRIPTS_DIR.parent / "configs"
# configs/experiments/ holds CS336 A5's presets at its top (their runs in <output-root>/<name>/) and the other
# handouts' and CPU twins in folders of their own; configs/pku/ PKU HW3's
PRESETS_DIR = CONFIGS_DIR / "experiments"
# The setting that holds a script's total step count, to tell a finished run from an interrupted one; a script
# without one (train_sft: its steps follow from data size, batch and epochs) has finished once it wrote policy/.
STEPS_SETTING = {"train_grpo": "n_grpo_steps", "train_grpo_ray": "n_grpo_steps", "expert_iteration": "n_ei_steps"}
# Each script's settings class and checks (module, class, check), applied to every arm before any arm starts;
# imported when a preset names the script (the Ray settings import Ray).
SCRIPT_SETTINGS = {
    "train_grpo": ("alignment.grpo.config", "GRPOConfig", "validate"),
    "train_grpo_ray": ("alignment.ray.config", "RayGRPOConfig", "validate_ray"),
    "train_sft": ("alignment.supervised.config", "SFTConfig", "validate"),
    "expert_iteration": ("alignment.supervised.config", "EIConfig", "validate"),
}
PRESET_KEYS = {"description", "script", "base", "placeholder", "seeds", "steps_setting", "shared", "arms"}
# Settings that belong to one run, not to an arm: left out when an arm's settings become another sweep's base
RUN_ONLY = ("output_dir", "overwrite", "seed", "wandb_group")
SWEEP_FILE = "sweep.json"  # what a sweep was run with, and its runs: --from-best reads it

RunState = Literal["new", "restart", "resume", "finished", "diverged"]


def script_settings(script: str) -> tuple[type, Callable[[Any], None]] | None:
    """The script's settings dataclass and its checks; None for a script this module does not know."""
    if script not in SCRIPT_SETTINGS:
        return None
    module, cls, check = SCRIPT_SETTINGS[script]
    loaded = importlib.import_module(module)
    return getattr(loaded, cls), getattr(loaded, check)


@dataclass(frozen=True)
class ArmRun:
    """One run of a preset: an arm at one seed, with every setting the script gets."""

    label: str  # the run folder's name: the arm, or <arm>_seed<k>
    arm: str
    seed: int | None
    settings: dict[str, Any]


@dataclass(frozen=True)
class BestArm:
    """The arm of an earlier sweep with the highest final validation reward, and its settings."""

    sweep: Path
    arm: str
    reward: float  # final validation reward, the mean over the arm's seeds
    seeds: int
    settings: dict[str, Any]

    def describe(self) -> str:
        over = f", mean of {self.seeds} seeds" if self.seeds > 1 else ""
        return f"best arm {self.arm} of {self.sweep} (final validation reward {self.reward:.3f}{over})"


@dataclass(frozen=True)
class Preset:
    name: str
    script: str
    steps_setting: str | None
    runs: list[ArmRun]
    folder: Path  # where its runs go under --output-root (preset_folder)
    placeholder: tuple[str, ...] = ()  # the settings of its [placeholder] table

    def total_steps(self, run: ArmRun) -> int | None:
        return None if self.steps_setting is None else int(run.settings[self.steps_setting])

    @property
    def arms(self) -> list[str]:
        return list(dict.fromkeys(run.arm for run in self.runs))


def _fail(path: Path, message: str) -> None:
    raise ValueError(f"{path}: {message}")


def read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"no such {what}: {path}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None


def _toml_or_text(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _typed(annotation: Any, text: str, key: str) -> Any:
    """`text` as a value of a setting annotated `annotation`; a ValueError naming `--set key` otherwise."""
    args = typing.get_args(annotation)
    if type(None) in args and text in ("none", "None", "null"):
        return None
    choices = choices_of(annotation)
    if choices is not None:
        if text not in map(str, choices):
            raise ValueError(f"--set {key}={text}: not one of {', '.join(map(str, choices))}")
        return next(c for c in choices if str(c) == text)
    kinds = [a for a in args if a is not type(None)] if type(None) in args else [annotation]
    kind = kinds[0] if len(kinds) == 1 else annotation
    if typing.get_origin(kind) is list:
        items = _toml_or_text(text) if text.startswith("[") else [text]
        if not isinstance(items, list):
            raise ValueError(f'--set {key}={text}: expected a list such as ["a", "b"]')
        (item_kind,) = typing.get_args(kind) or (str,)
        return [_typed(item_kind, item if isinstance(item, str) else json.dumps(item), key) for item in items]
    parse: dict[Any, Callable[[str], Any]] = {
        bool: lambda t: {"true": True, "false": False}[t.lower()],
        int: int,
        float: float,
        str: str,
        Path: str,
    }
    if kind not in parse:
        return _toml_or_text(text)
    try:
        return parse[kind](text)
    except (KeyError, ValueError):
        expected = "true or false" if kind is bool else f"a{'n' if kind is int else ''} {kind.__name__}"
        raise ValueError(f"--set {key}={text}: expected {expected}") from None


def parse_overrides(script: str, items: Sequence[str]) -> dict[str, Any]:
    """`--set key=value` items, each value typed like the script's setting `key` (TOML for a script this module
    has no settings class for); an unknown key, or a value of the wrong type, is a ValueError naming it."""
    known = script_settings(script)
    hints = {}
    if known is not None:  # the dataclass's fields, not its class constants (RESUMABLE, ...)
        types = typing.get_type_hints(known[0])
        hints = {f.name: types[f.name] for f in fields(known[0])}
    values = {}
    for item in items:
        key, equals, text = item.partition("=")
        key = key.strip()
        if not equals or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. --set learning_rate=3e-5")
        if known is None:
            values[key] = _toml_or_text(text)
            continue
        if key not in hints:
            close = difflib.get_close_matches(key, list(hints), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ValueError(f"--set {key}: not a setting of {script} ({known[0].__name__}){hint}")
        values[key] = _typed(hints[key], text.strip(), key)
    return values


def preset_script(path: Path) -> str:
    """The script a preset names (train_grpo unless it says), read before the rest is checked."""
    return read_toml(path, "preset file").get("script", "train_grpo")


def preset_folder(path: Path) -> Path:
    """The folder a preset's runs go to under --output-root: its file name without .toml, under the folder it sits
    in below configs/experiments/ or configs/ (configs/experiments/grpo_baselines.toml -> grpo_baselines,
    configs/pku/grpo_baselines.toml -> pku/grpo_baselines, configs/experiments/uw_v1/p13_colocated.toml ->
    uw_v1/p13_colocated); a preset kept anywhere else -> its name alone."""
    resolved = path.resolve()
    for top in (PRESETS_DIR, CONFIGS_DIR):
        if resolved.is_relative_to(top):
            return resolved.relative_to(top).with_suffix("")
    return Path(path.stem)


def parse_seeds(text: str) -> list[int]:
    """--seeds 0,1,2,3 as [0, 1, 2, 3]; a ValueError naming --seeds for anything else (empty, repeated, not
    integers)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    try:
        seeds = [int(item) for item in items]
    except ValueError:
        raise ValueError(f"--seeds {text}: expected comma-separated integers, e.g. --seeds 0,1,2,3") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text}: expected distinct comma-separated integers, e.g. --seeds 0,1,2,3")
    return seeds


def load_preset(
    path: Path,
    overrides: dict[str, Any] | None = None,
    base: BestArm | None = None,
    seeds: list[int] | None = None,
) -> Preset:
    """Read and check a preset; errors name the file, the arm and the setting. `overrides` (--set) go over every
    arm's settings; `base` (--from-best) stands in for the preset's own base settings file and its [placeholder]
    settings; `seeds` (--seeds) replace the preset's own seeds list: every arm runs once per seed."""
    data = read_toml(path, "preset file")
    unknown = sorted(set(data) - PRESET_KEYS)
    if unknown:
        _fail(path, f"unknown top-level keys {', '.join(unknown)} (expected {', '.join(sorted(PRESET_KEYS))})")
    script = data.get("script", "train_grpo")
    if not (SCRIPTS_DIR / f"{script}.py").is_file():
        _fail(path, f"script = {script!r}: no scripts/{script}.py")
    steps_setting = data.get("steps_setting", STEPS_SETTING.get(script))
    known = script_settings(script)
    placeholder = data.get("placeholder", {})
    if not isinstance(placeholder, dict):
        _fail(path, "placeholder must be a table of settings ([placeholder])")
    defaults: dict[str, Any] = {}
    if base is not None:  # settings another script has and this one has not stay behind (see base_left_out)
        defaults = {k: v for k, v in base.settings.items() if k not in base_left_out(script, base)}
    else:
        if "base" in data:
            try:
                defaults = read_toml(path.parent / data["base"], "base settings file")
            except ValueError as err:
                _fail(path, f"base = {data['base']!r}: {err}")
            defaults.pop("output_dir", None)  # one run's folder: the sweep gives each of its runs its own
        defaults |= placeholder
    shared, arms = defaults | data.get("shared", {}), data.get("arms", {})
    if not arms or not all(isinstance(a, dict) for a in arms.values()):
        _fail(path, "needs at least one [arms.<name>] table")
    seeds = data.get("seeds") if seeds is None else seeds
    if seeds is not None and (not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds)):
        _fail(path, f"seeds must be a non-empty list of integers, got {seeds!r}")
    runs = []
    for arm, arm_settings in arms.items():
        for seed in seeds or [None]:
            settings = shared | arm_settings | ({"seed": seed} if seed is not None else {}) | (overrides or {})
            label = arm if seed is None else f"{arm}_seed{seed}"
            if steps_setting is not None and steps_setting not in settings:
                _fail(path, f"arm {arm!r}: {steps_setting} is not set (in [shared] or the arm)")
            if known is not None:
                _check_settings(path, arm, settings, *known)
            runs.append(ArmRun(label, arm, seed, settings))
    return Preset(path.stem, script, steps_setting, runs, preset_folder(path), tuple(placeholder))


def folder_before_course_folders(output_root: Path, preset_path: Path, preset: Preset) -> Path | None:
    """Where this preset's runs went before each course's presets had a folder of their own (<output-root>/<name>),
    when they are there and its folder now is elsewhere and not yet started: a rerun would start them all over."""
    before, now = output_root / preset.name, output_root / preset.folder
    record = before / SWEEP_FILE
    if before == now or now.exists() or not record.is_file():
        return None
    return before if Path(json.loads(record.read_text())["preset"]).resolve() == preset_path.resolve() else None


def base_left_out(script: str, base: BestArm) -> list[str]:
    """The best arm's settings that `script` has no field for (an arm of a GRPO-on-Ray sweep as the base of a
    single-process one: its strategy)."""
    known = script_settings(script)
    names = {f.name for f in fields(known[0])} if known is not None else set(base.settings)
    return sorted(set(base.settings) - names)


def _check_settings(
    path: Path, arm: str, settings: dict[str, Any], config_cls: type, check: Callable[[Any], None]
) -> None:
    """The script's own checks, before any arm starts: a bad arm must not surface hours into a sweep."""
    try:
        settings = upgraded(config_cls, settings)  # an earlier version's names, read as the script reads them
    except ValueError as err:
        _fail(path, f"arm {arm!r}: {err}")
    unknown = sorted(set(settings) - {f.name for f in fields(config_cls)})
    if unknown:
        _fail(path, f"arm {arm!r}: unknown settings {', '.join(unknown)} (not {config_cls.__name__} fields)")
    try:
        check(config_cls(**settings))
    except (ValueError, TypeError) as err:
        _fail(path, f"arm {arm!r}: {err}")


def gpus_needed(settings: dict[str, Any], script: str = "train_grpo") -> int:
    """GPUs a run takes. GRPO on Ray: one for a colocated strategy, else one per learner process and one for the
    generator (alignment/ray/cluster.py). Other scripts: a policy GPU and a rollout GPU when vLLM generates (the
    handouts' split), else one; every script here samples with vLLM under `auto` where its CUDA build is
    installed, as on a GPU cluster."""
    if script == "train_grpo_ray":
        from alignment.ray.config import COLOCATED

        strategy = settings.get("strategy", "colocated-sync")
        return 1 if strategy in COLOCATED else int(settings.get("learner_processes", 1)) + 1
    backend = settings.get("backend", "auto")
    return 2 if backend == "vllm" or (backend == "auto" and vllm_build() == "cuda") else 1


def stopped_by_time_budget(run_dir: Path) -> bool:
    """Whether the run's last checkpoint is that of a run its --time-budget ended (alignment/run/time_budget.py)."""
    path = run_dir / "checkpoint" / "state.json"
    return path.is_file() and json.loads(path.read_text()).get("loop", {}).get("stopped_by") == "time_budget"


def run_state(run_dir: Path, total_steps: int | None) -> RunState:
    """diverged: the run stopped on a NaN or a loss past its bound (diverged.json); finished: a complete checkpoint
    at the last step or of a run its time budget ended (or, where the total is not a setting, the exported
    policy/); resume: an earlier complete checkpoint; restart: files but no complete checkpoint (stopped before its
    first one)."""
    if read_marker(run_dir) is not None:
        return "diverged"
    step = complete_step(run_dir)
    if step is not None:
        done = (
            (run_dir / "policy").is_dir()
            if total_steps is None
            else step >= total_steps or stopped_by_time_budget(run_dir)
        )
        return "finished" if done else "resume"
    return "restart" if run_dir.exists() and any(run_dir.iterdir()) else "new"


def toml_value(value: Any) -> str:
    """A scalar or list as TOML (settings are flat: strings, numbers, booleans, paths, lists of those)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, Path)):
        return json.dumps(str(value))  # JSON string escapes are valid TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise ValueError(f"cannot write {value!r} ({type(value).__name__}) to a TOML settings file")


def toml_text(settings: dict[str, Any]) -> str:
    """Flat settings as TOML lines; None values are left out (the script's default is None)."""
    return "".join(f"{key} = {toml_value(value)}\n" for key, value in settings.items() if value is not None)


def write_run_config(path: Path, settings: dict[str, Any]) -> Path:
    """The run's settings as a flat TOML file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, toml_text(settings))
    return path


def changed_settings(config_path: Path, settings: dict[str, Any]) -> list[str]:
    """Settings whose values differ from those the run was started with (its written settings file)."""
    if not config_path.is_file():
        return []
    before = tomllib.loads(config_path.read_text())
    now = tomllib.loads(toml_text(settings))
    logging = {k for k in before.keys() | now.keys() if k == "overwrite" or k.startswith("wandb_")}
    return sorted(k for k in (before.keys() | now.keys()) - logging if before.get(k) != now.get(k))


def run_command(script: str, config: Path, run_dir: Path, resume: bool) -> list[str]:
    """The script's command line for one run. A resumed run continues with the settings its folder keeps;
    the settings file goes along so that a preset's resumable changes (more steps) take effect, and any other
    change is refused by the script, naming it."""
    command = [sys.executable, str(SCRIPTS_DIR / f"{script}.py"), "--config", str(config)]
    return command + ["--resume", str(run_dir)] if resume else command


def launch(command: list[str], log_path: Path) -> int:
    """Run one command with its output appended to log_path; returns its exit status. Kept here, not in the
    script, so Ray workers can import it."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's metrics rows; none for a run not started."""
    path = run_dir / "metrics.jsonl"
    return read_metrics_jsonl(path) if path.is_file() else []


@dataclass(frozen=True)
class RunResult:
    """Where a run stands and what it reached: its validations, and for GRPO on Ray its loop throughput."""

    label: str
    arm: str
    seed: int | None
    state: RunState
    diverged_at: int | None  # the step it diverged at
    rewards: dict[str, float] | None  # final_rewards of its validations (before a divergence)
    samples: int | None = None  # rollouts trained on (GRPO on Ray)
    loop_s: float | None = None  # seconds in the loop's steps, validation left out (GRPO on Ray)
    device_hours: float | None = None
    sync_s: float | None = None  # mean seconds of a weight sync (GRPO on Ray)

    @property
    def status(self) -> str:
        return {
            "finished": "finished",
            "diverged": f"diverged at step {self.diverged_at}",
            "resume": "stopped (resumable)",
            "restart": "stopped before its first checkpoint",
            "new": "not run",
        }[self.state]

    @property
    def samples_per_s(self) -> float | None:
        return None if not self.loop_s or self.samples is None else self.samples / self.loop_s


def run_result(run_dir: Path, label: str, arm: str, seed: int | None, total_steps: int | None) -> RunResult:
    rows = read_metrics(run_dir)
    state, marker = run_state(run_dir, total_steps), read_marker(run_dir)
    steps: dict[float, dict[str, Any]] = {}
    for row in rows:
        if "time_step_s" in row:  # GRPO on Ray: a step's rows share its timings; the first stands for them
            steps.setdefault(row["grpo_step"], row)
    loop: dict[str, Any] = {}
    if steps:
        syncs = [r["time_weight_sync_s"] for r in steps.values() if math.isfinite(r["time_weight_sync_s"])]
        loop = {
            "samples": round(sum(r["samples_per_s"] * r["time_step_s"] for r in steps.values())),
            "loop_s": sum(r["time_step_s"] for r in steps.values()),
            "device_hours": max(r["device_hours"] for r in steps.values()),
            "sync_s": statistics.fmean(syncs) if syncs else math.nan,  # NaN: an update whose sync did not finish
        }
    diverged_at = None if marker is None else marker["grpo_step"]
    return RunResult(label, arm, seed, state, diverged_at, final_rewards(rows), **loop)


def sweep_results(preset: Preset, root: Path) -> list[RunResult]:
    return [run_result(root / r.label, r.label, r.arm, r.seed, preset.total_steps(r)) for r in preset.runs]


def best_arm_of(results: list[RunResult]) -> tuple[str, float, int] | None:
    """(arm, mean final validation reward over its seeds, seeds) of the best arm whose every run finished without
    diverging; ties go to the arm listed first. None when no arm qualifies."""
    by_arm: dict[str, list[RunResult]] = {}
    for result in results:
        by_arm.setdefault(result.arm, []).append(result)
    scored = [
        (arm, sum(r.rewards["final"] for r in runs) / len(runs), len(runs))  # type: ignore[index]
        for arm, runs in by_arm.items()
        if all(r.state == "finished" and r.rewards is not None for r in runs)
    ]
    return max(scored, key=lambda a: a[1], default=None)


BEST_BY = "final validation reward (the mean over an arm's seeds; arms with a diverged or unfinished run left out)"


def results_table(preset: Preset, root: Path) -> str:
    """Markdown: one row per run, its status (finished, diverged at step N, ...) and rewards; for GRPO on Ray also
    the samples trained on, samples per second of the loop (validation left out, the handouts' throughput), device-
    hours, the mean weight-sync seconds and the speed-up over the first run (its throughput's ratio: sync_time /
    async_time on the same samples); with several seeds, one more row per arm with their mean and range; then the
    best arm, by the metric it names."""
    results = sweep_results(preset, root)
    loops = [r for r in results if r.samples_per_s is not None]
    reference = loops[0] if loops else None
    head = "| run | arm | seed | status | step | final validation reward | best | wall time (s) |"
    if reference is not None:
        head += f" samples | samples/s (loop) | device-hours | weight sync (s) | speed-up over {reference.label} |"
    lines = [head, "|" + "---|" * head.count(" |")]
    for r in results:
        line = f"| {r.label} | {r.arm} | {'' if r.seed is None else r.seed} | {r.status} | "
        rewards = r.rewards
        line += (
            "- | - | - | - |"
            if rewards is None
            else f"{rewards['step']:g} | {rewards['final']:.3f} | {rewards['best']:.3f} | {rewards['time_s']:.0f} |"
        )
        if reference is not None:
            line += (
                " - | - | - | - | - |"
                if r.samples_per_s is None
                else f" {r.samples} | {r.samples_per_s:.2f} | {r.device_hours:.4f} | {r.sync_s:.3f} | "
                f"{r.samples_per_s / reference.samples_per_s:.2f}x |"  # type: ignore[operator]
            )
        lines.append(line)
    by_arm: dict[str, list[RunResult]] = {}
    for r in results:
        if r.rewards is not None:
            by_arm.setdefault(r.arm, []).append(r)
    if any(len(v) > 1 for v in by_arm.values()):
        lines += ["", seed_summary(by_arm)]
    best = best_arm_of(results)
    if best is None:
        lines += ["", f"Best arm by {BEST_BY}: none yet."]
    else:
        arm, reward, seeds = best
        over = f" (mean of {seeds} seeds)" if seeds > 1 else ""
        lines += ["", f"Best arm by {BEST_BY}: **{arm}**, {reward:.3f}{over}."]
    return "\n".join(lines) + "\n"


def seed_summary(by_arm: dict[str, list[RunResult]]) -> str:
    """Markdown: per arm, the final validation reward over its seeds (diverged runs left out and counted): their mean,
    sample std, min, max and 95% band (mean +- 1.96 std / sqrt(n), seeds.spread), and the mean wall time of a run."""
    lines = [
        "| arm | seeds | mean final validation reward | std | min | max | 95% band | mean wall time (s) | diverged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, runs in by_arm.items():
        kept = [r for r in runs if r.state != "diverged"]
        diverged = len(runs) - len(kept)
        if not kept:
            lines.append(f"| {arm} | 0 | - | - | - | - | - | - | {diverged} |")
            continue
        finals = spread([r.rewards["final"] for r in kept])  # type: ignore[index]
        times = [r.rewards["time_s"] for r in kept if math.isfinite(r.rewards["time_s"])]  # type: ignore[index]
        std = "-" if finals.n < 2 else f"{finals.std:.3f}"
        band = "-" if finals.n < 2 else f"{finals.low:.3f} to {finals.high:.3f}"
        wall = f"{statistics.fmean(times):.0f}" if times else "-"
        lines.append(
            f"| {arm} | {finals.n} | {finals.mean:.3f} | {std} | {finals.min:.3f} | {finals.max:.3f} | {band} | "
            f"{wall} | {diverged} |"
        )
    return "\n".join(lines)


def swept_setting(preset: Preset) -> str | None:
    """The one numeric setting the preset's arms differ in (grpo_learning_rate's learning_rate), seeds aside; None
    when they differ in none, in more than one, or in a non-numeric one."""
    by_arm = {run.arm: run.settings for run in preset.runs}
    if len(by_arm) < 2:
        return None
    keys = {k for settings in by_arm.values() for k in settings} - {"seed"}
    differing = [k for k in sorted(keys) if len({repr(s.get(k)) for s in by_arm.values()}) > 1]
    if len(differing) != 1:
        return None
    values = [s.get(differing[0]) for s in by_arm.values()]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return differing[0] if numeric else None


def final_by_setting(preset: Preset, root: Path, setting: str) -> tuple[dict[float, list[float]], dict[float, int]]:
    """Final validation rewards by the value of `setting` (one per seed that validated and did not diverge), and the
    diverged runs by value: final_reward_vs_<setting>.png's points."""
    points: dict[float, list[float]] = {}
    failed: dict[float, int] = {}
    for run, result in zip(preset.runs, sweep_results(preset, root)):
        value = float(run.settings[setting])
        if result.state == "diverged":
            failed[value] = failed.get(value, 0) + 1
        elif result.rewards is not None:
            points.setdefault(value, []).append(result.rewards["final"])
    return points, failed


def write_sweep_record(root: Path, preset_path: Path, preset: Preset, record: dict[str, Any]) -> None:
    """root/sweep.json: the preset, how it was run (--set, --arms, --from-best) and its runs, for --from-best."""
    runs = [{"label": r.label, "arm": r.arm, "seed": r.seed, "total_steps": preset.total_steps(r)} for r in preset.runs]
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        root / SWEEP_FILE, {"preset": str(preset_path), "script": preset.script} | record | {"runs": runs}
    )


def best_arm(sweep_dir: Path) -> BestArm:
    """The best arm of the sweep in `sweep_dir` (as results.md names it) with its settings, for --from-best."""
    record_path = sweep_dir / SWEEP_FILE
    if not record_path.is_file():
        raise ValueError(
            f"--from-best {sweep_dir}: no {SWEEP_FILE} there (scripts/sweep.py writes it into a sweep's folder: "
            "run that sweep's command again, finished runs are skipped)"
        )
    record = json.loads(record_path.read_text())
    results = [
        run_result(sweep_dir / r["label"], r["label"], r["arm"], r["seed"], r["total_steps"]) for r in record["runs"]
    ]
    best = best_arm_of(results)
    if best is None:
        states = ", ".join(f"{r.label} {r.status}" for r in results)
        raise ValueError(f"--from-best {sweep_dir}: no arm has finished all its runs without diverging ({states})")
    arm, reward, seeds = best
    label = next(r.label for r in results if r.arm == arm)
    settings = read_toml(sweep_dir / "configs" / f"{label}.toml", "run settings file")
    return BestArm(sweep_dir, arm, reward, seeds, {k: v for k, v in settings.items() if k not in RUN_ONLY})


def run_styles(runs: list[ArmRun]) -> dict[str, dict[str, Any]]:
    """Line styles for comparison plots: one colour per arm, one dash pattern per seed."""
    arms = list(dict.fromkeys(run.arm for run in runs))
    seeds = list(dict.fromkeys(run.seed for run in runs))
    dashes = ["-", "--", ":", "-."]
    return {
        run.label: {"color": f"C{arms.index(run.arm) % 10}", "linestyle": dashes[seeds.index(run.seed) % len(dashes)]}
        for run in runs
    }
