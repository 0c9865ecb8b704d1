"""Advantages from rewards: GRPO's group normalization and its variants (Dr. GRPO, RFT, MaxRL), RLOO's
leave-one-out baseline, REINFORCE++-baseline.

Rewards (rollout_batch_size,) hold consecutive runs of `group_size` samples of one prompt; every estimator
returns advantages of the same shape, float32 (float64 for float64 rewards).

Both CS336 editions' group normalization is `group_advantages`: the 2025 handout's `compute_group_normalized_rewards`
(grade, then normalize with or without the std) and the 2026 handout's (`baseline` x `advantage_normalizer` on raw
rewards, `compute_group_advantages`) call it; `compute_rollout_rewards` grades for both.
"""

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

RewardFn = Callable[[str, Any], dict[str, float]]
Baseline = Literal["mean", "none"]
AdvantageNormalizer = Literal["std", "none", "mean"]
BASELINES: tuple[str, ...] = ("mean", "none")
ADVANTAGE_NORMALIZERS: tuple[str, ...] = ("std", "none", "mean")


def group_advantages(
    raw_rewards: torch.Tensor,
    group_size: int,
    baseline: Baseline = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: AdvantageNormalizer = "std",
) -> torch.Tensor:
    """Per group of `group_size` consecutive rewards r_j with mean mu and unbiased std s (torch.std, n - 1):

        centred_j = r_j - mu (baseline "mean") or r_j (baseline "none")
        A_j = centred_j / (s + eps) ("std", GRPO), centred_j ("none", Dr. GRPO, RFT), centred_j / (mu + eps)
              ("mean", MaxRL)

    raw_rewards: (rollout_batch_size,) -> (rollout_batch_size,), float32 (float64 for float64 rewards). A group whose
    rewards all agree gets A = 0 under the mean baseline; under "mean" normalization a group of all-zero rewards
    gets 0 / eps = 0.
    """
    if group_size < 1 or raw_rewards.numel() % group_size != 0:
        raise ValueError(
            f"group_size={group_size} must be >= 1 and divide the number of rewards ({raw_rewards.numel()})"
        )
    if baseline not in BASELINES:
        raise ValueError(f"unknown baseline {baseline!r}; expected one of {', '.join(BASELINES)}")
    if advantage_normalizer not in ADVANTAGE_NORMALIZERS:
        raise ValueError(
            f"unknown advantage_normalizer {advantage_normalizer!r}; expected one of {', '.join(ADVANTAGE_NORMALIZERS)}"
        )
    dtype = raw_rewards.dtype if raw_rewards.dtype == torch.float64 else torch.float32
    grouped = raw_rewards.to(dtype).view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    centred = grouped - mean if baseline == "mean" else grouped
    if advantage_normalizer == "std":
        centred = centred / (grouped.std(dim=1, keepdim=True) + advantage_eps)
    elif advantage_normalizer == "mean":
        centred = centred / (mean + advantage_eps)
    return centred.reshape(-1)


def normalize_group_rewards(
    raw_rewards: torch.Tensor, group_size: int, advantage_eps: float, normalize_by_std: bool
) -> torch.Tensor:
    """The 2025 handouts' group normalization: (r - mean) / (std + eps), or r - mean without std normalization
    (`group_advantages` with the mean baseline). (rollout_batch_size,) -> (rollout_batch_size,)."""
    return group_advantages(raw_rewards, group_size, "mean", advantage_eps, "std" if normalize_by_std else "none")


def compute_group_advantages(
    raw_rewards: torch.Tensor,
    group_size: int,
    baseline: Baseline = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: AdvantageNormalizer = "std",
) -> tuple[torch.Tensor, dict[str, float]]:
    """The 2026 handout's group normalization: `group_advantages`, with statistics of the advantages to log
    (mean, std, max, min). (rollout_batch_size,) -> ((rollout_batch_size,), metadata)."""
    advantages = group_advantages(raw_rewards, group_size, baseline, advantage_eps, advantage_normalizer)
    metadata = {
        "advantage_mean": advantages.mean().item(),
        "advantage_std": advantages.std().item() if advantages.numel() > 1 else 0.0,
        "advantage_max": advantages.max().item(),
        "advantage_min": advantages.min().item(),
    }
    return advantages, metadata


def rloo_advantages(raw_rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO (arXiv 2402.14740): r_i - (1 / (G - 1)) sum_{j != i} r_j, the mean of the group's other samples as
    baseline; equal to G / (G - 1) * (r_i - group mean). Needs group_size >= 2. (n,) -> (n,)."""
    if group_size < 2 or raw_rewards.numel() % group_size != 0:
        raise ValueError(
            f"RLOO needs group_size >= 2 dividing the number of rewards ({raw_rewards.numel()}), got {group_size}"
        )
    grouped = raw_rewards.float().view(-1, group_size)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
    return (grouped - others).reshape(-1)


def reinforce_pp_advantages(raw_rewards: torch.Tensor, group_size: int, advantage_eps: float) -> torch.Tensor:
    """REINFORCE++-baseline (arXiv 2501.03262): a = r - group mean, then (a - mean(a)) / (std(a) + eps) across the
    whole batch (unbiased std), so the scale is the batch's, not each group's. (n,) -> (n,), n >= 2."""
    if raw_rewards.numel() < 2:
        raise ValueError("REINFORCE++ normalizes across the batch: it needs at least 2 rewards")
    centered = normalize_group_rewards(raw_rewards, group_size, advantage_eps, normalize_by_std=False)
    return (centered - centered.mean()) / (centered.std() + advantage_eps)


# Estimators other than group_norm, by name: (raw_rewards (n,), group_size, advantage_eps) -> advantages (n,).
# A run's `advantage_estimator = NAME` picks one. A new estimator is one function with @register_advantage_estimator:
EstimatorFn = Callable[[torch.Tensor, int, float], torch.Tensor]
ADVANTAGE_ESTIMATORS: dict[str, EstimatorFn] = {}
AdvantageEstimator = str  # "group_norm" or a name in ADVANTAGE_ESTIMATORS


def register_advantage_estimator(name: str) -> Callable[[EstimatorFn], EstimatorFn]:
    """Decorator: the function becomes the advantage estimator `name` (a run's `advantage_estimator = name`). It
    gets the step's raw rewards (n,), consecutive runs of `group_size` answering one prompt, and `advantage_eps`,
    and returns an advantage per rollout (n,). Its module must be imported before the run's settings are checked:
    define it here, or import its module from here."""

    def register(fn: EstimatorFn) -> EstimatorFn:
        if name == "group_norm" or name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return register


def advantage_estimator_names() -> tuple[str, ...]:
    return ("group_norm", *ADVANTAGE_ESTIMATORS)


register_advantage_estimator("rloo")(lambda rewards, group_size, eps: rloo_advantages(rewards, group_size))
register_advantage_estimator("reinforce_pp")(reinforce_pp_advantages)


@register_advantage_estimator("sqrt_mean")
def sqrt_mean_advantages(raw_rewards: torch.Tensor, group_size: int, advantage_eps: float) -> torch.Tensor:
    """An example of a registered estimator (CS336 2026's try_your_own): the group-mean baseline divided by
    sqrt(mu + eps), mu the group's mean reward: between Dr. GRPO (dividing by 1) and MaxRL (by mu + eps). One
    change against either. (n,) -> (n,); a group of all-zero rewards gets 0."""
    grouped = raw_rewards.float().view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    return ((grouped - mean) / (mean + advantage_eps).sqrt()).reshape(-1)


def estimate_advantages(
    raw_rewards: torch.Tensor,
    group_size: int,
    estimator: AdvantageEstimator,
    advantage_eps: float,
    normalize_by_std: bool | None = None,
    *,
    baseline: Baseline = "mean",
    advantage_normalizer: AdvantageNormalizer | None = None,
) -> torch.Tensor:
    """Dispatch: group_norm (GRPO and its variants: `group_advantages` with `baseline` and `advantage_normalizer`,
    which defaults to std, or none when `normalize_by_std` is False), else the registered estimator of that name
    (rloo, reinforce_pp, ...: ADVANTAGE_ESTIMATORS). (n,) -> (n,)."""
    if estimator == "group_norm":
        if advantage_normalizer is None:
            advantage_normalizer = "none" if normalize_by_std is False else "std"
        return group_advantages(raw_rewards, group_size, baseline, advantage_eps, advantage_normalizer)
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise ValueError(
            f"unknown advantage estimator {estimator!r}; expected one of {', '.join(advantage_estimator_names())}"
        )
    return ADVANTAGE_ESTIMATORS[estimator](raw_rewards, group_size, advantage_eps)


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer: int, penalty: float) -> torch.Tensor:
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13), scaled by `penalty`: 0 up to
    max_tokens - buffer tokens, then falling linearly to -penalty at max_tokens (a response cannot be longer):
    ``-penalty * (|o| - (max_tokens - buffer)) / buffer``. lengths (n,) -> (n,) float32, added to the rewards."""
    if not 0 < buffer <= max_tokens:
        raise ValueError(f"the overlong buffer ({buffer}) must be in [1, max_tokens={max_tokens}]")
    excess = (lengths.float() - (max_tokens - buffer)).clamp(min=0, max=buffer)
    return -penalty * excess / buffer


def compute_rollout_rewards(
    reward_fn: RewardFn, rollout_responses: Sequence[str], repeated_ground_truths: Sequence[Any]
) -> tuple[torch.Tensor, dict[str, float]]:
    """Grade every response against its ground truth with `reward_fn` (-> {"reward", "format_reward",
    "answer_reward"}). Returns the raw rewards, float32 (rollout_batch_size,), and their statistics to log: mean
    total reward (`reward_mean`, with std, max, min) and mean format and answer rewards."""
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(
            f"rollout_responses ({len(rollout_responses)}) and repeated_ground_truths "
            f"({len(repeated_ground_truths)}) must have the same length"
        )
    scores = [reward_fn(r, gt) for r, gt in zip(rollout_responses, repeated_ground_truths)]
    raw_rewards = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)
    metadata = {
        "reward_mean": raw_rewards.mean().item(),
        "reward_std": raw_rewards.std().item() if raw_rewards.numel() > 1 else 0.0,
        "reward_max": raw_rewards.max().item(),
        "reward_min": raw_rewards.min().item(),
        "format_reward_mean": sum(s.get("format_reward", 0.0) for s in scores) / len(scores),
        "answer_reward_mean": sum(s.get("answer_reward", 0.0) for s in scores) / len(scores),
    }
    return raw_rewards, metadata


def compute_group_normalized_rewards(
    reward_fn: RewardFn,
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[Any],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """The 2025 handouts' step: grade every response (`compute_rollout_rewards`), then normalize rewards within
    each group of `group_size` samples (`normalize_group_rewards`).

    Returns (advantages, raw_rewards, metadata); both tensors are float32 of shape (rollout_batch_size,).
    metadata holds reward statistics for logging.
    """
    raw_rewards, metadata = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    advantages = normalize_group_rewards(raw_rewards, group_size, advantage_eps, normalize_by_std)
    return advantages, raw_rewards, metadata
