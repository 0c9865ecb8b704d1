"""Group-normalized rewards: GRPO's baseline is the mean reward of the other samples of the same prompt."""

from collections.abc import Callable, Sequence
from typing import Any

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
