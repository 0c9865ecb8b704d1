"""Experiment presets: a TOML file naming a script, shared settings and arms, expanded into one run per arm
and seed, each in its own folder; which runs are finished, which to resume; the table of final rewards.

    script = "train_grpo"            # scripts/<script>.py; it takes --config FILE and --resume DIR
    base = "../grpo_handout_starter.toml"  # optional: a settings file under [shared], relative to the preset
    seeds = [0, 1]                   # optional: every arm once per seed (run folders <arm>_seed<k>)
    [shared]                         # the script's settings, common to every arm (over the base's)
    n_grpo_steps = 200
    [arms.no_baseline]               # one table per arm: settings that differ from [shared]
    loss_type = "no_baseline"
"""

import json
import math
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from alignment.config.settings import upgraded
from alignment.experiments.run_table import final_rewards, read_metrics_jsonl
from alignment.grpo.config import GRPOConfig, validate
from alignment.rollout.backends import vllm_build
from alignment.run.checkpoint import complete_step
from alignment.supervised.config import EIConfig, SFTConfig
from alignment.supervised.config import validate as validate_sft
from alignment.utils.atomic import atomic_write_text

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "scripts"
# The setting that holds a script's total step count, to tell a finished run from an interrupted one; a script
# without one (train_sft: its steps follow from data size, batch and epochs) has finished once it wrote policy/.
STEPS_SETTING = {"train_grpo": "n_grpo_steps", "expert_iteration": "n_ei_steps"}
# Each script's settings and checks, applied to every arm before any arm starts.
CONFIGS: dict[str, tuple[type, Callable[[Any], None]]] = {
    "train_grpo": (GRPOConfig, validate),
    "train_sft": (SFTConfig, validate_sft),
    "expert_iteration": (EIConfig, validate_sft),
}
PRESET_KEYS = {"description", "script", "base", "seeds", "steps_setting", "shared", "arms"}

RunState = Literal["new", "restart", "resume", "finished"]


@dataclass(frozen=True)
class ArmRun:
    """One run of a preset: an arm at one seed, with every setting the script gets."""

    label: str  # the run folder's name: the arm, or <arm>_seed<k>
    arm: str
    seed: int | None
    settings: dict[str, Any]


@dataclass(frozen=True)
class Preset:
    name: str
    script: str
    steps_setting: str | None
    runs: list[ArmRun]

    def total_steps(self, run: ArmRun) -> int | None:
        return None if self.steps_setting is None else int(run.settings[self.steps_setting])


def _fail(path: Path, message: str) -> None:
    raise ValueError(f"{path}: {message}")


def read_toml(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"no such {what}: {path}")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: not valid TOML ({err})") from None


def load_preset(path: Path) -> Preset:
    """Read and check a preset; errors name the file, the arm and the setting."""
    data = read_toml(path, "preset file")
    unknown = sorted(set(data) - PRESET_KEYS)
    if unknown:
        _fail(path, f"unknown top-level keys {', '.join(unknown)} (expected {', '.join(sorted(PRESET_KEYS))})")
    script = data.get("script", "train_grpo")
    if not (SCRIPTS_DIR / f"{script}.py").is_file():
        _fail(path, f"script = {script!r}: no scripts/{script}.py")
    steps_setting = data.get("steps_setting", STEPS_SETTING.get(script))
    base: dict[str, Any] = {}
    if "base" in data:
        try:
            base = read_toml(path.parent / data["base"], "base settings file")
        except ValueError as err:
            _fail(path, f"base = {data['base']!r}: {err}")
    shared, arms = base | data.get("shared", {}), data.get("arms", {})
    if not arms or not all(isinstance(a, dict) for a in arms.values()):
        _fail(path, "needs at least one [arms.<name>] table")
    seeds = data.get("seeds")
    if seeds is not None and (not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds)):
        _fail(path, f"seeds must be a non-empty list of integers, got {seeds!r}")
    runs = []
    for arm, overrides in arms.items():
        for seed in seeds or [None]:
            settings = shared | overrides | ({"seed": seed} if seed is not None else {})
            label = arm if seed is None else f"{arm}_seed{seed}"
            if steps_setting is not None and steps_setting not in settings:
                _fail(path, f"arm {arm!r}: {steps_setting} is not set (in [shared] or the arm)")
            if script in CONFIGS:
                _check_settings(path, arm, settings, *CONFIGS[script])
            runs.append(ArmRun(label, arm, seed, settings))
    return Preset(path.stem, script, steps_setting, runs)


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


def gpus_needed(settings: dict[str, Any]) -> int:
    """GPUs a run takes: a policy GPU and a rollout GPU when vLLM generates (the handouts' split), else one.

    Every script here samples with vLLM under `auto` where its CUDA build is installed, as on a GPU cluster.
    """
    backend = settings.get("backend", "auto")
    return 2 if backend == "vllm" or (backend == "auto" and vllm_build() == "cuda") else 1


def run_state(run_dir: Path, total_steps: int | None) -> RunState:
    """new: nothing there; finished: a complete checkpoint at the last step (or, where the total is not a
    setting, the exported policy/); resume: an earlier complete checkpoint; restart: files but no complete
    checkpoint (stopped before its first one)."""
    step = complete_step(run_dir)
    if step is not None:
        done = (run_dir / "policy").is_dir() if total_steps is None else step >= total_steps
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
    return sorted(k for k in before.keys() | now.keys() if k != "overwrite" and before.get(k) != now.get(k))


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


def results_table(preset: Preset, root: Path) -> str:
    """Markdown: one row per run; with several seeds, one more row per arm with their mean and range."""
    lines = [
        "| run | arm | seed | step | final validation reward | best | wall time (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    by_arm: dict[str, list[float]] = {}
    for run in preset.runs:
        result = final_rewards(read_metrics(root / run.label))
        if result is None:
            lines.append(
                f"| {run.label} | {run.arm} | {run.seed if run.seed is not None else ''} | - | not run | - | - |"
            )
            continue
        by_arm.setdefault(run.arm, []).append(result["final"])
        lines.append(
            f"| {run.label} | {run.arm} | {run.seed if run.seed is not None else ''} | {result['step']} | "
            f"{result['final']:.3f} | {result['best']:.3f} | {result['time_s']:.0f} |"
        )
    if any(len(v) > 1 for v in by_arm.values()):
        lines += ["", "| arm | seeds | mean final validation reward | min | max |", "|---|---|---|---|---|"]
        for arm, finals in by_arm.items():
            lines.append(
                f"| {arm} | {len(finals)} | {sum(finals) / len(finals):.3f} | {min(finals):.3f} | {max(finals):.3f} |"
            )
    return "\n".join(lines) + "\n"


def run_styles(runs: list[ArmRun]) -> dict[str, dict[str, Any]]:
    """Line styles for comparison plots: one colour per arm, one dash pattern per seed."""
    arms = list(dict.fromkeys(run.arm for run in runs))
    seeds = list(dict.fromkeys(run.seed for run in runs))
    dashes = ["-", "--", ":", "-."]
    return {
        run.label: {"color": f"C{arms.index(run.arm) % 10}", "linestyle": dashes[seeds.index(run.seed) % len(dashes)]}
        for run in runs
    }
