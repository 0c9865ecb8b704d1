"""The settings every training script shares (GRPO, GRPO on Ray, SFT, expert iteration), defined once here.

Each script's dataclass (alignment/grpo/config.py, alignment/supervised/config.py) inherits them, with LoRA's
(alignment/models/lora.py) and the output folder's (alignment/config/settings.py), and gives its own default where
it differs (`override`).
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from alignment.config.settings import OutputSettings, WandbMode, setting
from alignment.grader import GraderMode
from alignment.models.lora import LoRASettings
from alignment.prompts import PROMPT_HELP, Prompt
from alignment.run.precision import Precision


@dataclass
class TrainingSettings(OutputSettings, LoRASettings):
    model: str = setting(
        "Qwen/Qwen2.5-Math-1.5B",
        "Policy to train: a local HF folder (a run's policy/ folder too), a hub id, or `smollm2-135m` (packaged).",
    )
    prompt: Prompt = setting("r1_zero", PROMPT_HELP)
    grader: GraderMode = setting(
        "course",
        "Math grading: course: the verdicts of the course's drgrpo_grader (fast mode), without its false positives; "
        "lenient: math equivalence (10^6 = 1000000, unreduced fractions, any order of a set). "
        "docs/concepts/grader.md lists the differences.",
    )
    allow_validation_overlap: bool = setting(
        False, "Start even when over 1% of the validation questions are also training questions."
    )
    train_on_evaluation_split: bool = setting(
        False,
        "Train even on a test or validation split (--dataset-split test, a file named test.jsonl, or a source whose "
        "only split is one, such as math500), which is otherwise refused: an evaluation set is evaluated whole.",
    )
    learning_rate: float = setting(1e-5, "AdamW learning rate.")
    weight_decay: float = setting(0.0, "AdamW weight decay.")
    max_grad_norm: float = setting(1.0, "Gradient clipping norm.")
    eval_every: int = setting(
        5, "Validate every N steps (GRPO steps, SFT optimizer steps or EI steps), and at the end."
    )
    n_eval_examples: int = setting(1024, "Validation questions per evaluation.")
    grader_workers: int | None = setting(
        None, "Grading processes (default: CPU count, at most 8; 1 grades in this process)."
    )
    policy_device: str | None = setting(None, "Policy device (default: cuda:0, else cpu).")
    rollout_device: str | None = setting(
        None, "Rollout device (default: cuda:1 with two GPUs, else the policy device)."
    )
    precision: Precision | None = setting(
        None,
        "fp32: float32 throughout (default on the CPU); bf16: weights and AdamW states in bfloat16, the handouts' "
        "loading advice (an update under half a bfloat16 step of its weight, 2^-9 of it, is lost); bf16-mixed: "
        "float32 master weights and AdamW states, bfloat16 compute (default on a GPU); fp16-mixed: float16 compute "
        "with dynamic loss scaling, rollouts sampled in float16 (alignment/run/precision.py).",
    )
    tf32: bool = setting(
        True,
        "On a GPU with TensorFloat-32 (NVIDIA Ampere and later), float32 matrix products in TF32 (float32's range, "
        "10 mantissa bits: several times faster; fp32 runs gain most); --no-tf32 keeps them in full float32. No "
        "effect on the CPU.",
    )
    torch_threads: int | None = setting(
        None,
        "CPU threads for torch (default: torch's choice); 1 avoids OpenMP stalls on CPU cores shared with other jobs.",
    )
    checkpoint_every: int = setting(50, "Save a resumable checkpoint every N steps, and at the end.")
    wandb_project: str | None = setting(None, "wandb project name.")
    wandb_mode: WandbMode = setting("disabled", "wandb logging: online, offline (no network needed) or disabled.")
    wandb_group: str | None = setting(
        None,
        "wandb group of the run (scripts/sweep.py sets it to the preset's folder, e.g. pku/grpo_baselines); the run is "
        "named after its folder.",
    )

    # Settings a resumed run may change without changing what it computes: cadence, logging, placement.
    RESUMABLE: ClassVar[frozenset[str]] = frozenset(
        {
            "output_dir",
            "overwrite",
            "eval_every",
            "n_eval_examples",
            "checkpoint_every",
            "wandb_project",
            "wandb_mode",
            "wandb_group",
            "policy_device",
            "rollout_device",
            "grader_workers",
            "torch_threads",
            "allow_validation_overlap",
            "train_on_evaluation_split",
        }
    )
    # Settings added since runs were saved, with what a run saved without them did (read on --resume)
    ADDED: ClassVar[dict[str, Any]] = {"grader": "lenient", "tf32": False}
    # Settings renamed since earlier runs: old key -> (new key, old value -> new value). A run saved with the
    # default dtype (None) resumes with the default precision: bf16-mixed on a GPU, its master copy started from the
    # saved weights.
    LEGACY: ClassVar[dict[str, tuple[str, dict[Any, Any]]]] = {
        "dtype": ("precision", {None: None, "bfloat16": "bf16", "float32": "fp32"})
    }
    # Files whose presence in --output-dir marks an earlier run
    RUN_FILES: ClassVar[tuple[str, ...]] = ("metrics.jsonl", "checkpoint")


@dataclass
class MathDataSettings:
    """Where a run's questions come from (alignment/data/splits.py): GRPO on math, and expert iteration."""

    dataset: str = setting(
        "math",
        "Training questions: `math` (MATH's 7,500 training problems), `math500`, `competition_math`, "
        "`hendrycks_math`, `gsm8k` (shipped in data/gsm8k/), a .jsonl file, a local dataset folder or a hub id "
        "(alignment/data/math_datasets.py; $ALIGNMENT_DATA_MIRROR holds local copies of hub repos).",
    )
    dataset_split: str = setting("train", "Split of --dataset to train on (a source with one split trains on it).")
    n_train_examples: int | None = setting(
        None,
        "Train on this many questions of the training split, drawn reproducibly (alignment/data/splits.py: seed 0, "
        "kept in file order); default: all. CS336 2026: 6400 of GSM8K's 7,473 (with --n-eval-examples 1024 of its "
        "1,319 test problems).",
    )
    validation_dataset: str | None = setting(
        None,
        "Validation questions (default: --dataset's test or validation split, e.g. MATH's 5,000 test problems for "
        "`math`; for a source with one split, a held-out slice of it).",
    )


def check_output_dir(config: TrainingSettings, resume: bool) -> Path:
    """A fresh run refuses a folder holding an earlier run's files unless --overwrite; --resume needs them."""
    earlier = [name for name in config.RUN_FILES if (config.output_dir / name).exists()]
    if earlier and not resume and not config.overwrite:
        raise ValueError(
            f"--output-dir {config.output_dir} holds an earlier run ({', '.join(earlier)}); "
            "pass --resume to continue it or --overwrite to replace it"
        )
    return config.output_dir
