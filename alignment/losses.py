"""Per-token policy-gradient losses. Swap or add a loss here; everything else calls the dispatcher.

Shapes: advantages / raw_rewards (batch, 1) broadcast over the sequence; log-probs (batch, seq).
Every loss returns a per-token loss of shape (batch, seq) and a metadata dict.
"""

from typing import Literal

import torch

LossType = Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip"]
LOSS_TYPES: tuple[str, ...] = ("no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip")


def compute_naive_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor, policy_log_probs: torch.Tensor
) -> torch.Tensor:
    """REINFORCE: -A * log pi(o_t). (batch, 1), (batch, seq) -> (batch, seq)."""
    return -raw_rewards_or_advantages * policy_log_probs


def compute_grpo_clip_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    cliprange: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO-Clip: -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A), ratio = pi / pi_old.

    metadata: `clipped` (batch, seq) bool, True where the clipped term is strictly the smaller one, and
    `clip_fraction`, its mean over all positions (the train step reports it over response tokens).
    """
    ratio = torch.exp(policy_log_probs - old_log_probs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange) * advantages
    is_clipped = clipped < unclipped
    loss = -torch.minimum(unclipped, clipped)
    return loss, {"clipped": is_clipped, "clip_fraction": is_clipped.float().mean()}


def compute_grpo_no_clip_loss(
    advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor
) -> torch.Tensor:
    """Unclipped importance-weighted loss: -(pi / pi_old) * A. (batch, 1), (batch, seq) x2 -> (batch, seq)."""
    return -torch.exp(policy_log_probs - old_log_probs) * advantages


def truncated_importance_weights(
    train_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, cap: float
) -> torch.Tensor:
    """Truncated importance sampling (TIS): min(pi_train / pi_rollout, cap) per token, with no gradient.

    The rollout engine (e.g. vLLM) and the trainer compute slightly different probabilities for the same
    tokens (kernels, precision); weighting the policy-gradient term by this ratio corrects for sampling from
    the engine's distribution, and the cap bounds the variance. (batch, seq) x2 -> (batch, seq).
    """
    return torch.exp(train_log_probs.detach() - rollout_log_probs).clamp(max=cap)


def _require(name: str, value: torch.Tensor | float | None, loss_type: str) -> None:
    if value is None:
        raise ValueError(f"loss_type={loss_type!r} requires {name}, which was None")


def compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: LossType,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dispatch to the loss named by `loss_type`; raises ValueError naming a missing input or unknown type."""
    if loss_type == "no_baseline":
        _require("raw_rewards", raw_rewards, loss_type)
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        _require("advantages", advantages, loss_type)
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_clip":
        _require("advantages", advantages, loss_type)
        _require("old_log_probs", old_log_probs, loss_type)
        _require("cliprange", cliprange, loss_type)
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)
    if loss_type == "grpo_no_clip":
        _require("advantages", advantages, loss_type)
        _require("old_log_probs", old_log_probs, loss_type)
        return compute_grpo_no_clip_loss(advantages, policy_log_probs, old_log_probs), {}
    raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {', '.join(LOSS_TYPES)}")
