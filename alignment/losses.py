"""Per-token policy-gradient losses. Swap or add a loss here; everything else calls the dispatcher.

Shapes: advantages / raw_rewards (batch, 1) broadcast over the sequence; log-probs and masks (batch, seq).
Every loss returns a per-token loss of shape (batch, seq) and a metadata dict; how the tokens' losses are
summed into one number is the train step's `loss_aggregation` (alignment/grpo_step.py).

Clip ranges are asymmetric where a loss clips (DAPO's clip-higher): the ratio is kept in
[1 - clip_low, 1 + clip_high], clip_high defaulting to clip_low.

Two faces, one set of losses: the 2025 handouts name a loss by `loss_type` (`compute_policy_gradient_loss`), the
2026 CS336 handout by its importance reweighting (`reweighted_policy_gradient_loss`: none, noclip, grpo, gspo),
which maps onto the same losses.
"""

from typing import Literal

import torch

LossType = Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip", "gspo", "cispo"]
LOSS_TYPES: tuple[str, ...] = ("no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip", "gspo", "cispo")
RATIO_LOSSES: tuple[str, ...] = ("grpo_clip", "grpo_no_clip", "gspo", "cispo")  # those that need old log-probs


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
    cliprange_high: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GRPO-Clip: -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A), ratio = pi / pi_old per token.

    eps_low = `cliprange`, eps_high = `cliprange_high` (default `cliprange`; DAPO raises it to 0.28).
    (batch, 1), (batch, seq) x2 -> (batch, seq). metadata: `clipped` (batch, seq) bool, True where the clipped
    term is strictly the smaller one, and `clip_fraction`, its mean over all positions (the train step reports
    it over response tokens).
    """
    high = cliprange if cliprange_high is None else cliprange_high
    ratio = torch.exp(policy_log_probs - old_log_probs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - cliprange, 1.0 + high) * advantages
    is_clipped = clipped < unclipped
    loss = -torch.minimum(unclipped, clipped)
    return loss, {"clipped": is_clipped, "clip_fraction": is_clipped.float().mean()}


def compute_grpo_no_clip_loss(
    advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor
) -> torch.Tensor:
    """Unclipped importance-weighted loss: -(pi / pi_old) * A. (batch, 1), (batch, seq) x2 -> (batch, seq)."""
    return -torch.exp(policy_log_probs - old_log_probs) * advantages


def sequence_log_ratio(
    policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """GSPO's ``log s_i = (1 / |o_i|) sum_t (log pi - log pi_old)`` over response tokens: the MEAN token log-ratio.

    (batch, seq) x3 -> (batch, 1). Masked positions never enter, neither the sum nor the count; a response
    of zero tokens has log s = 0 (s = 1).
    """
    difference = torch.where(response_mask.bool(), policy_log_probs - old_log_probs, torch.zeros_like(policy_log_probs))
    tokens = response_mask.sum(dim=-1, keepdim=True).clamp(min=1).to(difference.dtype)
    return difference.sum(dim=-1, keepdim=True) / tokens


def compute_gspo_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO (arXiv 2507.18071): -min(s_i * A_i, clip(s_i, 1 - clip_low, 1 + clip_high) * A_i) for sequence i,
    s_i = exp(mean_t log(pi / pi_old)) (`sequence_log_ratio`), the same value on each of its tokens.

    (batch, 1), (batch, seq) x3 -> (batch, seq); the per-sequence mean (loss_aggregation sequence_mean) gives
    back the sequence's own term, as in the paper. metadata: `clipped` (batch, seq) bool (a whole sequence at
    once) and `sequence_ratio` (batch, 1).
    """
    ratio = torch.exp(sequence_log_ratio(policy_log_probs, old_log_probs, response_mask))
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    is_clipped = (clipped < unclipped).expand_as(policy_log_probs)
    loss = -torch.minimum(unclipped, clipped).expand_as(policy_log_probs)
    return loss, {"clipped": is_clipped, "sequence_ratio": ratio.detach()}


def compute_cispo_loss(
    advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO (MiniMax-M1, arXiv 2506.13585): -sg(clip(ratio, 1 - clip_low, 1 + clip_high)) * A * log pi per token.

    The importance weight is clipped and carries no gradient, so a token whose ratio is clipped still gets
    the REINFORCE gradient -w * A * grad log pi (GRPO-Clip would give it none). (batch, 1), (batch, seq) x2
    -> (batch, seq). metadata: `clipped` (batch, seq) bool, True where the weight was clipped.
    """
    ratio = torch.exp(policy_log_probs.detach() - old_log_probs)
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return -weight * advantages * policy_log_probs, {"clipped": weight != ratio}


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
    *,
    cliprange_high: float | None = None,
    response_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Dispatch to the loss named by `loss_type`; raises ValueError naming a missing input or unknown type.

    `cliprange` is the lower clip range eps_low, `cliprange_high` the upper (default: `cliprange`); GSPO also
    needs `response_mask` (batch, seq) bool for its per-sequence mean.
    """
    if loss_type == "no_baseline":
        _require("raw_rewards", raw_rewards, loss_type)
        return compute_naive_policy_gradient_loss(raw_rewards, policy_log_probs), {}
    if loss_type == "reinforce_with_baseline":
        _require("advantages", advantages, loss_type)
        return compute_naive_policy_gradient_loss(advantages, policy_log_probs), {}
    if loss_type == "grpo_no_clip":
        _require("advantages", advantages, loss_type)
        _require("old_log_probs", old_log_probs, loss_type)
        return compute_grpo_no_clip_loss(advantages, policy_log_probs, old_log_probs), {}
    if loss_type not in ("grpo_clip", "gspo", "cispo"):
        raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {', '.join(LOSS_TYPES)}")
    _require("advantages", advantages, loss_type)
    _require("old_log_probs", old_log_probs, loss_type)
    _require("cliprange", cliprange, loss_type)
    high = cliprange if cliprange_high is None else cliprange_high
    if loss_type == "grpo_clip":
        return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange, high)
    if loss_type == "gspo":
        _require("response_mask", response_mask, loss_type)
        return compute_gspo_loss(advantages, policy_log_probs, old_log_probs, response_mask, cliprange, high)
    return compute_cispo_loss(advantages, policy_log_probs, old_log_probs, cliprange, high)


ImportanceReweighting = Literal["none", "noclip", "grpo", "gspo"]
IMPORTANCE_REWEIGHTINGS: tuple[str, ...] = ("none", "noclip", "grpo", "gspo")
# The 2026 handout's importance reweighting methods as the loss types above
LOSS_TYPE_OF_REWEIGHTING: dict[str, LossType] = {
    "none": "reinforce_with_baseline",
    "noclip": "grpo_no_clip",
    "grpo": "grpo_clip",
    "gspo": "gspo",
}


def reweighted_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    importance_reweighting_method: ImportanceReweighting = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    response_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The 2026 handout's per-token policy-gradient loss, named by its importance reweighting (the loss types of
    `LOSS_TYPE_OF_REWEIGHTING`): none: -A log pi; noclip: -w A per token, w = pi / pi_old; grpo: PPO's clipped
    -min(w A, clip(w, 1 - eps, 1 + eps) A); gspo: the same on the sequence's geometric-mean ratio
    s = exp(mean_t log w) over `response_mask`'s tokens (in log space).

    raw_rewards_or_advantages: (batch,) or (batch, 1); policy_log_probs, old_log_probs, response_mask:
    (batch, seq). Returns the per-token loss (batch, seq) and metadata: `clipped` (batch, seq) bool and
    `clip_fraction`, its mean over response tokens (over every position without `response_mask`); both all-False /
    0 for none and noclip.
    """
    if importance_reweighting_method not in LOSS_TYPE_OF_REWEIGHTING:
        raise ValueError(
            f"unknown importance_reweighting_method {importance_reweighting_method!r}; expected one of "
            f"{', '.join(IMPORTANCE_REWEIGHTINGS)}"
        )
    needs = {
        "old_log_probs": (old_log_probs, importance_reweighting_method != "none"),
        "cliprange": (cliprange, importance_reweighting_method in ("grpo", "gspo")),
        "response_mask": (response_mask, importance_reweighting_method == "gspo"),
    }
    for name, (value, needed) in needs.items():
        if needed and value is None:
            raise ValueError(f"importance_reweighting_method={importance_reweighting_method!r} requires {name}")
    weights = raw_rewards_or_advantages.reshape(-1, 1)
    loss, metadata = compute_policy_gradient_loss(
        policy_log_probs,
        LOSS_TYPE_OF_REWEIGHTING[importance_reweighting_method],
        advantages=weights,
        old_log_probs=old_log_probs,
        cliprange=cliprange,
        response_mask=response_mask,
    )
    clipped = metadata.get("clipped", torch.zeros_like(loss, dtype=torch.bool))
    mask = torch.ones_like(clipped) if response_mask is None else response_mask.bool()
    fraction = (clipped & mask).sum() / mask.sum().clamp(min=1)
    return loss, metadata | {"clipped": clipped, "clip_fraction": fraction.to(loss.dtype)}
