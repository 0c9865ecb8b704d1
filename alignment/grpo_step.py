"""One GRPO microbatch: per-token loss -> per-sequence aggregation -> batch mean -> backward."""

import torch

from alignment.losses import LossType, compute_policy_gradient_loss, truncated_importance_weights
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
    rollout_log_probs: torch.Tensor | None = None,
    tis_cap: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Compute the microbatch loss, call backward() on it, and return it with metadata.

    policy_log_probs, response_mask, old_log_probs: (batch, seq); raw_rewards / advantages: (batch, 1).
    Each sequence's per-token loss is averaged over its response tokens (masked_mean, the handouts'
    default) or, when `normalize_constant` is given, summed and divided by it (Dr. GRPO: e.g. the maximum
    generation length, so long and short answers weigh tokens alike). The batch mean is divided by
    `gradient_accumulation_steps` so that accumulated gradients average over microbatches.

    With `tis_cap`, each token's loss is weighted by min(pi_train / pi_rollout, tis_cap) (truncated
    importance sampling), pi_train being the trainer's log-prob of the policy that sampled: `old_log_probs`
    when given, else `policy_log_probs` (on-policy, they are the same policy); `rollout_log_probs` (batch,
    seq) are the engine's log-probs of the same tokens.
    """
    token_loss, loss_meta = compute_policy_gradient_loss(
        policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange
    )
    tis_weights = None
    if tis_cap is not None:
        if rollout_log_probs is None:
            raise ValueError("tis_cap requires rollout_log_probs, which was None")
        behaviour = policy_log_probs if old_log_probs is None else old_log_probs
        tis_weights = truncated_importance_weights(behaviour, rollout_log_probs, tis_cap)
        token_loss = token_loss * tis_weights
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
    if tis_weights is not None:
        metadata["tis_weight_mean"] = masked_mean(tis_weights, response_mask).detach()
    return loss, metadata
