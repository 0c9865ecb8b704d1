"""Every preset in configs/, read from its file: the script it runs, what it does (a sweep's `description`, else the
first sentence of the file's header comment), the model, the data and whether it is sized for a CPU or a GPU.

A plain preset's script is the one its header runs it with (`scripts/X.py --config configs/<it>.toml`), else the
script with the fewest settings that takes all of its keys; either way every key must be a setting of that script.
A sweep preset (with [arms], alignment/experiments/sweep.py) names its script; model and data are read from its base,
[shared] and arms over the script's defaults. CPU or GPU: the first of the words CPU / laptop or GPU / H100 in the
header's clauses that name no other preset, then in the description, then in its base file's header; without any,
the handouts' hub models (alignment/run/memory_plan.py PUBLISHED_SHAPES) make it a GPU preset and the packaged
SmolLM2 a CPU one. Nothing here imports Sphinx (docs/_ext/site_directives.py renders the table).
"""

import re
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from cli_reference import apps, shown

from alignment.config.settings import default_of
from alignment.experiments.sweep import PRESET_KEYS
from alignment.run.memory_plan import PUBLISHED_SHAPES

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
CPU_WORDS, GPU_WORDS = re.compile(r"\b(CPU|laptop)\b"), re.compile(r"\b(GPUs?|H100s?)\b")


@dataclass(frozen=True)
class PresetRow:
    path: str  # relative to the repository, e.g. configs/pku/grpo.toml
    script: str  # e.g. train_grpo.py
    sweep: bool  # run by scripts/sweep.py, one run per arm
    summary: str
    arms: tuple[str, ...]
    models: tuple[str, ...]
    data: tuple[str, ...]
    machine: str  # CPU, GPU, or "CPU or GPU"


def header(text: str) -> str:
    """The comment lines before the first setting, joined, without the commands they show (`uv run ...` and its
    continuation lines)."""
    lines, continued = [], False
    for line in text.splitlines():
        if not line.startswith("#"):
            if line.strip():
                break
            continue
        line = line.lstrip("#").strip()
        command = continued or re.match(r"([A-Z_]+=\S+\s+)*uv run\b", line) is not None
        continued = command and line.split("#")[0].rstrip().endswith("\\")
        if not command:
            lines.append(line)
    return " ".join(lines)


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z(`])", text, maxsplit=1)[0].strip()


def device_word(text: str, own_name: str) -> str | None:
    """CPU or GPU from the first clause of `text` that says one and names no other preset outside parentheses."""
    for clause in re.split(r"(?<=[.;])\s", re.sub(r"\([^()]*\)", "", text)):
        if any(name != own_name for name in re.findall(r"[\w-]+\.toml", clause)):
            continue
        cpu, gpu = CPU_WORDS.search(clause), GPU_WORDS.search(clause)
        if cpu or gpu:
            return "CPU" if cpu and (not gpu or cpu.start() < gpu.start()) else "GPU"
    return None


def script_settings() -> dict[str, type]:
    """scripts/<name>.py -> the settings dataclass its app is made of."""
    return {name: app.settings_class for name, app in apps().items() if getattr(app, "settings_class", None)}


def script_of(path: Path, text: str, values: dict[str, Any], settings: dict[str, type]) -> str:
    named = re.search(rf"scripts/(\w+\.py)[^\n]*?--config\s+{re.escape(str(path.relative_to(ROOT)))}", text)
    takers = sorted(
        (len(fields(cls)), name) for name, cls in settings.items() if set(values) <= {f.name for f in fields(cls)}
    )
    script = named.group(1) if named else takers[0][1] if takers else None
    if script is None or script not in settings:
        raise ValueError(f"{path.relative_to(ROOT)}: no script takes all of its settings")
    unknown = sorted(set(values) - {f.name for f in fields(settings[script])})
    if unknown:
        raise ValueError(f"{path.relative_to(ROOT)}: {', '.join(unknown)} are not settings of scripts/{script}")
    return script


def data_of(settings: dict[str, Any], given: dict[str, Any]) -> str:
    """What a run trains or evaluates on, from its settings (`given`: the ones the preset sets itself)."""
    if settings.get("env"):
        return f"env {settings['env']}" + (f", {shown(given['dataset'])}" if "dataset" in given else "")
    if settings.get("task") == "keywords":
        source = settings.get("keywords_dataset") or settings.get("keywords_file")
        return "keywords" + (f", {shown(source)}" if source else "")
    return shown(settings["dataset"]) if settings.get("dataset") else "-"


def resolved(values: dict[str, Any], cls: type) -> dict[str, Any]:
    """`values` over the script's defaults."""
    return {f.name: default_of(f) for f in fields(cls)} | values


def machine_of(path: Path, data: dict[str, Any], models: tuple[str, ...]) -> str:
    text = path.read_text()
    found = device_word(header(text), path.name) or device_word(data.get("description", ""), path.name)
    if found is None and "base" in data:
        base = (path.parent / data["base"]).resolve()
        return machine_of(base, tomllib.loads(base.read_text()), models)
    if found is not None:
        return found
    if all(m in PUBLISHED_SHAPES for m in models):
        return "GPU"
    return "CPU" if all(m == "smollm2-135m" for m in models) else "CPU or GPU"


def read_row(path: Path, settings: dict[str, type]) -> PresetRow:
    text = path.read_text()
    data = tomllib.loads(text)
    sweep = "arms" in data
    if sweep:
        unknown = sorted(set(data) - PRESET_KEYS)
        if unknown:
            raise ValueError(f"{path.relative_to(ROOT)}: unknown top-level keys {', '.join(unknown)}")
        script = data.get("script", "train_grpo") + ".py"
        base = tomllib.loads((path.parent / data["base"]).read_text()) if "base" in data else {}
        shared = base | data.get("shared", {})
        names = {f.name for f in fields(settings[script])}
        for arm, values in data["arms"].items():
            unknown = sorted(set(shared | values) - names)
            if unknown:
                raise ValueError(
                    f"{path.relative_to(ROOT)}: arm {arm}: {', '.join(unknown)} are not settings of {script}"
                )
        runs = [(resolved(shared | arm, settings[script]), shared | arm) for arm in data["arms"].values()]
        summary = data.get("description") or first_sentence(header(text))
    else:
        script = script_of(path, text, data, settings)
        runs = [(resolved(data, settings[script]), data)]
        summary = first_sentence(header(text))
    models = tuple(dict.fromkeys(shown(run["model"]) for run, _ in runs if run.get("model")))
    return PresetRow(
        path=str(path.relative_to(ROOT)),
        script=script,
        sweep=sweep,
        summary=summary,
        arms=tuple(data.get("arms", {})),
        models=models,
        data=tuple(dict.fromkeys(data_of(run, given) for run, given in runs)),
        machine=machine_of(path, data, models),
    )


def preset_rows() -> list[PresetRow]:
    """A row for every .toml file under configs/, a folder's own files before its subfolders'."""
    settings = script_settings()
    paths = sorted(CONFIGS.rglob("*.toml"), key=lambda p: (p.parent.parts, p.name))
    return [read_row(path, settings) for path in paths]
