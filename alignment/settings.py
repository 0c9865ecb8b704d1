"""Settings dataclasses, one per script: each field carries its own help, and a `Literal` type its choices.

    @dataclass
    class MyConfig:
        loss_type: Literal["no_baseline", "grpo_clip"] = setting("grpo_clip", "Policy-gradient loss.")
        stop: list[str] = setting(["</answer>"], "Stop string (repeatable).")

`alignment.cli` turns such a dataclass into a command line (flags, `--help`, choices enforced by the parser).
"""

import copy
import typing
from dataclasses import MISSING, Field, field
from typing import Any


def setting(default: Any = MISSING, help: str = "") -> Any:
    """A dataclass field with its help text; mutable defaults (lists, dicts) are copied per instance."""
    if not help:
        raise ValueError("every setting needs a help text")
    if isinstance(default, (list, dict, set)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


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
