"""Advantages from rewards: GRPO's group normalization, RLOO's leave-one-out baseline, REINFORCE++-baseline.

Rewards (rollout_batch_size,) hold consecutive runs of `group_size` samples of one prompt; every estimator
returns float32 advantages of the same shape.
"""

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

RewardFn = Callable[[str, Any], dict[str, float]]


def normalize_group_rewards(
    raw_rewards: torch.Tensor, group_size: int, advantage_eps: float, normalize_by_std: bool
) -> torch.Tensor:
    """Per group: (r - mean) / (std + eps) with the unbiased std, or r - mean without std normalization.

    raw_rewards: (rollout_batch_size,), consecutive runs of `group_size` samples share a prompt.
    Returns float32 advantages of shape (rollout_batch_size,).
    """
    if group_size < 1 or raw_rewards.numel() % group_size != 0:
        raise ValueError(
            f"group_size={group_size} must be >= 1 and divide the number of rewards ({raw_rewards.numel()})"
        )
    grouped = raw_rewards.float().view(-1, group_size)
    centered = grouped - grouped.mean(dim=1, keepdim=True)
    if normalize_by_std:
        centered = centered / (grouped.std(dim=1, keepdim=True) + advantage_eps)
    return centered.reshape(-1)


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


AdvantageEstimator = Literal["group_norm", "rloo", "reinforce_pp"]


def estimate_advantages(
    raw_rewards: torch.Tensor,
    group_size: int,
    estimator: AdvantageEstimator,
    advantage_eps: float,
    normalize_by_std: bool,
) -> torch.Tensor:
    """Dispatch: group_norm (GRPO; `normalize_by_std` applies to it alone), rloo, reinforce_pp. (n,) -> (n,)."""
    if estimator == "group_norm":
        return normalize_group_rewards(raw_rewards, group_size, advantage_eps, normalize_by_std)
    if estimator == "rloo":
        return rloo_advantages(raw_rewards, group_size)
    if estimator == "reinforce_pp":
        return reinforce_pp_advantages(raw_rewards, group_size, advantage_eps)
    raise ValueError(f"unknown advantage estimator {estimator!r}; expected group_norm, rloo or reinforce_pp")


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer: int, penalty: float) -> torch.Tensor:
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13), scaled by `penalty`: 0 up to
    max_tokens - buffer tokens, then falling linearly to -penalty at max_tokens (a response cannot be longer):
    ``-penalty * (|o| - (max_tokens - buffer)) / buffer``. lengths (n,) -> (n,) float32, added to the rewards."""
    if not 0 < buffer <= max_tokens:
        raise ValueError(f"the overlong buffer ({buffer}) must be in [1, max_tokens={max_tokens}]")
    excess = (lengths.float() - (max_tokens - buffer)).clamp(min=0, max=buffer)
    return -penalty * excess / buffer


def compute_group_normalized_rewards(
    reward_fn: RewardFn,
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[Any],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Grade every response, then normalize rewards within each group of `group_size` samples.

    Returns (advantages, raw_rewards, metadata); both tensors are float32 of shape (rollout_batch_size,).
    metadata holds reward statistics for logging.
    """
    if len(rollout_responses) != len(repeated_ground_truths):
        raise ValueError(
            f"rollout_responses ({len(rollout_responses)}) and repeated_ground_truths "
            f"({len(repeated_ground_truths)}) must have the same length"
        )
    scores = [reward_fn(r, gt) for r, gt in zip(rollout_responses, repeated_ground_truths)]
    raw_rewards = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)
    advantages = normalize_group_rewards(raw_rewards, group_size, advantage_eps, normalize_by_std)
    metadata = {
        "reward_mean": raw_rewards.mean().item(),
        "reward_std": raw_rewards.std().item() if raw_rewards.numel() > 1 else 0.0,
        "reward_max": raw_rewards.max().item(),
        "reward_min": raw_rewards.min().item(),
        "format_reward_mean": sum(s.get("format_reward", 0.0) for s in scores) / len(scores),
        "answer_reward_mean": sum(s.get("answer_reward", 0.0) for s in scores) / len(scores),
    }
    return advantages, raw_rewards, metadata
