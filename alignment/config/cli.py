"""Command lines made from settings dataclasses: one flag per field, help laid out for 80 columns, choices
enforced by the parser; --config files, and --resume DIR for training runs."""

import inspect
import json
import tomllib
import typing
from collections.abc import Callable, Sequence
from dataclasses import Field, fields
from pathlib import Path
from typing import Any

import typer
import yaml

from alignment.config.settings import (
    SETTINGS_FILE,
    choices_of,
    default_of,
    flag,
    help_of,
    read_run_settings,
    typed_values,
)
from alignment.utils.console import configure_console
from alignment.utils.hub import SourceUnavailable

WIDTH = 80  # help is laid out for an 80-column terminal
HELP_COLUMN = 30  # where click starts the help text of an option


def bad_flag(name: str, message: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint=f"'{name}'")


def _wrap(words: list[str], width: int) -> list[str]:
    """Comma-separated words packed into lines of at most `width` characters, never breaking a word."""
    lines = [""]
    for i, word in enumerate(words):
        piece = word + ("," if i < len(words) - 1 else "")
        if lines[-1] and len(lines[-1]) + 1 + len(piece) > width:
            lines.append("")
        lines[-1] = f"{lines[-1]} {piece}".strip()
    return lines


def _option(f: Field) -> typer.models.OptionInfo:
    """A typer option for one setting: its help, its default, and its choices listed whole at 80 columns."""
    choices = choices_of(f.type)
    default = default_of(f)
    if choices is None:
        return typer.Option(default, help=help_of(f))
    metavar = "[" + "|".join(map(str, choices)) + "]"
    if len(f"  {flag(f.name)} {metavar}") <= WIDTH:
        return typer.Option(default, help=help_of(f), metavar=metavar)
    # too long for one line: list the choices in the help column, wrapped between words; \b keeps click's layout
    listed = _wrap([f"Choices: {choices[0]}", *map(str, choices[1:])], WIDTH - HELP_COLUMN - 4)
    text = "\n".join([*listed, f"Default: {default}"])
    return typer.Option(default, help=f"{help_of(f)}\n\n\b\n{text}", metavar="CHOICE", show_default=False)


def option_parameters(config_cls: type) -> list[inspect.Parameter]:
    """One documented option per field of a settings dataclass (see alignment.config.settings)."""
    hints = typing.get_type_hints(config_cls)
    return [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name], default=_option(f))
        for f in fields(config_cls)
    ]


VERBOSE = inspect.Parameter(
    "verbose",
    inspect.Parameter.KEYWORD_ONLY,
    annotation=bool,
    default=typer.Option(
        False, "--verbose", help="Show the INFO and WARNING lines and the bars of vLLM, transformers, Ray and torch."
    ),
)


def typer_app(
    main: Callable[..., Any], parameters: list[inspect.Parameter], summary: str, settings: type | None = None
) -> typer.Typer:
    """A one-command app with these parameters and --verbose, laid out by click itself (it wraps help; rich would cut
    it). The console is set up (alignment/utils/console.py) before `main` runs. `settings`, the dataclass whose fields
    are among the parameters, is kept as the app's `settings_class`: the documentation's settings reference reads it.

    A model or dataset the hub cannot give (alignment/utils/hub.py) ends the command with its one line on stderr and
    exit status 2, as a bad flag does, with no traceback."""

    def command(verbose: bool = False, **arguments: Any) -> Any:
        configure_console(verbose)
        try:
            return main(**arguments)
        except SourceUnavailable as err:
            typer.echo(f"Error: {err}", err=True)
            raise typer.Exit(2) from None

    command.__signature__ = inspect.Signature([*parameters, VERBOSE])  # type: ignore[attr-defined]
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    app.command(help=summary, context_settings={"max_content_width": WIDTH})(command)
    app.settings_class = settings  # type: ignore[attr-defined]
    return app


def script_help(doc: str | None, path: str) -> str:
    """A script's --help text from its module docstring: its first line and its prose (click wraps both at 80
    columns); its indented example commands, wider than that, stay in the file, which the text names."""
    first, *paragraphs = (doc or "").strip().split("\n\n")
    prose = [p for p in paragraphs if not p.startswith(" ")]
    return "\n\n".join([first, *prose, f"Examples: the docstring atop {path}."])


CONTEXT = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
CONFIG_FILE = inspect.Parameter(
    "config",
    inspect.Parameter.KEYWORD_ONLY,
    annotation=Path | None,
    default=typer.Option(None, help="TOML, YAML or JSON file of settings; flags override it."),
)


def config_command(config_cls: type, run: Callable[[Any], Any], summary: str) -> typer.Typer:
    """A typer app whose flags are the fields of `config_cls`, with --config FILE (flags override it), and which
    calls run(config_cls(**settings))."""

    def main(ctx: typer.Context, config: Path | None = None, **flags: Any) -> None:
        run(config_cls(**run_settings(ctx, config_cls, config, None, flags)))

    return typer_app(main, [CONTEXT, CONFIG_FILE, *option_parameters(config_cls)], summary, config_cls)


def read_config_file(path: Path, config_cls: type) -> dict[str, Any]:
    """Settings from a TOML, YAML or JSON file; a key that is not a field of `config_cls` is an error naming it."""
    if not path.is_file():
        raise bad_flag("--config", f"no such file: {path}")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            values = tomllib.loads(text)
        elif path.suffix == ".json":
            values = json.loads(text)
        else:
            values = yaml.safe_load(text) or {}
        return typed_values(config_cls, values, path)
    except (ValueError, yaml.YAMLError) as err:  # tomllib and json errors are ValueErrors
        raise bad_flag("--config", str(err)) from None


def resumed_settings(
    folder: Path, config_cls: type, changes: dict[str, Any], resumable: frozenset[str]
) -> dict[str, Any]:
    """The settings a run in `folder` was started with, updated by `changes` where that is safe mid-run."""
    try:
        saved = read_run_settings(folder, config_cls)
    except ValueError as err:
        raise bad_flag("--resume", str(err)) from None
    changed = {k: v for k, v in changes.items() if v != saved.get(k)}
    refused = sorted(set(changed) - resumable)
    if refused:
        details = "; ".join(f"{flag(k)} was {saved.get(k)!r}, now {changed[k]!r}" for k in refused)
        allowed = ", ".join(flag(k) for k in sorted(resumable - {"output_dir"}))
        raise bad_flag("--resume", f"a resumed run keeps its settings ({details}); only {allowed} may change")
    return saved | changed | {"output_dir": folder}


def run_settings(
    ctx: typer.Context, config_cls: type, config: Path | None, resume: Path | None, flags: dict[str, Any]
) -> dict[str, Any]:
    """Defaults, overridden by the --config file, overridden by flags given on the command line; with --resume,
    the run folder's own settings, of which only the resumable ones may be changed (by file or flag)."""
    given = {
        name: value
        for name, value in flags.items()  # typer may vendor click: compare the enum by name
        if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
    }
    changes = (read_config_file(config, config_cls) if config else {}) | given
    if resume is not None:
        return resumed_settings(resume, config_cls, changes, config_cls.RESUMABLE)
    return flags | changes


def run_command(
    config_cls: type, run: Callable[..., Any], summary: str, options: Sequence[inspect.Parameter] = ()
) -> typer.Typer:
    """A training script: --config FILE, --resume DIR and one flag per field; calls run(config, resuming).

    `options` are flags that are not settings of the run (such as --plan-memory): run gets them as keywords.
    """

    def main(ctx: typer.Context, config: Path | None = None, resume: Path | None = None, **flags: Any) -> None:
        extra = {option.name: flags.pop(option.name) for option in options}
        run(config_cls(**run_settings(ctx, config_cls, config, resume, flags)), resume is not None, **extra)

    parameters = [
        CONTEXT,
        CONFIG_FILE,
        inspect.Parameter(
            "resume",
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Path | None,
            default=typer.Option(
                None,
                help=f"Continue the run in this folder with its own settings ({SETTINGS_FILE}); only settings safe to "
                "change mid-run may be given with it.",
            ),
        ),
    ]
    return typer_app(main, parameters + list(options) + option_parameters(config_cls), summary, config_cls)
