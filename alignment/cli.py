"""What the generation scripts share: their common flags, checking them before anything heavy loads, and
the output folder."""

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from alignment.data import MathExample, load_math_examples
from alignment.grader import REWARD_FNS, RewardFn
from alignment.prompts import PROMPT_NAMES, load_prompt
from alignment.rollout import RolloutEngine, SamplingConfig, make_rollout_engine, resolve_backend

RESULT_FILES = ("generations.jsonl", "summary.json")

# Flag declarations shared by scripts/eval_zero_shot.py and scripts/best_of_n.py.
Dataset = Annotated[str, typer.Option(help="`math` (MATH-500), `gsm8k`, a .jsonl file, a local dataset folder or a hub id.")]
Prompt = Annotated[str, typer.Option(help="Prompt template: r1_zero or question_only (each with its reward function).")]
Model = Annotated[str, typer.Option(help="A local HF folder, a hub id, or `smollm2-135m` (packaged, offline).")]
Limit = Annotated[int | None, typer.Option(help="Use only the first N examples.")]
Temperature = Annotated[float, typer.Option(help="Sampling temperature (0 = greedy).")]
TopP = Annotated[float, typer.Option(help="Nucleus sampling mass.")]
MaxTokens = Annotated[int, typer.Option(help="Maximum new tokens per response.")]
MinTokens = Annotated[int, typer.Option(help="EOS and stop strings are ignored before this many new tokens.")]
Stop = Annotated[list[str], typer.Option(help="Stop string (repeatable); it is kept in the output.")]
Seed = Annotated[int, typer.Option(help="Sampling seed.")]
OutputDir = Annotated[Path, typer.Option(help="Where the result files go.")]
BackendFlag = Annotated[str, typer.Option("--backend", help="auto (vllm if installed and CUDA present, else hf), hf, or vllm.")]
Device = Annotated[str | None, typer.Option(help="Device for generation, e.g. cuda:0 or cpu (default: cuda:0 if present).")]
GpuMemoryUtilization = Annotated[float, typer.Option(help="vLLM: fraction of GPU memory to use.")]
GraderWorkers = Annotated[int | None, typer.Option(help="Grading processes (default: CPU count, at most 8).")]
Overwrite = Annotated[bool, typer.Option(help="Replace results already in --output-dir.")]


@dataclass
class GenerationConfig:
    dataset: str
    prompt: str
    model: str
    limit: int | None
    temperature: float
    top_p: float
    max_tokens: int
    min_tokens: int
    stop: list[str]
    seed: int
    output_dir: Path
    backend: str
    device: str | None
    gpu_memory_utilization: float
    grader_workers: int | None
    overwrite: bool


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
