"""Every setting of a GRPO run, with the handouts' starter values, checked before any model loads."""

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Literal

from alignment.advantages import AdvantageEstimator, AdvantageNormalizer, Baseline, advantage_estimator_names
from alignment.config.settings import check_choices, override, setting
from alignment.data.keywords import KeywordMatch
from alignment.envs.loading import BUILTIN_ENVS, environment_maker
from alignment.grpo_step import LossAggregation
from alignment.losses import LOSS_TYPES, RATIO_LOSSES
from alignment.models.lora import check_lora
from alignment.models.teacher import check_teacher_tokenizer
from alignment.prompts import check_prompt
from alignment.rollout.decode_choice import DecodeSettings
from alignment.rollout.interface import Backend
from alignment.rollout_correction import SEQUENCE_LEVEL, RolloutCorrection
from alignment.run.time_budget import parse_duration
from alignment.run.training_settings import MathDataSettings, TrainingSettings
from alignment.run.warm_start import WarmStartSettings, check_warm_start
from alignment.tasks.building import task_stop
from alignment.tasks.settings import TaskSettings
from alignment.tasks.source import parse_source

LossType = Literal[LOSS_TYPES]  # type: ignore[valid-type]
ReuseRolloutForward = Literal["auto", "on", "off"]


@dataclass
class GRPOConfig(TrainingSettings, MathDataSettings, WarmStartSettings, DecodeSettings, TaskSettings):
    keywords_file: Path | None = setting(
        None,
        "keywords task: one word per line. The UW handout's 6,262 (the course repo's "
        "cse599o_alignment/prompts/keywords.txt) are shipped as data/keywords/uw_cse599o.txt, which the UW presets "
        "name (a checkout's folder works too); without it, the project's 98 words in data/keywords/stand_in.txt.",
    )
    keywords_dataset: Path | None = setting(
        None,
        "keywords task: a folder built by scripts/build_keyword_dataset.py (train.jsonl, validation.jsonl) instead of "
        "prompts generated from --keywords-file.",
    )
    keywords_per_prompt: int = setting(2, "keywords task: words each prompt asks for.")
    keyword_match: KeywordMatch = setting(
        "substring",
        "keywords task: substring (the UW handouts' rule: every keyword appears in the response, case-insensitively, "
        "even inside another word) or word (stricter: whole words, plural s/es allowed; alignment/data/keywords.py).",
    )
    n_train_prompts: int = setting(1024, "keywords task: training prompts generated.")
    env: str | None = setting(
        None,
        f"Train on multi-turn episodes of an environment instead of one-turn answers: a built-in one "
        f"({', '.join(sorted(BUILTIN_ENVS))}), path/to/file.py:NAME or package.module:NAME (an Environment class, a "
        "function of the settings returning one, or an EnvironmentDefinition: docs/guides/own_environment.md), or "
        "textarena:GAME-ID (a single-player TextArena game). Rewards are the environment's; rows come from --task "
        "when given, else the environment's own, else seeds.",
    )
    env_max_turns: int | None = setting(None, "--env: model turns per episode (default: the environment's).")
    env_max_tokens: int = setting(
        1024,
        "--env: tokens per episode, prompt, model turns and observations included (a turn: --sampling-max-tokens).",
    )
    env_step_timeout_s: float = setting(
        60.0,
        "--env: seconds an environment's reset or step may take; past it the episode ends env_timeout and its "
        "group is not trained (the environment is abandoned).",
    )
    env_concurrency: int = setting(
        0, "--env: environment calls at once (0: every live episode's at once; 1: one after another)."
    )
    turn_rewards: bool = setting(
        False,
        "--env: each turn's tokens get the return from that turn (the sum of its and later turns' rewards), "
        "normalized by its group's episode returns, instead of the episode's final reward for every token.",
    )
    n_grpo_steps: int = setting(200, "GRPO steps (rollout batches) to run.")
    time_budget: str | None = setting(
        None,
        "Wall-clock budget of the run from its first validation: seconds or 90m, 1.5h, 4h (CS336's leaderboard). No "
        "step starts that would leave too little time for itself and the final validation, which then covers the "
        "whole validation set (the others: --n-eval-examples of it); the run ends as after its last step, policy/ "
        "included (alignment/run/time_budget.py).",
    )
    advantage_eps: float = setting(1e-6, "Added to the group std before dividing.")
    rollout_batch_size: int = setting(256, "Rollouts per step (questions x group size).")
    group_size: int = setting(8, "Samples per question.")
    sampling_temperature: float = setting(1.0, "Rollout temperature.")
    sampling_top_p: float = setting(1.0, "Rollout nucleus mass.")
    sampling_min_tokens: int = setting(
        4, "Rollouts are at least this long (as in Expert Iteration: no empty responses)."
    )
    sampling_max_tokens: int = setting(1024, "Rollouts are at most this long.")
    epochs_per_rollout_batch: int = setting(1, "Passes over each rollout batch (> 1 is off-policy).")
    train_batch_size: int = setting(256, "Rollouts per optimizer step (< --rollout-batch-size is off-policy).")
    gradient_accumulation_steps: int = setting(
        128, "Microbatches per optimizer step (microbatch 2 fits a 1.5B model on an 80 GB GPU)."
    )
    gpu_memory_utilization: float | None = setting(
        None,
        "vLLM: fraction of the rollout GPU's memory (default: 0.85 on a GPU of its own, as the handouts run; on a GPU "
        "shared with the policy, what the memory plan leaves it).",
    )
    loss_type: LossType = setting(
        "reinforce_with_baseline",
        "Policy-gradient loss (alignment/losses.py): gspo clips the sequence ratio exp(mean token log-ratio) (GSPO); "
        "cispo weights log pi by the clipped, gradient-stopped ratio (MiniMax-M1). CS336 2026's importance "
        "reweighting none / noclip / grpo / gspo is reinforce_with_baseline / grpo_no_clip / grpo_clip / gspo.",
    )
    advantage_estimator: AdvantageEstimator = setting(
        "group_norm",
        "group_norm: (r - group mean) / group std (GRPO); rloo: r minus the mean of the group's other samples (RLOO); "
        "reinforce_pp: r - group mean, then normalized across the batch (REINFORCE++-baseline); sqrt_mean: r - group "
        "mean over sqrt(group mean + eps) (an example); or any estimator registered by name "
        "(register_advantage_estimator, alignment/advantages.py).",
    )
    use_std_normalization: bool = setting(
        True, "group_norm: divide advantages by the group std (off: Dr. GRPO); --advantage-normalizer says more."
    )
    baseline: Baseline = setting(
        "mean",
        "group_norm: what is subtracted from each reward before normalizing: mean: its group's mean (GRPO); none: "
        "nothing (CS336 2026's RFT, with --advantage-normalizer none: wrong answers weigh 0).",
    )
    advantage_normalizer: AdvantageNormalizer | None = setting(
        None,
        "group_norm: what the centred rewards are divided by: std: the group std + --advantage-eps (GRPO); none: "
        "nothing (Dr. GRPO, RFT); mean: the group mean + --advantage-eps (MaxRL). Default: std, or none with "
        "--no-use-std-normalization.",
    )
    cliprange: float = setting(
        0.2, "Clip epsilon of grpo_clip, gspo and cispo: the ratio stays in [1 - low, 1 + high], both this by default."
    )
    cliprange_low: float | None = setting(None, "Lower clip range (default: --cliprange).")
    cliprange_high: float | None = setting(None, "Upper clip range (default: --cliprange; DAPO's clip-higher: 0.28).")
    loss_aggregation: LossAggregation = setting(
        "sequence_mean",
        "How token losses become the step's loss: sequence_mean: each response's mean, then the batch mean (the "
        "handouts); token_mean: one mean over every token of the step (DAPO); constant: each response's sum / "
        "--normalize-constant, then the batch mean (Dr. GRPO).",
    )
    normalize_constant: float | None = setting(
        None, "Constant of --loss-aggregation constant (default: --sampling-max-tokens)."
    )
    tis_cap: float | None = setting(
        None,
        "Rollout correction bound C: weight each token's policy-gradient loss by --rollout-correction of pi_train / "
        "pi_rollout, to correct the rollout engine's log-prob mismatch (off by default).",
    )
    rollout_correction: RolloutCorrection = setting(
        "token_tis",
        "With --tis-cap C: token_tis: min(ratio, C) per token; sequence_tis: min(sequence ratio, C); token_mask / "
        "sequence_mask: drop tokens / whole sequences whose ratio is outside [1/C, C] "
        "(alignment/rollout_correction.py).",
    )
    dynamic_sampling: bool = setting(
        False,
        "DAPO's dynamic sampling: drop groups whose rewards all agree and draw more questions until the batch holds "
        "--rollout-batch-size / --group-size groups, at most --dynamic-sampling-max-draws draws a step (then train on "
        "what there is).",
    )
    dynamic_sampling_max_draws: int = setting(
        4, "Generation rounds a step may take with --dynamic-sampling (the first included)."
    )
    overlong_buffer: int | None = setting(
        None,
        "DAPO's soft overlong punishment: over the last L tokens before --sampling-max-tokens the reward falls "
        "linearly, by up to --overlong-penalty (off by default).",
    )
    overlong_penalty: float = setting(
        1.0, "Reward taken from a response of --sampling-max-tokens tokens by --overlong-buffer."
    )
    mask_truncated: bool = setting(
        False,
        "Leave responses cut at --sampling-max-tokens out of the loss and its denominators (DAPO's overlong "
        "filtering).",
    )
    skip_zero_advantage: bool = setting(
        True,
        "Rows whose advantage (the reward, for no_baseline) is exactly 0, or that --mask-truncated leaves out, add "
        "exactly 0 to the gradient: score them without gradient, for the loss value and metrics, and leave them out "
        "of the backward. The same update up to rounding under every loss, estimator, aggregation and correction here "
        "(each multiplies every token term by the row's weight; denominators count tokens, not gradients).",
    )
    prune_zero_advantage: bool = setting(
        False,
        "With --skip-zero-advantage: those rows never pass through the model at all, and the others run in "
        "microbatches of the same size, fewer of them (CS336 2026's pruning: RFT's wrong answers, GRPO's groups "
        "whose rewards agree). The same update; token_entropy and the rollout-mismatch metrics then cover the rows "
        "that pass.",
    )
    log_train_rollouts_every: int | None = setting(
        None,
        "Write every rollout of each Nth GRPO step (question, response, ground truth, rewards) to rollouts.jsonl as "
        'kind "train", beside the validations\' examples (CS336 2026 suggests 40; off by default).',
    )
    adam_beta1: float = setting(0.9, "AdamW beta1.")
    adam_beta2: float = setting(0.95, "AdamW beta2.")
    eval_max_tokens: int | None = setting(None, "Validation max tokens (default: --sampling-max-tokens).")
    eval_temperature: float | None = setting(
        None,
        "Validation temperature (default: --sampling-temperature; CS336's leaderboard validates at 1.0 whatever the "
        "rollouts use).",
    )
    kl_reference: bool = setting(
        False,
        "Keep a frozen copy of the initial policy and log KL to it (a second copy of the model, two scoring passes a "
        "step; not in the handouts' loop).",
    )
    kl_prev: bool = setting(
        False,
        "Log KL between the policies before and after each step, KL(pi_before || pi_after) on the step's rollouts "
        "(two scoring passes a step; not in the handouts' loop).",
    )
    kl_prev_step: bool = setting(
        False,
        "Log UW A3 v2 problem 6's KL to the previous step's policy, KL(pi_theta || pi_theta_{t-1}): the step's "
        "rollouts scored by the policy that sampled them and by the policy one update before, from the second step "
        "on (a frozen copy of the weights kept one step behind; one more scoring pass a step).",
    )
    teacher: str | None = setting(
        None,
        "On-policy distillation (alignment/distillation.py): a frozen teacher (a policy folder, an HF folder or "
        "smollm2-135m) scores every sampled token, and each token's advantage is log pi_teacher - log pi_student "
        "(minus the per-token reverse KL), plus --distill-reward-weight times the task's advantage. Its tokenizer must "
        "be the student's (checked before any model loads).",
    )
    distill_reward_weight: float = setting(
        0.0,
        "With --teacher: w in advantage = w * task advantage + (log pi_teacher - log pi_student); 0: the teacher "
        "alone (the task's reward is still logged).",
    )
    divergence_loss_bound: float | None = setting(
        None,
        "Stop the run as diverged when a step's loss is above this in magnitude (as on a NaN or inf); the run "
        "folder then holds diverged.json with the step (off by default).",
    )
    gradient_checkpointing: bool = setting(False, "Recompute activations in backward to save memory.")
    ignore_memory_plan: bool = setting(
        False,
        "On a GPU, start even when the memory plan says the run will not fit (a warning instead of the error): the "
        "plan is an estimate (alignment/run/memory_plan.py).",
    )
    reuse_rollout_forward: ReuseRolloutForward = setting(
        "auto",
        "Train on the rollout's own forward pass: the sampler keeps every linear layer's output and the training "
        "forward replays them instead of multiplying again (the same gradient up to rounding, a third less "
        "train-phase arithmetic; alignment/rollout/forward_tape.py). Needs --backend hf or transformer_lm, one "
        "optimizer step per rollout batch, no --gradient-checkpointing, no dropout, and memory for every rollout "
        "token's linear-layer outputs (1.1 GB for configs/keyword_demo.toml). auto: used where all of that holds and "
        "it fits a quarter of memory.",
    )
    backend: Backend = setting(
        "auto",
        "Rollout backend; transformer_lm: the policy is our own TransformerLM (--model: one of its folders, an HF "
        "Llama folder or smollm2-135m), sampled by its own decoder.",
    )
    output_dir: Path = override(TrainingSettings, "output_dir", Path("outputs/grpo"))

    # Settings a resumed run may change without changing what it computes: length, cadence, logging, placement.
    RESUMABLE: ClassVar[frozenset[str]] = TrainingSettings.RESUMABLE | {
        "n_grpo_steps",
        "time_budget",
        "divergence_loss_bound",
        "eval_max_tokens",
        "eval_temperature",
        "gpu_memory_utilization",
        "reuse_rollout_forward",
        "decode",
        "decode_sync_every",
        "skip_zero_advantage",
        "prune_zero_advantage",
        "ignore_memory_plan",
        "log_train_rollouts_every",
    }
    # A keyword run saved before --keyword-match existed matched whole words
    ADDED: ClassVar[dict[str, Any]] = TrainingSettings.ADDED | {"keyword_match": "word"}
    # Settings renamed since earlier runs: old key -> (new key, old value -> new value)
    LEGACY: ClassVar[dict[str, tuple[str, dict[Any, Any]]]] = TrainingSettings.LEGACY | {
        "length_normalization": ("loss_aggregation", {"masked_mean": "sequence_mean", "masked_normalize": "constant"}),
    }
    # Shipped files moved since earlier runs named them: setting -> {old repo path: new repo path}
    MOVED: ClassVar[dict[str, dict[str, str]]] = {"keywords_file": {"data/keywords.txt": "data/keywords/stand_in.txt"}}

    @property
    def time_budget_s(self) -> float | None:
        return None if self.time_budget is None else parse_duration(self.time_budget)

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
        return task_stop(self)

    @property
    def needs_old_log_probs(self) -> bool:
        return self.loss_type in RATIO_LOSSES

    @property
    def normalizer(self) -> AdvantageNormalizer:
        """--advantage-normalizer, or what --use-std-normalization says when it is not given."""
        if self.advantage_normalizer is not None:
            return self.advantage_normalizer
        return "std" if self.use_std_normalization else "none"

    @property
    def clip_low(self) -> float:
        return self.cliprange if self.cliprange_low is None else self.cliprange_low

    @property
    def clip_high(self) -> float:
        return self.cliprange if self.cliprange_high is None else self.cliprange_high


def _fail(message: str) -> None:
    raise ValueError(message)


def validate(config: GRPOConfig) -> None:
    """The handouts' asserts and value checks; each failure names the flags and their values."""
    c = config
    check_choices(c)
    check_prompt(c.prompt)
    check_warm_start(c)
    for name in (
        "n_grpo_steps",
        "rollout_batch_size",
        "group_size",
        "train_batch_size",
        "gradient_accumulation_steps",
        "epochs_per_rollout_batch",
        "sampling_max_tokens",
        "eval_every",
        "n_eval_examples",
        "checkpoint_every",
        "decode_sync_every",
    ):
        if getattr(c, name) < 1:
            _fail(f"--{name.replace('_', '-')} must be >= 1, got {getattr(c, name)}")
    if c.log_train_rollouts_every is not None and c.log_train_rollouts_every < 1:
        _fail(f"--log-train-rollouts-every must be >= 1, got {c.log_train_rollouts_every}")
    if c.torch_threads is not None and c.torch_threads < 1:
        _fail(f"--torch-threads must be >= 1, got {c.torch_threads}")
    if c.time_budget is not None:
        parse_duration(c.time_budget)  # a ValueError naming --time-budget
    if c.rollout_batch_size % c.group_size:
        _fail(f"--rollout-batch-size ({c.rollout_batch_size}) must be divisible by --group-size ({c.group_size})")
    if c.train_batch_size % c.gradient_accumulation_steps:
        _fail(
            f"--train-batch-size ({c.train_batch_size}) must be divisible by "
            f"--gradient-accumulation-steps ({c.gradient_accumulation_steps})"
        )
    if c.train_batch_size < c.group_size:
        _fail(f"--train-batch-size ({c.train_batch_size}) must be >= --group-size ({c.group_size})")
    if c.train_batch_size > c.rollout_batch_size or c.rollout_batch_size % c.train_batch_size:
        _fail(
            f"--rollout-batch-size ({c.rollout_batch_size}) must be a multiple of --train-batch-size "
            f"({c.train_batch_size})"
        )
    parse_source(c.task, "--task")  # a malformed --task, before anything loads
    if c.task == "keywords" and c.keywords_per_prompt < 1:
        _fail(f"--keywords-per-prompt must be >= 1, got {c.keywords_per_prompt}")
    if c.backend == "transformer_lm" and c.gradient_checkpointing:
        _fail("--gradient-checkpointing is not available with --backend transformer_lm (our TransformerLM)")
    if c.loss_type == "grpo_clip" and not c.cliprange > 0:
        _fail(f"--loss-type grpo_clip needs --cliprange > 0, got {c.cliprange}")
    validate_objective(c)
    if c.tis_cap is not None and not (c.tis_cap > 0 and c.sampling_temperature == 1 and c.sampling_top_p == 1):
        _fail(
            f"--tis-cap ({c.tis_cap}) must be > 0 and needs --sampling-temperature 1 and --sampling-top-p 1 "
            "(rollout log-probs are those of the tempered distribution)"
        )
    if c.normalize_constant is not None and c.normalize_constant <= 0:
        _fail(f"--normalize-constant must be > 0, got {c.normalize_constant}")
    if not 0 <= c.sampling_min_tokens <= c.sampling_max_tokens:
        _fail(
            f"--sampling-min-tokens ({c.sampling_min_tokens}) must be in [0, "
            f"--sampling-max-tokens={c.sampling_max_tokens}]"
        )
    if c.eval_max_tokens is not None and c.eval_max_tokens < 1:
        _fail(f"--eval-max-tokens must be >= 1, got {c.eval_max_tokens}")
    if c.sampling_temperature < 0:
        _fail(f"--sampling-temperature must be >= 0, got {c.sampling_temperature}")
    if c.eval_temperature is not None and c.eval_temperature < 0:
        _fail(f"--eval-temperature must be >= 0, got {c.eval_temperature}")
    if not 0 < c.learning_rate:
        _fail(f"--learning-rate must be > 0, got {c.learning_rate}")
    if c.divergence_loss_bound is not None and not c.divergence_loss_bound > 0:
        _fail(f"--divergence-loss-bound must be > 0, got {c.divergence_loss_bound}")
    if c.gpu_memory_utilization is not None and not 0 < c.gpu_memory_utilization <= 1:
        _fail(f"--gpu-memory-utilization must be in (0, 1], got {c.gpu_memory_utilization}")
    check_lora(c, c.backend)
    validate_env(c)
    check_distillation(c)
    check_curriculum(c)


def check_curriculum(c: GRPOConfig) -> None:
    """--curriculum-threshold names a reasoning_gym task of one-turn answers and an accuracy, before any model loads
    (the levels themselves are checked when its tasks are built)."""
    if c.curriculum_threshold is None:
        return
    if c.env is not None or parse_source(c.task).kind != "reasoning_gym":
        _fail(f"--curriculum-threshold: only --task reasoning_gym:... has levels, not --task {c.task}")
    if not 0 < c.curriculum_threshold <= 1:
        _fail(f"--curriculum-threshold {c.curriculum_threshold}: an accuracy in (0, 1]")
    if c.curriculum_window < 1:
        _fail(f"--curriculum-window {c.curriculum_window}: at least 1 rollout")


def validate_env(c: GRPOConfig) -> None:
    """--env and its settings, before any model loads."""
    if c.env is None:
        for name in ("env_max_turns", "turn_rewards"):
            if getattr(c, name):
                _fail(f"--{name.replace('_', '-')} needs --env")
        return
    if c.env_max_turns is not None and c.env_max_turns < 1:
        _fail(f"--env-max-turns must be >= 1, got {c.env_max_turns}")
    if c.env_max_tokens < 2:
        _fail(f"--env-max-tokens must be >= 2, got {c.env_max_tokens}")
    check_environment_source(c)
    if not c.env_step_timeout_s > 0:
        _fail(f"--env-step-timeout-s must be > 0, got {c.env_step_timeout_s}")
    if c.env_concurrency < 0:
        _fail(f"--env-concurrency must be >= 0 (0: all at once), got {c.env_concurrency}")
    if c.reuse_rollout_forward == "on":
        _fail("--reuse-rollout-forward on replays one sampling call's forward; an --env episode takes several")
    if c.dynamic_sampling:
        _fail("--dynamic-sampling draws one-turn rollouts again; it does not apply to --env episodes")


def check_environment_source(c: GRPOConfig) -> None:
    """--env's source loads and names an environment (one instance made; its rows are read with the run's data)."""
    assert c.env is not None
    environment_maker(c.env, c)  # a ValueError naming --env


def check_distillation(c: GRPOConfig) -> None:
    """--teacher and its weight; last, since comparing the tokenizers reads both from disk (no weights)."""
    if c.teacher is None:
        if c.distill_reward_weight != 0:
            _fail(f"--distill-reward-weight ({c.distill_reward_weight}) applies only with --teacher")
        return
    if c.loss_type == "no_baseline":
        _fail("--teacher needs advantages: --loss-type no_baseline weighs tokens by the raw reward alone")
    if not (c.distill_reward_weight >= 0 and math.isfinite(c.distill_reward_weight)):
        _fail(f"--distill-reward-weight must be a finite number >= 0, got {c.distill_reward_weight}")
    check_teacher_tokenizer(c.model, c.teacher)


def validate_objective(c: GRPOConfig) -> None:
    """The objective's settings, and the combinations that do not make sense, each naming both flags."""
    for name in ("cliprange_low", "cliprange_high"):
        if getattr(c, name) is not None and not getattr(c, name) >= 0:
            _fail(f"--{name.replace('_', '-')} must be >= 0, got {getattr(c, name)}")
    if c.loss_type in ("gspo", "cispo") and not (c.clip_low > 0 or c.clip_high > 0):
        _fail(f"--loss-type {c.loss_type} needs a clip range > 0 (--cliprange, --cliprange-low, --cliprange-high)")
    if c.loss_type == "gspo" and c.loss_aggregation != "sequence_mean":
        _fail(
            f"--loss-type gspo is a per-sequence objective: --loss-aggregation {c.loss_aggregation} would weigh "
            "sequences by length; use --loss-aggregation sequence_mean"
        )
    if c.loss_type == "gspo" and c.tis_cap is not None and c.rollout_correction not in SEQUENCE_LEVEL:
        _fail(
            f"--loss-type gspo weighs whole sequences: --rollout-correction {c.rollout_correction} (with --tis-cap) "
            "would weigh its tokens apart; use --rollout-correction sequence_tis or sequence_mask"
        )
    if c.tis_cap is not None and c.rollout_correction.endswith("mask") and not c.tis_cap > 1:
        _fail(
            f"--rollout-correction {c.rollout_correction} keeps ratios in [1/C, C]: --tis-cap must be > 1, got "
            f"{c.tis_cap}"
        )
    if not c.use_std_normalization and c.advantage_normalizer not in (None, "none"):
        _fail(
            f"--advantage-normalizer {c.advantage_normalizer} contradicts --no-use-std-normalization (which is "
            "--advantage-normalizer none); give one of them"
        )
    if c.advantage_estimator not in advantage_estimator_names():
        _fail(
            f"--advantage-estimator {c.advantage_estimator!r} is not one of {', '.join(advantage_estimator_names())} "
            "(a new one is a function registered by name: register_advantage_estimator in alignment/advantages.py)"
        )
    if c.advantage_estimator != "group_norm" and (c.baseline != "mean" or c.advantage_normalizer is not None):
        _fail(
            f"--baseline and --advantage-normalizer shape group_norm's advantages; --advantage-estimator "
            f"{c.advantage_estimator} has its own baseline and scale"
        )
    if c.loss_type == "no_baseline" and (c.baseline != "mean" or c.advantage_normalizer is not None):
        _fail(
            "--loss-type no_baseline weighs tokens by the raw reward, so --baseline and --advantage-normalizer would "
            "do nothing; use --loss-type reinforce_with_baseline with them (--baseline none --advantage-normalizer "
            "none is RFT)"
        )
    if c.turn_rewards and (c.baseline != "mean" or c.normalizer == "mean"):
        _fail(
            f"--turn-rewards centres each turn's return on its group's mean episode return: it needs --baseline mean "
            f"and --advantage-normalizer std or none (got --baseline {c.baseline}, --advantage-normalizer "
            f"{c.normalizer})"
        )
    if c.prune_zero_advantage and not c.skip_zero_advantage:
        _fail("--prune-zero-advantage leaves out the rows --skip-zero-advantage finds: it needs --skip-zero-advantage")
    if c.advantage_estimator == "rloo" and c.group_size < 2:
        _fail(f"--advantage-estimator rloo needs --group-size >= 2 (the others of a group), got {c.group_size}")
    if c.advantage_estimator == "reinforce_pp" and c.train_batch_size < 2:
        _fail("--advantage-estimator reinforce_pp normalizes across the batch: --train-batch-size must be >= 2")
    if c.dynamic_sampling:
        if c.dynamic_sampling_max_draws < 1:
            _fail(f"--dynamic-sampling-max-draws must be >= 1, got {c.dynamic_sampling_max_draws}")
        if c.off_policy and not c.needs_old_log_probs:
            _fail(
                f"--dynamic-sampling with off-policy steps (--epochs-per-rollout-batch {c.epochs_per_rollout_batch}, "
                f"--train-batch-size {c.train_batch_size}) needs a loss with old log-probs: --loss-type "
                f"{c.loss_type} would train the later steps on stale samples without a ratio "
                f"(use one of {', '.join(RATIO_LOSSES)})"
            )
    if c.overlong_buffer is not None and not 0 < c.overlong_buffer <= c.sampling_max_tokens:
        _fail(f"--overlong-buffer ({c.overlong_buffer}) must be in [1, --sampling-max-tokens={c.sampling_max_tokens}]")
    if c.overlong_penalty < 0:
        _fail(f"--overlong-penalty must be >= 0, got {c.overlong_penalty}")


def field_names() -> set[str]:
    return {f.name for f in fields(GRPOConfig)}
