"""What the scripts share: command lines made from settings dataclasses (one flag per field, help laid out for
80 columns, choices enforced by the parser), --config files and --resume DIR for training runs, checks that run
before anything heavy loads, and the output folder."""

import inspect
import json
import tomllib
import typing
from collections.abc import Callable, Sequence
from dataclasses import Field, dataclass, fields
from pathlib import Path
from typing import Any

import typer
import yaml

from alignment.data import MathExample, load_math_examples, spread_subset
from alignment.grader import REWARD_FNS, RewardFn
from alignment.grpo_config import Prompt
from alignment.prompts import load_prompt
from alignment.rollout import Backend, RolloutEngine, SamplingConfig
from alignment.rollout_backends import make_rollout_engine, resolve_backend
from alignment.settings import SETTINGS_FILE, choices_of, default_of, flag, help_of, read_run_settings, setting, typed_values

RESULT_FILES = ("generations.jsonl", "summary.json")
WIDTH = 80  # help is laid out for an 80-column terminal
HELP_COLUMN = 30  # where click starts the help text of an option


@dataclass
class GenerationConfig:
    """Settings of scripts/eval_zero_shot.py (and the base of scripts/best_of_n.py's); each is a flag."""

    dataset: str = setting("gsm8k", "`math` (MATH's 5,000 test problems), `math500`, `gsm8k` (its test split), ..., a .jsonl file, a local dataset folder or a hub id; its test or validation split.")
    prompt: Prompt = setting("r1_zero", "Prompt template (each with its reward function).")
    model: str = setting("Qwen/Qwen2.5-Math-1.5B", "A local HF folder (a run's policy/ folder too), a hub id, or `smollm2-135m` (packaged, offline).")
    limit: int | None = setting(None, "Use only N examples, spread over the dataset by a fixed seed (MATH's splits are ordered by subject).")
    temperature: float = setting(1.0, "Sampling temperature (0 = greedy).")
    top_p: float = setting(1.0, "Nucleus sampling mass.")
    max_tokens: int = setting(1024, "Maximum new tokens per response.")
    min_tokens: int = setting(0, "EOS and stop strings are ignored before this many new tokens.")
    stop: list[str] = setting(["</answer>"], "Stop string (repeatable); it is kept in the output.")
    seed: int = setting(0, "Sampling seed.")
    output_dir: Path = setting(Path("outputs/eval"), "Where the result files go.")
    backend: Backend = setting("auto", "Generation backend; auto: vllm where its installed build runs on the device, else hf; transformer_lm: our own model and sampler.")
    device: str | None = setting(None, "Device for generation, e.g. cuda:0 or cpu (default: cuda:0 if present).")
    gpu_memory_utilization: float = setting(0.85, "vLLM: fraction of GPU memory to use.")
    grader_workers: int | None = setting(None, "Grading processes (default: CPU count, at most 8).")
    overwrite: bool = setting(False, "Replace results already in --output-dir.")


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
    """One documented option per field of a settings dataclass (see alignment.settings)."""
    hints = typing.get_type_hints(config_cls)
    return [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name], default=_option(f))
        for f in fields(config_cls)
    ]


def typer_app(main: Callable[..., Any], parameters: list[inspect.Parameter], summary: str) -> typer.Typer:
    """A one-command app with these parameters, laid out by click itself (it wraps help; rich would cut it)."""
    main.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    app.command(help=summary, context_settings={"max_content_width": WIDTH})(main)
    return app


def config_command(config_cls: type, run: Callable[[Any], Any], summary: str) -> typer.Typer:
    """A typer app whose flags are the fields of `config_cls` and which calls run(config_cls(**flags))."""

    def main(**flags: Any) -> None:
        run(config_cls(**flags))

    return typer_app(main, option_parameters(config_cls), summary)


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


def resumed_settings(folder: Path, config_cls: type, changes: dict[str, Any], resumable: frozenset[str]) -> dict[str, Any]:
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


def run_settings(ctx: typer.Context, config_cls: type, config: Path | None, resume: Path | None,
                 flags: dict[str, Any]) -> dict[str, Any]:
    """Defaults, overridden by the --config file, overridden by flags given on the command line; with --resume,
    the run folder's own settings, of which only the resumable ones may be changed (by file or flag)."""
    given = {name: value for name, value in flags.items()  # typer may vendor click: compare the enum by name
             if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"}
    changes = (read_config_file(config, config_cls) if config else {}) | given
    if resume is not None:
        return resumed_settings(resume, config_cls, changes, config_cls.RESUMABLE)
    return flags | changes


def run_command(config_cls: type, run: Callable[..., Any], summary: str,
                options: Sequence[inspect.Parameter] = ()) -> typer.Typer:
    """A training script: --config FILE, --resume DIR and one flag per field; calls run(config, resuming).

    `options` are flags that are not settings of the run (such as --plan-memory): run gets them as keywords.
    """

    def main(ctx: typer.Context, config: Path | None = None, resume: Path | None = None, **flags: Any) -> None:
        extra = {option.name: flags.pop(option.name) for option in options}
        run(config_cls(**run_settings(ctx, config_cls, config, resume, flags)), resume is not None, **extra)

    parameters = [
        inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context),
        inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                          default=typer.Option(None, help="TOML, YAML or JSON file of settings; flags override it.")),
        inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                          default=typer.Option(None, help=f"Continue the run in this folder with its own settings ({SETTINGS_FILE}); only settings safe to change mid-run may be given with it.")),
    ]
    return typer_app(main, parameters + list(options) + option_parameters(config_cls), summary)


@dataclass
class RunSetup:
    examples: list[MathExample]
    template: str
    reward_fn: RewardFn
    sampling: SamplingConfig
    backend: str
    output_dir: Path
    engine: RolloutEngine


def load_task(dataset: str, prompt: str, limit: int | None) -> tuple[list[MathExample], str, RewardFn]:
    """Examples, prompt template and the prompt's reward function; bad values raise naming the flag."""
    if limit is not None and limit < 1:
        raise bad_flag("--limit", f"must be >= 1, got {limit}")
    try:
        examples = spread_subset(load_math_examples(dataset), limit)  # N spread over the source, not its first N
    except (FileNotFoundError, ValueError) as err:
        raise bad_flag("--dataset", str(err)) from None
    return examples, load_prompt(prompt), REWARD_FNS[prompt]


def prepare_output_dir(output_dir: Path, overwrite: bool) -> Path:
    """Create the folder; refuse to replace earlier results unless --overwrite."""
    existing = [name for name in RESULT_FILES if (output_dir / name).exists()]
    if existing and not overwrite:
        raise bad_flag("--output-dir", f"{output_dir} already holds {', '.join(existing)}; pass --overwrite to replace them")
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def set_up(config: GenerationConfig) -> RunSetup:
    """Check every flag, then create the output folder, then load the model: cheap failures come first."""
    examples, template, reward_fn = load_task(config.dataset, config.prompt, config.limit)
    try:
        sampling = SamplingConfig(
            temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens,
            min_tokens=config.min_tokens, stop=tuple(config.stop), seed=config.seed,
        )
        backend = resolve_backend(config.backend)  # type: ignore[arg-type]
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    output_dir = prepare_output_dir(config.output_dir, config.overwrite)
    engine = make_rollout_engine(
        config.model, backend, **({"device": config.device} if config.device else {}),
        gpu_memory_utilization=config.gpu_memory_utilization, seed=config.seed,
    )
    return RunSetup(examples, template, reward_fn, sampling, backend, output_dir, engine)
