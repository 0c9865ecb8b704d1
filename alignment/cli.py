"""What the scripts share: flags made from config dataclasses, checks that run before anything heavy loads,
and the output folder."""

import inspect
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import typer

from alignment.data import MathExample, load_math_examples
from alignment.grader import REWARD_FNS, RewardFn
from alignment.prompts import PROMPT_NAMES, load_prompt
from alignment.rollout import RolloutEngine, SamplingConfig
from alignment.rollout_backends import make_rollout_engine, resolve_backend

RESULT_FILES = ("generations.jsonl", "summary.json")


@dataclass
class GenerationConfig:
    """Settings of scripts/eval_zero_shot.py (and the base of scripts/best_of_n.py's); each is a flag."""

    dataset: str = "gsm8k"
    prompt: str = "r1_zero"
    model: str = "Qwen/Qwen2.5-Math-1.5B"
    limit: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    min_tokens: int = 0
    stop: list[str] = field(default_factory=lambda: ["</answer>"])
    seed: int = 0
    output_dir: Path = Path("outputs/eval")
    backend: str = "auto"
    device: str | None = None
    gpu_memory_utilization: float = 0.85
    grader_workers: int | None = None
    overwrite: bool = False


GENERATION_HELP = {
    "dataset": "`math` (MATH-500), `gsm8k`, a .jsonl file, a local dataset folder or a hub id.",
    "prompt": "Prompt template: r1_zero or question_only (each with its reward function).",
    "model": "A local HF folder, a hub id, or `smollm2-135m` (packaged, offline).",
    "limit": "Use only the first N examples.",
    "temperature": "Sampling temperature (0 = greedy).",
    "top_p": "Nucleus sampling mass.",
    "max_tokens": "Maximum new tokens per response.",
    "min_tokens": "EOS and stop strings are ignored before this many new tokens.",
    "stop": "Stop string (repeatable); it is kept in the output.",
    "seed": "Sampling seed.",
    "output_dir": "Where the result files go.",
    "backend": "auto (vllm where its installed build runs on the device, else hf), hf, vllm, or transformer_lm (our own model and sampler).",
    "device": "Device for generation, e.g. cuda:0 or cpu (default: cuda:0 if present).",
    "gpu_memory_utilization": "vLLM: fraction of GPU memory to use.",
    "grader_workers": "Grading processes (default: CPU count, at most 8).",
    "overwrite": "Replace results already in --output-dir.",
}


def option_parameters(config_cls: type, help_texts: dict[str, str]) -> list[inspect.Parameter]:
    """One documented typer option per field of a config dataclass, defaulting to the field's default."""
    params = []
    for f in fields(config_cls):
        default = f.default_factory() if f.default_factory is not MISSING else f.default  # type: ignore[misc]
        params.append(inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
            default=typer.Option(default, help=help_texts[f.name]),
        ))
    return params


def config_command(config_cls: type, help_texts: dict[str, str], run: Callable[[Any], Any], summary: str) -> typer.Typer:
    """A typer app whose flags are the fields of `config_cls` and which calls run(config_cls(**flags))."""

    def main(**flags: Any) -> None:
        run(config_cls(**flags))

    main.__signature__ = inspect.Signature(option_parameters(config_cls, help_texts))  # type: ignore[attr-defined]
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(help=summary)(main)
    return app


@dataclass
class RunSetup:
    examples: list[MathExample]
    template: str
    reward_fn: RewardFn
    sampling: SamplingConfig
    backend: str
    output_dir: Path
    engine: RolloutEngine


def bad_flag(flag: str, message: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint=f"'{flag}'")


def load_task(dataset: str, prompt: str, limit: int | None) -> tuple[list[MathExample], str, RewardFn]:
    """Examples, prompt template and the prompt's reward function; bad values raise naming the flag."""
    if limit is not None and limit < 1:
        raise bad_flag("--limit", f"must be >= 1, got {limit}")
    if prompt not in PROMPT_NAMES:
        raise bad_flag("--prompt", f"unknown prompt {prompt!r}; expected one of {', '.join(PROMPT_NAMES)}")
    try:
        examples = load_math_examples(dataset, limit=limit)
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


def config_json(config: GenerationConfig) -> dict:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(config).items()}
