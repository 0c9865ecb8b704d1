"""Settings of the SFT and expert-iteration runs (scripts/train_sft.py, scripts/expert_iteration.py).

`SFTTrainingSettings` holds what both share beyond every training run's settings (alignment/run/training_settings.py):
batches, sequence length, held-out sampling; each script's dataclass adds its own. Defaults follow the handout
(Qwen2.5-Math-1.5B trained on MATH's reasoning traces and validated on MATH, gradient clipping 1.0).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from alignment.config.settings import check_choices, flag, override, setting
from alignment.models.lora import check_lora
from alignment.prompts import check_prompt
from alignment.rollout.decode_choice import DecodeSettings
from alignment.run.training_settings import MathDataSettings, TrainingSettings
from alignment.tasks.settings import TaskSettings


@dataclass
class SFTTrainingSettings(TrainingSettings, DecodeSettings):
    batch_size: int = setting(32, "Examples per optimizer step.")
    gradient_accumulation_steps: int = setting(8, "Microbatches per optimizer step (--batch-size must be a multiple).")
    max_seq_length: int = setting(
        1024, "Longest prompt + response in tokens; longer responses are cut, a longer prompt is an error."
    )
    eval_every: int = override(TrainingSettings, "eval_every", 16)
    eval_at_start: bool = setting(
        True,
        "Evaluate before the first step (skip it when --model's held-out numbers are known already, e.g. from the "
        "last evaluation of the train_sft.py run that wrote it, with the same settings).",
    )
    n_eval_examples: int = override(TrainingSettings, "n_eval_examples", 256)
    eval_max_tokens: int = setting(1024, "Maximum new tokens per held-out response.")
    eval_temperature: float = setting(1.0, "Held-out sampling temperature (0 = greedy).")
    eval_top_p: float = setting(1.0, "Held-out nucleus mass.")
    backend: Literal["auto", "hf", "vllm"] = setting(
        "auto", "Rollout backend: auto (vllm where its installed build runs on the device, else hf), hf or vllm."
    )
    gpu_memory_utilization: float = setting(0.85, "vLLM: fraction of the rollout GPU's memory.")
    output_dir: Path = override(TrainingSettings, "output_dir", Path("outputs/sft"))
    checkpoint_every: int = override(TrainingSettings, "checkpoint_every", 64)

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.gradient_accumulation_steps

    # Settings a resumed run may change without changing what it computes: length of evaluation, logging, placement.
    RESUMABLE: ClassVar[frozenset[str]] = TrainingSettings.RESUMABLE | {
        "eval_at_start",
        "gpu_memory_utilization",
        "decode",
        "decode_sync_every",
    }
    RUN_FILES: ClassVar[tuple[str, ...]] = (*TrainingSettings.RUN_FILES, "policy")


@dataclass
class SFTConfig(SFTTrainingSettings):
    """scripts/train_sft.py."""

    dataset: str = setting(
        "data/MATH/sft.jsonl",
        "Training data: a .jsonl file, local dataset folder or hub id (`gsm8k` names GSM8K's); default: the handout's "
        "MATH reasoning traces, sft.jsonl of the course's MATH/ folder copied to data/MATH/.",
    )
    validation_dataset: str | None = setting(
        None,
        "Held-out questions: a short name (`math`: MATH's 5,000 test problems, `math500`, `gsm8k`: its test split, "
        "...), a .jsonl file, a local dataset folder or a hub id, evaluated whole (alignment/data/splits.py); "
        "default: --dataset's own evaluation set: the validation.jsonl or test.jsonl beside a .jsonl file (the "
        "course's MATH/validation.jsonl beside sft.jsonl), a source's test or validation split, else `math` for "
        "prompt/response traces and `gsm8k` for GSM8K records.",
    )
    data_format: Literal["auto", "sft", "gsm8k"] = setting(
        "auto",
        "sft: records with prompt, response (and ground_truth); gsm8k: question/answer records turned into r1_zero "
        "reasoning traces; auto: whichever the first record is.",
    )
    dataset_split: str = setting("train", "Split of --dataset (folders and hub ids).")
    n_examples: int | None = setting(
        None,
        "Unique training examples: N drawn at random from --dataset with a fixed seed, in its order; a smaller N's are "
        "among a larger N's (the handout sweeps 128 to 1024; default all).",
    )
    filter_correct: bool = setting(
        False, "Keep only examples whose response the grader scores correct against their ground_truth."
    )
    epochs: int = setting(1, "Passes over the training examples.")


@dataclass
class EIConfig(SFTTrainingSettings, MathDataSettings, TaskSettings):
    """scripts/expert_iteration.py."""

    n_ei_steps: int = setting(5, "Expert-iteration steps.")
    questions_per_step: int = setting(512, "Db: questions sampled per EI step.")
    rollouts_per_question: int = setting(4, "G: rollouts per question.")
    sft_epochs: int = setting(1, "E: SFT epochs over each step's correct rollouts.")
    sampling_temperature: float = setting(1.0, "Rollout temperature.")
    sampling_max_tokens: int = setting(1024, "Rollouts are at most this long.")
    sampling_min_tokens: int = setting(4, "Rollouts are at least this long (EOS and stop strings ignored before).")
    ei_reward_threshold: float = setting(
        1.0, "A rollout is kept to fine-tune on when its reward is at least this (math's: 1, a correct answer)."
    )
    output_dir: Path = override(TrainingSettings, "output_dir", Path("outputs/expert_iteration"))
    checkpoint_every: int = override(TrainingSettings, "checkpoint_every", 1)
    eval_every: int = override(TrainingSettings, "eval_every", 1)

    RESUMABLE: ClassVar[frozenset[str]] = SFTTrainingSettings.RESUMABLE | {"n_ei_steps"}  # run it longer


def validate(config: SFTTrainingSettings) -> None:
    """Value checks; each failure raises ValueError naming the flag and its value."""
    positive = (
        "batch_size",
        "gradient_accumulation_steps",
        "max_seq_length",
        "eval_every",
        "n_eval_examples",
        "eval_max_tokens",
        "checkpoint_every",
        "epochs",
        "n_ei_steps",
        "questions_per_step",
        "rollouts_per_question",
        "sft_epochs",
        "sampling_max_tokens",
        "n_examples",
        "torch_threads",
        "decode_sync_every",
    )
    for name in positive:
        value = getattr(config, name, 1)
        if value is not None and value < 1:
            raise ValueError(f"{flag(name)} must be >= 1, got {value}")
    check_choices(config)
    check_prompt(config.prompt)
    if config.batch_size % config.gradient_accumulation_steps:
        raise ValueError(
            f"--batch-size {config.batch_size} is not a multiple of --gradient-accumulation-steps "
            f"{config.gradient_accumulation_steps}"
        )
    if config.learning_rate <= 0 or config.max_grad_norm <= 0:
        raise ValueError(
            f"--learning-rate and --max-grad-norm must be > 0, got {config.learning_rate} and {config.max_grad_norm}"
        )
    if getattr(config, "task", None) == "keywords":  # its settings (--keywords-file, ...) are GRPO's alone
        raise ValueError(
            "--task keywords trains with scripts/train_grpo.py; expert iteration takes math, arithmetic, a task file "
            "or reasoning_gym:NAME"
        )
    check_lora(config, config.backend)
