"""One GRPO microbatch: per-token loss -> rollout correction -> aggregation over the batch -> backward."""

from typing import Literal

import torch

from alignment.losses import LossType, compute_policy_gradient_loss
from alignment.masked import masked_mean
from alignment.rollout_correction import RolloutCorrection, rollout_correction_weights

LossAggregation = Literal["sequence_mean", "token_mean", "constant"]
LossNormalization = Literal["sequence", "constant"]  # the 2026 CS336 handout's names of two of them


def aggregate_token_loss(
    token_loss: torch.Tensor,
    response_mask: torch.Tensor,
    aggregation: LossAggregation,
    batch_rows: int,
    batch_tokens: int,
    constant: float | None = None,
) -> torch.Tensor:
    """This microbatch's share of the optimizer step's loss, l_it being `token_loss` (batch, seq) on the tokens of
    `response_mask` (batch, seq) bool, and `batch_rows` / `batch_tokens` the rows and response tokens of the
    whole step (every microbatch), so that the microbatches' shares add up to the step's loss:

    - sequence_mean (the handouts, GRPO): ``sum_i (sum_t l_it / |o_i|) / batch_rows``, a row of 0 tokens adding 0
    - token_mean (DAPO, arXiv 2503.14476): sum_i sum_t l_it / batch_tokens, each token weighing the same
    - constant (Dr. GRPO, arXiv 2503.20783): sum_i sum_t l_it / constant / batch_rows

    Masked positions are never in a sum nor in a count. -> () tensor.
    """
    mask = response_mask.to(token_loss.dtype)
    summed = (token_loss * mask).sum(dim=-1)
    if aggregation == "sequence_mean":
        return (summed / mask.sum(dim=-1).clamp(min=1)).sum() / max(batch_rows, 1)
    if aggregation == "token_mean":
        return summed.sum() / max(batch_tokens, 1)
    if aggregation == "constant":
        if constant is None or not constant > 0:
            raise ValueError(f"loss aggregation constant needs a constant > 0, got {constant}")
        return summed.sum() / constant / max(batch_rows, 1)
    raise ValueError(f"unknown loss aggregation {aggregation!r}; expected sequence_mean, token_mean or constant")


def aggregate_loss_across_microbatch(
    per_token_policy_gradient_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_normalization: LossNormalization = "sequence",
    normalization_constant: float | None = None,
) -> torch.Tensor:
    """The 2026 handout's aggregation of one (micro)batch (batch, seq) under `mask` (batch, seq) -> () tensor:

    - sequence: each row's mean over its masked tokens, then the mean over rows (`aggregate_token_loss`'s
      sequence_mean with the rows given as the batch's)
    - constant: the sum over every masked token / `normalization_constant` Z (Dr. GRPO's Z = B x G x L, the whole
      step's divisor: `aggregate_token_loss`'s constant with Z as its constant and one row).
    """
    if loss_normalization == "sequence":
        return aggregate_token_loss(per_token_policy_gradient_loss, mask, "sequence_mean", mask.shape[0], 0)
    if loss_normalization == "constant":
        if normalization_constant is None:
            raise ValueError("loss_normalization='constant' requires normalization_constant")
        return aggregate_token_loss(per_token_policy_gradient_loss, mask, "constant", 1, 0, normalization_constant)
    raise ValueError(f"unknown loss_normalization {loss_normalization!r}; expected sequence or constant")


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
    *,
    cliprange_high: float | None = None,
    loss_aggregation: LossAggregation | None = None,
    rollout_correction: RolloutCorrection = "token_tis",
    batch_rows: int | None = None,
    batch_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Compute the microbatch loss, call backward() on it, and return it with metadata.

    policy_log_probs, response_mask, old_log_probs: (batch, seq); raw_rewards / advantages: (batch, 1).
    `loss_aggregation` (see `aggregate_token_loss`) defaults to the handouts' choice: the per-sequence mean, or
    the sum divided by `normalize_constant` when that is given (Dr. GRPO). Without `batch_rows` /
    `batch_tokens` (the optimizer step's totals), this microbatch's are taken times `gradient_accumulation_steps`
    (the handouts' convention: equal microbatches, their losses averaged).

    With `tis_cap` C, each token's loss is weighted by a `rollout_correction` (alignment/rollout_correction.py)
    of pi_train / pi_rollout, pi_train being the trainer's log-prob of the policy that sampled: `old_log_probs`
    when given, else `policy_log_probs` (on-policy, they are the same policy); `rollout_log_probs` (batch,
    seq) are the engine's log-probs of the same tokens.
    """
    token_loss, loss_meta = compute_policy_gradient_loss(
        policy_log_probs,
        loss_type,
        raw_rewards,
        advantages,
        old_log_probs,
        cliprange,
        cliprange_high=cliprange_high,
        response_mask=response_mask,
    )
    weights = None
    if tis_cap is not None:
        if rollout_log_probs is None:
            raise ValueError("tis_cap requires rollout_log_probs, which was None")
        behaviour = policy_log_probs if old_log_probs is None else old_log_probs
        weights = rollout_correction_weights(rollout_correction, behaviour, rollout_log_probs, response_mask, tis_cap)
        token_loss = token_loss * weights
    aggregation = loss_aggregation or ("sequence_mean" if normalize_constant is None else "constant")
    if batch_rows is None:
        batch_rows = response_mask.shape[0] * gradient_accumulation_steps
    if batch_tokens is None:
        batch_tokens = int(response_mask.sum()) * gradient_accumulation_steps
    loss = aggregate_token_loss(token_loss, response_mask, aggregation, batch_rows, batch_tokens, normalize_constant)
    loss.backward()
    metadata: dict[str, torch.Tensor] = {"unscaled_loss": loss.detach() * gradient_accumulation_steps}
    if "clipped" in loss_meta:
        metadata["clip_fraction"] = masked_mean(loss_meta["clipped"].float(), response_mask).detach()
    if weights is not None:
        weights = weights.expand_as(token_loss)
        metadata["tis_weight_mean"] = masked_mean(weights, response_mask).detach()
        metadata["rollout_masked_fraction"] = masked_mean((weights == 0).float(), response_mask).detach()
    return loss, metadata
