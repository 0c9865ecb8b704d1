"""Settings and set-up of the generation scripts (scripts/eval_zero_shot.py, scripts/best_of_n.py): every flag
checked, then the output folder made, then the model loaded, so that cheap failures come first."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import typer

from alignment.config.cli import bad_flag
from alignment.config.settings import OutputSettings, override, setting
from alignment.grader import GraderMode
from alignment.kernels.support import KernelSettings, use_kernels
from alignment.models.loading import check_model_source
from alignment.prompts import PROMPT_HELP, Prompt
from alignment.rollout.backends import make_rollout_engine, resolve_backend
from alignment.rollout.decode_choice import DecodeSettings
from alignment.rollout.interface import Backend, RolloutEngine, SamplingConfig

RESULT_FILES = ("generations.jsonl", "summary.json")


@dataclass
class GenerationConfig(OutputSettings, DecodeSettings, KernelSettings):
    """Settings of scripts/eval_zero_shot.py (and the base of scripts/best_of_n.py's); each is a flag."""

    dataset: str = setting(
        "math",
        "`math` (MATH's 5,000 test problems, as CS336 A5 evaluates Qwen2.5-Math-1.5B), `math500` (all 500), `gsm8k` "
        "(its test split; PKU's pairing with Qwen3-0.6B is configs/pku/zero_shot.toml), `competition_math` (one "
        "training split: the tenth a training run holds out), a .jsonl file, a local dataset folder or a hub id; its "
        "test or validation split, whole.",
    )
    prompt: Prompt = setting("r1_zero", PROMPT_HELP)
    grader: GraderMode = setting(
        "course",
        "course: the course's drgrpo_grader verdicts (without its false positives); lenient: math equivalence.",
    )
    model: str = setting(
        "Qwen/Qwen2.5-Math-1.5B",
        "A local HF folder (a run's policy/ folder too), a hub id, or `smollm2-135m` (packaged, offline).",
    )
    limit: int | None = setting(
        None, "Use only N examples, spread over the dataset by a fixed seed (MATH's splits are ordered by subject)."
    )
    temperature: float = setting(1.0, "Sampling temperature (0 = greedy).")
    top_p: float = setting(1.0, "Nucleus sampling mass.")
    max_tokens: int = setting(1024, "Maximum new tokens per response.")
    min_tokens: int = setting(0, "EOS and stop strings are ignored before this many new tokens.")
    stop: list[str] | None = setting(
        None,
        "Stop string (repeatable); it is kept in the output (default: the prompt's own: </answer> for r1_zero-style "
        "prompts, none for question_only).",
    )
    output_dir: Path = override(OutputSettings, "output_dir", Path("outputs/eval"))
    backend: Backend = setting(
        "auto",
        "Generation backend; auto: vllm where its installed build runs on the device, else hf; transformer_lm: our "
        "own model and sampler.",
    )
    device: str | None = setting(None, "Device for generation, e.g. cuda:0 or cpu (default: cuda:0 if present).")
    gpu_memory_utilization: float = setting(0.85, "vLLM: fraction of GPU memory to use.")
    grader_workers: int | None = setting(None, "Grading processes (default: CPU count, at most 8).")


@dataclass
class RunSetup:
    sampling: SamplingConfig
    backend: str
    output_dir: Path
    engine: RolloutEngine


def prepare_output_dir(output_dir: Path, overwrite: bool) -> Path:
    """Create the folder; refuse to replace earlier results unless --overwrite."""
    existing = [name for name in RESULT_FILES if (output_dir / name).exists()]
    if existing and not overwrite:
        raise bad_flag(
            "--output-dir", f"{output_dir} already holds {', '.join(existing)}; pass --overwrite to replace them"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    return output_dir


def set_up(config: GenerationConfig, task_stop: Sequence[str]) -> RunSetup:
    """Check the sampling flags, then create the output folder, then load the model: cheap failures come first (the
    caller, alignment/tasks/evaluating.py, checked the task's flags before). `task_stop`: the strings that end a
    completion of the task (math's: its --prompt's), unless --stop."""
    try:
        sampling = SamplingConfig(
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=config.max_tokens,
            min_tokens=config.min_tokens,
            stop=tuple(task_stop if config.stop is None else config.stop),
            seed=config.seed,
        )
        backend = resolve_backend(config.backend)  # type: ignore[arg-type]
        if config.decode_sync_every < 1:
            raise ValueError(f"--decode-sync-every must be >= 1, got {config.decode_sync_every}")
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    check_model_source(config.model)  # a model folder not there, or one the hub cannot give: before the output folder
    output_dir = prepare_output_dir(config.output_dir, config.overwrite)
    use_kernels(config.kernels)  # the in-process samplers' draw
    engine = make_rollout_engine(
        config.model,
        backend,
        **({"device": config.device} if config.device else {}),
        gpu_memory_utilization=config.gpu_memory_utilization,
        seed=config.seed,
        decode=config.decode,
        sync_every=config.decode_sync_every,
    )
    return RunSetup(sampling, backend, output_dir, engine)
