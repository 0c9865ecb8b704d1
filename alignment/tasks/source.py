"""How `--task` and `--env` name what they load, parsed in one place.

A source is one of:

    NAME                      a built-in task or environment (`math`, `keywords`, `calculator`, ...)
    path/to/file.py:NAME      attribute NAME of a Python file (loaded by path: no package, no edit of alignment/)
    pkg.module:NAME           attribute NAME of an importable module
    reasoning_gym:A[,B=2,..]  reasoning-gym's procedural tasks, a weighted mix with `NAME=WEIGHT`
    textarena:GAME-ID         a TextArena game (--env)
    openenv:URL               a running OpenEnv environment server (--env)
    verifiers:MODULE          a verifiers environment module with `load_environment` (--env)

A file's path is made absolute when parsed, so the same source loads in every process of a run (grading workers,
Ray actors) whatever their working folder; that is how user code travels: by name, never pickled by value.
"""

import hashlib
import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SourceKind = Literal["builtin", "file", "module", "reasoning_gym", "textarena", "openenv", "verifiers"]
LIBRARIES: tuple[SourceKind, ...] = ("reasoning_gym", "textarena", "openenv", "verifiers")


@dataclass(frozen=True)
class Source:
    kind: SourceKind
    target: str  # the built-in name, the file's absolute path, the module, or what follows a library's prefix
    attribute: str | None = None  # NAME of a file or module source
    text: str = ""  # as the user wrote it, for messages

    def __str__(self) -> str:
        return self.text


def parse_source(text: str, flag: str = "--task") -> Source:
    """`text` as a Source; a ValueError naming `flag` when it is empty or malformed (nothing is loaded here)."""
    text = text.strip()
    if not text:
        raise ValueError(f"{flag} is empty")
    prefix, colon, rest = text.partition(":")
    if colon and prefix in LIBRARIES:
        if not rest:
            raise ValueError(f"{flag} {text!r}: say what to load after {prefix}:")
        return Source(prefix, rest, None, text)  # type: ignore[arg-type]
    if not colon:
        if "/" in text or text.endswith(".py"):
            raise ValueError(f"{flag} {text!r}: name the object to load after the file, e.g. {text}:task")
        return Source("builtin", text, None, text)
    where, _, attribute = text.rpartition(":")
    if not attribute.isidentifier():
        raise ValueError(f"{flag} {text!r}: {attribute!r} after the last ':' is not a Python name")
    if where.endswith(".py") or "/" in where:
        return Source("file", str(Path(where).expanduser().absolute()), attribute, text)
    if not all(part.isidentifier() for part in where.split(".")):
        raise ValueError(f"{flag} {text!r}: {where!r} is neither a .py file nor an importable module name")
    return Source("module", where, attribute, text)


def resolve_source(text: str, flag: str, builtins: dict[str, str], kind: str, own: str) -> Source:
    """The source `flag text` names, a built-in name (in `builtins`, name -> "module:attribute") replaced by the
    attribute that defines it; an unknown name is one line listing the built-ins and `own`, how to name one's own."""
    source = parse_source(text, flag)
    if source.kind != "builtin":
        return source
    if text not in builtins:
        raise ValueError(f"{flag} {text!r} is not a built-in {kind} ({', '.join(sorted(builtins))}); {own}")
    module, attribute = builtins[text].split(":")
    return Source("module", module, attribute, text)


def _file_module(path: str, flag: str) -> Any:
    """The module of the Python file at `path`, loaded once per process under a name derived from its path."""
    name = "alignment_user_" + hashlib.sha1(path.encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    if not Path(path).is_file():
        raise FileNotFoundError(f"{flag}: no file {path}")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"{flag}: {path} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look their module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load_attribute(source: Source, flag: str = "--task") -> Any:
    """The object a file or module source names; errors name `flag`, the source and what is missing."""
    if source.kind == "file":
        module = _file_module(source.target, flag)
    elif source.kind == "module":
        try:
            module = importlib.import_module(source.target)
        except ModuleNotFoundError as error:
            raise ValueError(f"{flag} {source}: cannot import {source.target!r} ({error})") from None
    else:
        raise ValueError(f"{flag} {source}: a {source.kind} source has no attribute to load")
    try:
        return getattr(module, source.attribute or "")
    except AttributeError:
        defined = sorted(n for n in vars(module) if not n.startswith("_"))
        raise ValueError(
            f"{flag} {source}: {source.target} defines no {source.attribute!r} (it defines: {', '.join(defined)})"
        ) from None
