"""Settings dataclasses, one per script: each field carries its own help, and a `Literal` type its choices.

    @dataclass
    class MyConfig:
        loss_type: Literal["no_baseline", "grpo_clip"] = setting("grpo_clip", "Policy-gradient loss.")
        stop: list[str] = setting(["</answer>"], "Stop string (repeatable).")

`alignment.config.cli` turns such a dataclass into a command line (flags, `--help`, choices enforced by the parser).
A run folder keeps the settings it was started with in settings.json, so `--resume DIR` alone continues it.
"""

import copy
import json
import typing
from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from alignment.utils.atomic import atomic_write_json

SETTINGS_FILE = "settings.json"

# choices shared by several scripts' settings
WandbMode = Literal["online", "offline", "disabled"]


def setting(default: Any = MISSING, help: str = "") -> Any:
    """A dataclass field with its help text; mutable defaults (lists, dicts) are copied per instance."""
    if not help:
        raise ValueError("every setting needs a help text")
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


def override(base: type, name: str, default: Any) -> Any:
    """Setting `name` of the dataclass `base` with another default and the same help: a subclass's own default
    for a shared field (e.g. its output folder)."""
    return setting(default, help_of(next(f for f in fields(base) if f.name == name)))


def help_of(f: Field) -> str:
    return f.metadata.get("help", "")


def default_of(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default  # type: ignore[misc]


def choices_of(annotation: Any) -> tuple[str, ...] | None:
    """The allowed values of a `Literal[...]` (or `Literal[...] | None`) annotation, else None."""
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(typing.get_args(annotation))
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Literal:
            return tuple(typing.get_args(arg))
    return None


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_choices(config: Any) -> None:
    """Each `Literal` setting holds one of its values (None where the type allows it); else a ValueError naming the
    flag."""
    for f in fields(config):
        choices, value = choices_of(f.type), getattr(config, f.name)
        if (
            choices is not None
            and value not in choices
            and not (value is None and type(None) in typing.get_args(f.type))
        ):
            raise ValueError(f"{flag(f.name)} {value!r} is not one of {', '.join(map(str, choices))}")


def to_json(config: Any) -> dict[str, Any]:
    """A settings dataclass as JSON values (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()}


def moved_path(value: str, moves: dict[str, str]) -> str:
    """`value` with a moved file's new place: a path that is not there and ends in an old repo path (relative, or
    inside a checkout) gets that ending replaced by the new one; any other path is returned as it is."""
    path = Path(value)
    if path.exists():
        return value
    for old, new in moves.items():
        tail = Path(old).parts
        if path.parts[-len(tail) :] == tail:
            return str(Path(*path.parts[: -len(tail)], new))
    return value


def upgraded(config_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """Settings written by an earlier version under their current names: `config_cls.LEGACY` maps an old key to
    (new key, {old value: new value}); an old value without a new one, or a clash with the new key, is an error.
    A path setting naming a shipped file that has moved since reads as its new place (`config_cls.MOVED`)."""
    out = dict(values)
    for name, moves in getattr(config_cls, "MOVED", {}).items():
        if out.get(name) is not None:
            out[name] = moved_path(str(out[name]), moves)
    for old, (new, mapping) in getattr(config_cls, "LEGACY", {}).items():
        if old not in out:
            continue
        value = out.pop(old)
        if value not in mapping:
            raise ValueError(f"{old} {value!r} is not one of {', '.join(map(str, mapping))} (now {new})")
        if new in out and out[new] != mapping[value]:
            raise ValueError(f"{old} {value!r} (now {new} {mapping[value]!r}) contradicts {new} {out[new]!r}")
        out[new] = mapping[value]
    return out


def as_saved(config_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """A run's saved settings with each setting added since at the value runs saved without it had
    (`config_cls.ADDED`: key -> value), where a settings file's absent key means today's default."""
    return getattr(config_cls, "ADDED", {}) | values


def with_defaults(config_cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every field it lacks at its default: how a run saved before a setting existed reads it."""
    return {f.name: default_of(f) for f in fields(config_cls) if f.name not in values} | values


def typed_values(config_cls: type, values: dict[str, Any], source: Path) -> dict[str, Any]:
    """Values read from a file (earlier versions' names upgraded), unknown keys refused, path settings turned
    back into paths."""
    hints = typing.get_type_hints(config_cls)
    try:
        values = upgraded(config_cls, values)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    unknown = sorted(set(values) - set(hints))
    if unknown:
        raise ValueError(f"{source}: unknown settings {', '.join(unknown)}")
    return {
        k: Path(v) if v is not None and Path in (hints[k], *typing.get_args(hints[k])) else v for k, v in values.items()
    }


def write_run_settings(config: Any) -> None:
    """Keep the settings a run uses in its folder (created if needed), so `--resume DIR` alone can continue it."""
    config.output_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(config.output_dir / SETTINGS_FILE, to_json(config))


def read_run_settings(folder: Path, config_cls: type) -> dict[str, Any]:
    """The settings a run in `folder` was started with; a missing or unreadable file is an error naming it."""
    path = folder / SETTINGS_FILE
    if not path.is_file():
        raise ValueError(f"{folder} is not a run folder: it has no {SETTINGS_FILE}")
    try:
        return typed_values(config_cls, as_saved(config_cls, json.loads(path.read_text())), path)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


@dataclass
class OutputSettings:
    """What every script that writes a folder shares; a script's dataclass inherits them and may give its own
    default with `override`."""

    output_dir: Path = setting(Path("outputs"), "Folder for everything the run writes.")
    overwrite: bool = setting(False, "Let a fresh run replace an earlier run's files in --output-dir.")
    seed: int = setting(0, "Seed for data order, sampling and initialization.")

    def __post_init__(self) -> None:
        self.output_dir = Path(self.output_dir)  # config files and dict settings give it as a string

    def to_json(self) -> dict[str, Any]:
        return to_json(self)
