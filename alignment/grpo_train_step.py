"""One GRPO optimizer step from graded text: the 2026 CS336 handout's `grpo_train_step`.

Rewards (`compute_rollout_rewards`), group advantages (`group_advantages`: baseline x advantage normalizer), the
per-token loss by importance reweighting (`reweighted_policy_gradient_loss`) and its aggregation (sequence or
constant, alignment/grpo_step.py), accumulated over microbatches, then one clipped optimizer step. Every variant of
the handout (GRPO, GRPO_constant, Dr_GRPO, RFT, MaxRL, off-policy noclip / grpo / gspo) is a choice of arguments.

A row of advantage exactly 0 adds exactly 0 to the gradient under every reweighting (each multiplies every token
term by the row's advantage), so such rows never pass through the model: the kept rows are cut into microbatches of
the size the caller asked for (rollouts / gradient_accumulation_steps), so the accumulation steps shrink with them,
while the aggregation's denominators stay the whole step's. The update is the unpruned one up to rounding
(tests/test_grpo_train_step.py compares the two in float64). RFT, whose wrong answers all have advantage 0, and
GRPO's groups whose rewards all agree gain the most.
"""

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from alignment.advantages import AdvantageNormalizer, Baseline, compute_rollout_rewards, group_advantages
from alignment.grpo.scoring import rows_needing_backward
from alignment.grpo_step import LossNormalization, aggregate_token_loss
from alignment.logprobs import get_response_log_probs
from alignment.losses import ImportanceReweighting, reweighted_policy_gradient_loss
from alignment.pass_at_k import pass_at_k
from alignment.sft import tokenize_prompt_and_output


def group_pass_at_k(correct: torch.Tensor, group_size: int) -> dict[str, float]:
    """pass@k for k = 1..group_size: the chance that at least one of k of a group's samples is correct, estimated
    without bias from its `group_size` samples (alignment/pass_at_k.py) and averaged over groups.

    correct: (rollout_batch_size,) bool, consecutive runs of `group_size` samples of one prompt."""
    counts = correct.view(-1, group_size).sum(dim=1).tolist()
    return {
        f"pass@{k}": sum(pass_at_k(group_size, int(c), k) for c in counts) / len(counts)
        for k in range(1, group_size + 1)
    }


def grpo_train_step(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    gradient_accumulation_steps: int,
    max_grad_norm: float | None,
    reward_fn: Callable[[str, str], dict[str, float]],
    repeated_prompts: Sequence[str],
    rollout_responses: Sequence[str],
    repeated_ground_truths: Sequence[str],
    group_size: int,
    baseline: Baseline = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: AdvantageNormalizer = "std",
    importance_reweighting_method: ImportanceReweighting = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    loss_normalization: LossNormalization = "sequence",
    normalization_constant: float | None = None,
    *,
    skip_zero_advantage: bool = True,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Grade, normalize, accumulate the loss's gradient over microbatches, clip to `max_grad_norm` (None: no
    clipping), take one optimizer step and set every gradient to None.

    repeated_prompts, rollout_responses, repeated_ground_truths: rollout_batch_size each, `group_size` consecutive
    samples per prompt; `gradient_accumulation_steps` must divide rollout_batch_size. old_log_probs: (batch, seq) as
    `tokenize_prompt_and_output` lays the batch out (required unless `importance_reweighting_method` is none).
    `normalization_constant`: the constant aggregation's Z, the whole step's divisor (B x G x L in the handout).
    `skip_zero_advantage=False` runs every row through the model (the unpruned step, for comparison).

    Returns the step's loss (the sum of the microbatches' shares: the whole batch's aggregated loss) and metadata:
    loss, grad_norm (before clipping), token_entropy (mean over the response tokens that passed through the
    model), reward_mean / format_reward_mean / answer_reward_mean (the train rewards), clip_fraction (over those
    response tokens), pass@1..pass@group_size (a reward of 1 counts as correct), rows_in_backward (the fraction
    of rows that passed through the model) and microbatches (the accumulation steps taken).
    """
    n = len(rollout_responses)
    if not len(repeated_prompts) == n == len(repeated_ground_truths):
        raise ValueError(
            f"repeated_prompts ({len(repeated_prompts)}), rollout_responses ({n}) and repeated_ground_truths "
            f"({len(repeated_ground_truths)}) must have the same length"
        )
    if gradient_accumulation_steps < 1 or n % gradient_accumulation_steps:
        raise ValueError(
            f"gradient_accumulation_steps ({gradient_accumulation_steps}) must be >= 1 and divide the {n} rollouts"
        )
    if loss_normalization not in ("sequence", "constant"):
        raise ValueError(f"unknown loss_normalization {loss_normalization!r}; expected sequence or constant")
    if loss_normalization == "constant" and not (normalization_constant or 0) > 0:
        raise ValueError(
            f"loss_normalization='constant' requires normalization_constant > 0, got {normalization_constant}"
        )
    raw_rewards, reward_metadata = compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)
    parameter = next(model.parameters())
    device, dtype = parameter.device, parameter.dtype if parameter.is_floating_point() else torch.float32
    # float64 for a float64 model (exact comparisons), else float32 whatever the model computes in
    precision = torch.float64 if dtype == torch.float64 else torch.float32
    advantages = group_advantages(raw_rewards.to(precision), group_size, baseline, advantage_eps, advantage_normalizer)
    batch = tokenize_prompt_and_output(repeated_prompts, rollout_responses, tokenizer, prompt_special_tokens=False)
    if old_log_probs is not None and old_log_probs.shape != batch["labels"].shape:
        raise ValueError(
            f"old_log_probs has shape {tuple(old_log_probs.shape)}; the tokenized batch's is "
            f"{tuple(batch['labels'].shape)}"
        )
    kept = (
        rows_needing_backward(advantages, None) if skip_zero_advantage else torch.ones(n, dtype=torch.bool)
    ).nonzero()[:, 0]
    micro_size = n // gradient_accumulation_steps
    # the step's sums stay on the device until the last microbatch is queued: one host sync per step
    total_loss, entropy_sum, clipped_sum = (torch.zeros((), dtype=precision, device=device) for _ in range(3))
    tokens, microbatches = 0, 0
    for start in range(0, len(kept), micro_size):
        rows = kept[start : start + micro_size]
        mask = batch["response_mask"][rows]
        width = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else 1  # columns up to the last response token
        mask = mask[:, :width].to(device)
        out = get_response_log_probs(
            model,
            batch["input_ids"][rows, :width].to(device),
            batch["labels"][rows, :width].to(device),
            return_token_entropy=True,
            response_mask=mask,
        )
        token_loss, loss_metadata = reweighted_policy_gradient_loss(
            advantages[rows].to(device=device, dtype=out["log_probs"].dtype),
            out["log_probs"],
            importance_reweighting_method,
            None
            if old_log_probs is None
            else old_log_probs[rows, :width].to(device=device, dtype=out["log_probs"].dtype),
            cliprange,
            mask,
        )
        if loss_normalization == "sequence":  # this microbatch's rows' share of the mean over all n rows
            loss = aggregate_token_loss(token_loss, mask, "sequence_mean", n, 0)
        else:  # the sum over every token / Z, whichever microbatch the token is in
            loss = aggregate_token_loss(token_loss, mask, "constant", 1, 0, normalization_constant)
        loss.backward()
        total_loss += loss.detach().to(precision)
        entropy_sum += (out["token_entropy"].detach() * mask).sum().to(precision)
        clipped_sum += (loss_metadata["clipped"] & mask).sum().to(precision)
        tokens += int(batch["response_mask"][rows].sum())  # a host tensor: no sync
        microbatches += 1
    parameters = [p for p in model.parameters() if p.grad is not None]
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, math.inf if max_grad_norm is None else max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    metadata = {
        "loss": total_loss.item(),
        "grad_norm": float(grad_norm),
        "token_entropy": entropy_sum.item() / max(tokens, 1),
        "clip_fraction": clipped_sum.item() / max(tokens, 1),
        "rows_in_backward": len(kept) / n,
        "microbatches": float(microbatches),
    }
    metadata |= reward_metadata | group_pass_at_k(raw_rewards >= 1, group_size)
    return total_loss, metadata
