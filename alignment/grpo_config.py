"""Every setting of a GRPO run, with the handouts' starter values, checked before any model loads."""

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from alignment.losses import LOSS_TYPES

LengthNormalization = str  # "masked_mean" or "masked_normalize"


@dataclass
class GRPOConfig:
    model: str = "Qwen/Qwen2.5-Math-1.5B"
    task: str = "math"  # math (graded answers) or keywords (keyword inclusion)
    keywords_file: Path | None = None  # keywords task: one word per line (default: data/keywords.txt)
    keywords_dataset: Path | None = None  # keywords task: a folder from scripts/build_keyword_dataset.py
    keywords_per_prompt: int = 2
    n_train_prompts: int = 1024  # keywords task: training prompts generated
    dataset: str = "math"  # training questions: a short name, a .jsonl file, a folder or a hub id
    dataset_split: str = "train"
    validation_dataset: str | None = None  # default: the dataset's test split
    prompt: str = "r1_zero"  # r1_zero or question_only, each with its reward function
    n_grpo_steps: int = 200
    learning_rate: float = 1e-5
    advantage_eps: float = 1e-6
    rollout_batch_size: int = 256
    group_size: int = 8
    sampling_temperature: float = 1.0
    sampling_top_p: float = 1.0
    sampling_min_tokens: int = 4  # as in Expert Iteration: no empty responses
    sampling_max_tokens: int = 1024
    epochs_per_rollout_batch: int = 1  # 1 with train_batch_size == rollout_batch_size is on-policy
    train_batch_size: int = 256  # on-policy
    gradient_accumulation_steps: int = 128  # microbatch size 2 fits a 1.5B model on an 80 GB GPU
    gpu_memory_utilization: float = 0.85
    loss_type: str = "reinforce_with_baseline"
    use_std_normalization: bool = True
    cliprange: float = 0.2
    tis_cap: float | None = None  # truncated importance sampling: loss x min(pi_train / pi_rollout, tis_cap)
    length_normalization: LengthNormalization = "masked_mean"
    normalize_constant: float | None = None  # masked_normalize's constant; default sampling_max_tokens
    max_grad_norm: float = 1.0
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    eval_every: int = 5
    n_eval_examples: int = 1024
    eval_max_tokens: int | None = None  # default: sampling_max_tokens
    grader_workers: int | None = None  # default: CPU count, at most 8; 1 grades in this process
    kl_reference: bool = True  # keep a frozen copy of the initial policy to report KL against it
    kl_prev: bool = True  # one extra forward per step: KL between the policies before and after the step
    gradient_checkpointing: bool = False
    backend: str = "auto"  # auto, hf, vllm, or transformer_lm: our own model as policy, sampled by its own decoder
    policy_device: str | None = None  # default: cuda:0 when present, else cpu
    rollout_device: str | None = None  # default: cuda:1 on a two-GPU box, else the policy device
    dtype: str | None = None  # default: bfloat16 on GPU, float32 on CPU
    seed: int = 0
    output_dir: Path = Path("outputs/grpo")
    overwrite: bool = False  # a fresh run may replace an earlier run's files in output_dir
    checkpoint_every: int = 50
    wandb_project: str | None = None
    wandb_mode: str = "disabled"  # online, offline or disabled

    @property
    def n_prompts_per_rollout_batch(self) -> int:
        return self.rollout_batch_size // self.group_size

    @property
    def micro_train_batch_size(self) -> int:
        return self.train_batch_size // self.gradient_accumulation_steps

    @property
    def off_policy(self) -> bool:
        """More than one optimizer step per rollout batch: later steps train on stale samples."""
        return self.epochs_per_rollout_batch > 1 or self.train_batch_size < self.rollout_batch_size

    @property
    def stop(self) -> tuple[str, ...]:
        return ("</answer>",) if self.task == "math" and self.prompt == "r1_zero" else ()

    @property
    def needs_old_log_probs(self) -> bool:
        return self.loss_type in ("grpo_clip", "grpo_no_clip")

    def to_json(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


def _fail(message: str) -> None:
    raise ValueError(message)


def validate(config: GRPOConfig) -> None:
    """The handouts' asserts and value checks; each failure names the flags and their values."""
    c = config
    for name in ("n_grpo_steps", "rollout_batch_size", "group_size", "train_batch_size",
                 "gradient_accumulation_steps", "epochs_per_rollout_batch", "sampling_max_tokens", "eval_every",
                 "n_eval_examples", "checkpoint_every"):
        if getattr(c, name) < 1:
            _fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(c, name)}")
    if c.rollout_batch_size % c.group_size:
        _fail(f"--rollout-batch-size ({c.rollout_batch_size}) must be divisible by --group-size ({c.group_size})")
    if c.train_batch_size % c.gradient_accumulation_steps:
        _fail(f"--train-batch-size ({c.train_batch_size}) must be divisible by "
              f"--gradient-accumulation-steps ({c.gradient_accumulation_steps})")
    if c.train_batch_size < c.group_size:
        _fail(f"--train-batch-size ({c.train_batch_size}) must be >= --group-size ({c.group_size})")
    if c.train_batch_size > c.rollout_batch_size or c.rollout_batch_size % c.train_batch_size:
        _fail(f"--rollout-batch-size ({c.rollout_batch_size}) must be a multiple of --train-batch-size ({c.train_batch_size})")
    if c.task not in ("math", "keywords"):
        _fail(f"--task {c.task!r} is not math or keywords")
    if c.task == "keywords" and c.keywords_per_prompt < 1:
        _fail(f"--keywords-per-prompt must be >= 1, got {c.keywords_per_prompt}")
    if c.backend == "transformer_lm" and c.gradient_checkpointing:
        _fail("--gradient-checkpointing is not available with --backend transformer_lm (our TransformerLM)")
    if c.loss_type not in LOSS_TYPES:
        _fail(f"--loss-type {c.loss_type!r} is not one of {', '.join(LOSS_TYPES)}")
    if c.loss_type == "grpo_clip" and not c.cliprange > 0:
        _fail(f"--loss-type grpo_clip needs --cliprange > 0, got {c.cliprange}")
    if c.length_normalization not in ("masked_mean", "masked_normalize"):
        _fail(f"--length-normalization {c.length_normalization!r} is not masked_mean or masked_normalize")
    if c.tis_cap is not None and not (c.tis_cap > 0 and c.sampling_temperature == 1 and c.sampling_top_p == 1):
        _fail(f"--tis-cap ({c.tis_cap}) must be > 0 and needs --sampling-temperature 1 and --sampling-top-p 1 "
              "(rollout log-probs are those of the tempered distribution)")
    if c.normalize_constant is not None and c.normalize_constant <= 0:
        _fail(f"--normalize-constant must be > 0, got {c.normalize_constant}")
    if not 0 <= c.sampling_min_tokens <= c.sampling_max_tokens:
        _fail(f"--sampling-min-tokens ({c.sampling_min_tokens}) must be in [0, --sampling-max-tokens={c.sampling_max_tokens}]")
    if c.eval_max_tokens is not None and c.eval_max_tokens < 1:
        _fail(f"--eval-max-tokens must be >= 1, got {c.eval_max_tokens}")
    if c.sampling_temperature < 0:
        _fail(f"--sampling-temperature must be >= 0, got {c.sampling_temperature}")
    if not 0 < c.learning_rate:
        _fail(f"--learning-rate must be > 0, got {c.learning_rate}")
    if c.wandb_mode not in ("online", "offline", "disabled"):
        _fail(f"--wandb-mode {c.wandb_mode!r} is not online, offline or disabled")
    if not 0 < c.gpu_memory_utilization <= 1:
        _fail(f"--gpu-memory-utilization must be in (0, 1], got {c.gpu_memory_utilization}")


def field_names() -> set[str]:
    return {f.name for f in fields(GRPOConfig)}
