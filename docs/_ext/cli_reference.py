"""The command-line and settings reference, read from the scripts themselves: every script in scripts/ with a typer
`app`, its arguments and options as its `--help` lists them, and its settings from the dataclass the app was made of
(`app.settings_class`, alignment/config/cli.py): help, default, choices, the key a --config file uses.

A setting is listed once, under the dataclass that declares it: a script's own class, or a class several scripts
share (TrainingSettings, OutputSettings, LoRASettings, ...), whose entries carry an anchor for each script that takes
them. Nothing here imports Sphinx: docs/_ext/site_directives.py renders it, tests/test_site_reference.py reads it.
"""

import importlib
import re
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import typer
from typer.main import get_command

from alignment.config.settings import choices_of, default_of, help_of

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


@dataclass(frozen=True)
class Entry:
    """One argument, option or setting of a command line."""

    names: tuple[str, ...]  # its flags (a switch's negative one too), or an argument's name
    signature: str  # as --help prints it: names and metavar
    help: str
    default: str | None  # as shown; None where there is none to show
    choices: tuple[str, ...] = ()
    key: str | None = None  # the setting's key in a --config file
    programs: tuple[str, ...] = ()  # the scripts that take it (each gets an anchor)
    resumable_in: tuple[str, ...] = ()  # the scripts where --resume may change it


@dataclass(frozen=True)
class Script:
    program: str  # e.g. train_grpo.py
    summary: str
    usage: str
    arguments: tuple[Entry, ...]
    options: tuple[Entry, ...]  # the options that are not settings (--config, --resume, --verbose, ...)
    settings: type | None
    owners: tuple[type, ...]  # the dataclasses declaring its settings: its own first, then its bases'


@dataclass(frozen=True)
class Group:
    """The settings one dataclass declares, as the scripts that inherit them take them."""

    owner: type
    entries: tuple[Entry, ...]
    script: str | None  # the script whose own settings these are; None for a class only inherited

    @property
    def programs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for e in self.entries for p in e.programs))


@dataclass(frozen=True)
class Reference:
    scripts: tuple[Script, ...]
    groups: tuple[Group, ...]

    def group(self, owner: type) -> Group:
        return next(g for g in self.groups if g.owner is owner)

    def flags(self, program: str) -> dict[str, str]:
        """Every flag of `program` -> the anchor of the entry documenting it."""
        script = next(s for s in self.scripts if s.program == program)
        entries = [*script.arguments, *script.options, *(e for g in self.groups for e in g.entries)]
        return {name: anchor(program, e) for e in entries if program in e.programs for name in e.names}


def anchor(program: str, entry: Entry) -> str:
    """The HTML id of `entry` for `program`: `train_grpo-loss-type` for train_grpo.py --loss-type."""
    return f"{program.removesuffix('.py')}-{entry.names[0].lstrip('-').lower()}"


def shown(value: Any) -> str | None:
    """A default as a --config file writes it (None: unset, shown as nothing); a path inside the repository relative
    to it, as a clone's user runs the scripts (a default such as data/keywords.txt is absolute in the code)."""
    if value is None:
        return None
    if isinstance(value, (str, Path)) and Path(value).is_absolute() and Path(value).is_relative_to(ROOT):
        return str(Path(value).relative_to(ROOT))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]"
    return str(value)


def owner_of(config_cls: type, name: str) -> type:
    """The class of `config_cls`'s MRO that declares field `name` last (a subclass's `override` included)."""
    return next(c for c in config_cls.__mro__ if name in vars(c).get("__annotations__", {}))


def apps() -> dict[str, typer.Typer]:
    """scripts/<name>.py -> its typer app, for every script that has one."""
    found = {}
    for path in sorted(SCRIPTS.glob("*.py")):
        app = getattr(importlib.import_module(f"scripts.{path.stem}"), "app", None)
        if isinstance(app, typer.Typer):
            found[path.name] = app
    return found


def click_entry(param: Any, ctx: typer.Context, program: str) -> Entry:
    """An option or argument that is no setting, as click documents it."""
    if param.opts[0].startswith("-"):
        names, signature = (*param.opts, *param.secondary_opts), param.get_help_record(ctx)[0]
    else:
        names, signature = (param.name.upper(),), param.name.upper()
    default = param.default
    shows_default = isinstance(default, (str, int, float, Path)) and not isinstance(default, bool)
    return Entry(
        names=names,
        signature=signature,
        help=(getattr(param, "help", None) or "").strip(),
        default=shown(default) if shows_default else None,
        programs=(program,),
    )


def read_reference() -> Reference:
    """Every script's entries, and every settings class's, each setting under the class that declares it."""
    scripts, declared = [], {}  # declared: (owner, field name) -> [(program, its click param, its context)]
    for program, app in apps().items():
        command = get_command(app)
        ctx = typer.Context(command, info_name=f"uv run scripts/{program}")
        settings = getattr(app, "settings_class", None)
        names = {f.name for f in fields(settings)} if settings is not None else set()
        arguments, options = [], []
        for param in command.params:
            if param.name in names:
                declared.setdefault((owner_of(settings, param.name), param.name), []).append((program, param, ctx))
            elif param.opts[0].startswith("-"):
                options.append(click_entry(param, ctx, program))
            else:
                arguments.append(click_entry(param, ctx, program))
        declaring = {owner_of(settings, name) for name in names}
        owners = tuple(c for c in settings.__mro__ if c in declaring) if settings is not None else ()
        scripts.append(
            Script(
                program=program,
                summary=first_sentence(
                    importlib.import_module(f"scripts.{program[:-3]}").__doc__ or command.help or ""
                ),
                usage=" ".join(["uv run", f"scripts/{program}", *command.collect_usage_pieces(ctx)]),
                arguments=tuple(arguments),
                options=tuple(options),
                settings=settings,
                owners=owners,
            )
        )
    own = {s.settings: s.program for s in scripts if s.settings is not None}
    settings_of = {s.program: s.settings for s in scripts}
    groups = []
    for owner in dict.fromkeys(o for o, _ in declared):
        hints = typing.get_type_hints(owner)
        entries = []
        for f in fields(owner):
            if (owner, f.name) not in declared:
                continue  # every script taking this class gives the setting its own default
            takers = declared[(owner, f.name)]
            _, param, ctx = takers[0]
            programs = tuple(p for p, _, _ in takers)
            entries.append(
                Entry(
                    names=(*param.opts, *param.secondary_opts),
                    signature=param.get_help_record(ctx)[0],
                    help=help_of(f),
                    default=shown(default_of(f)),
                    choices=tuple(map(str, choices_of(hints[f.name]) or ())),
                    key=f.name,
                    programs=programs,
                    resumable_in=tuple(p for p in programs if f.name in getattr(settings_of[p], "RESUMABLE", ())),
                )
            )
        groups.append(Group(owner, tuple(entries), own.get(owner)))
    return Reference(tuple(scripts), tuple(groups))


def first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s", " ".join(text.split("\n\n")[0].split()), maxsplit=1)[0]


def summary_of(owner: type) -> str:
    """The first sentence of the class's docstring, else of its module's (a dataclass without one gets a signature
    as its __doc__)."""
    doc = owner.__doc__ or ""
    if not doc or doc.startswith(f"{owner.__name__}("):
        doc = importlib.import_module(owner.__module__).__doc__ or ""
    return re.split(r"(?<=[.:])\s", " ".join(doc.split()), maxsplit=1)[0].rstrip(":.") + "."


# Markup of help texts: `code`, a flag, a docs page, a repository path, an environment variable
SPAN = re.compile(
    r"`(?P<code>[^`]+)`"
    r"|(?<![\w-])(?P<flag>--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)"
    r"|\b(?P<doc>docs/[\w/.-]+?\.md)\b"
    r"|(?<![\w/])(?P<path>(?:alignment|scripts|configs|bench|tests|data|prompts|outputs)/[\w/.<>*-]*[\w/>])"
    r"|(?P<env>\$[A-Z][A-Z0-9_]+)"
)


def spans(text: str) -> list[tuple[str, str]]:
    """`text` as (kind, text) pieces: text, code, flag, doc (a docs/ page, without .md) or path."""
    out, at = [], 0
    for match in SPAN.finditer(text):
        if match.start() > at:
            out.append(("text", text[at : match.start()]))
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "doc":
            out.append(("doc", value.removeprefix("docs/").removesuffix(".md")))
        elif kind in ("path", "env"):
            out.append(("code", value))
        else:
            out.append((kind, value))
        at = match.end()
    if at < len(text):
        out.append(("text", text[at:]))
    return out
