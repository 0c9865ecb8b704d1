"""One GRPO microbatch: per-token loss -> per-sequence aggregation -> batch mean -> backward."""

import torch

from alignment.losses import LossType, compute_policy_gradient_loss
from alignment.masked import masked_mean, masked_normalize


def grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: LossType,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    normalize_constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Compute the microbatch loss, call backward() on it, and return it with metadata.

    policy_log_probs, response_mask, old_log_probs: (batch, seq); raw_rewards / advantages: (batch, 1).
    Each sequence's per-token loss is averaged over its response tokens (masked_mean, the handouts'
    default) or, when `normalize_constant` is given, summed and divided by it (Dr. GRPO: e.g. the maximum
    generation length, so long and short answers weigh tokens alike). The batch mean is divided by
    `gradient_accumulation_steps` so that accumulated gradients average over microbatches.
    """
    token_loss, loss_meta = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange
    )
    if normalize_constant is None:
        # masked_mean, except that a response of zero tokens adds 0 to the loss and its gradient, not 0/0 = NaN
        tokens = response_mask.sum(dim=-1).clamp(min=1).to(token_loss.dtype)
        per_sequence = (token_loss * response_mask.to(token_loss.dtype)).sum(dim=-1) / tokens
    else:
        per_sequence = masked_normalize(token_loss, response_mask, dim=-1, normalize_constant=normalize_constant)
    loss = per_sequence.mean() / gradient_accumulation_steps
    loss.backward()
    metadata: dict[str, torch.Tensor] = {"unscaled_loss": loss.detach() * gradient_accumulation_steps}
    if "clipped" in loss_meta:
        metadata["clip_fraction"] = masked_mean(loss_meta["clipped"].float(), response_mask).detach()
    return loss, metadata
