"""Rollout corrections: importance weights for the gap between the rollout engine's and the trainer's probabilities.

The engine (vLLM, a tempered sampler, other kernels) and the trainer give slightly different probabilities to
the same tokens. Each correction turns the ratio pi_train / pi_rollout into a weight (without gradient) that
multiplies each token's policy-gradient loss:

- token_tis:     min(pi_train / pi_rollout, C) per token (truncated importance sampling)
- sequence_tis:  min(prod_t pi_train / pi_rollout, C) per sequence: the sequence's own likelihood ratio
- token_mask:    1 where the token's ratio lies in [1/C, C], else 0 (the token leaves the loss)
- sequence_mask: 1 where the sequence's ratio lies in [1/C, C], else 0 (the whole sequence leaves the loss)

A weight of 0 removes a term but not its place in the loss's denominators: the other tokens keep their scale.
Log-probs (batch, seq); masks (batch, seq) bool, True on response tokens. Ratios are computed in log space.
"""

import math
from typing import Literal

import torch

from alignment.kl import k3

RolloutCorrection = Literal["token_tis", "sequence_tis", "token_mask", "sequence_mask"]
SEQUENCE_LEVEL: tuple[str, ...] = ("sequence_tis", "sequence_mask")


def truncated_importance_weights(
    train_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, cap: float
) -> torch.Tensor:
    """Truncated importance sampling (TIS): min(pi_train / pi_rollout, cap) per token, with no gradient.

    (batch, seq) x2 -> (batch, seq).
    """
    return torch.exp(train_log_probs.detach() - rollout_log_probs).clamp(max=cap)


def sequence_log_ratios(
    train_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """log prod_t pi_train / pi_rollout over each sequence's response tokens, no gradient. -> (batch, 1)."""
    difference = train_log_probs.detach() - rollout_log_probs
    return torch.where(response_mask.bool(), difference, torch.zeros_like(difference)).sum(dim=-1, keepdim=True)


def sequence_truncated_importance_weights(
    train_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor, cap: float
) -> torch.Tensor:
    """min(prod_t pi_train / pi_rollout, cap) per sequence, no gradient. (batch, seq) x3 -> (batch, 1)."""
    return torch.exp(sequence_log_ratios(train_log_probs, rollout_log_probs, response_mask).clamp(max=math.log(cap)))


def in_bounds(log_ratio: torch.Tensor, cap: float) -> torch.Tensor:
    """1.0 where 1/cap <= ratio <= cap (edges included), else 0.0; any shape."""
    bound = math.log(cap)
    return ((log_ratio >= -bound) & (log_ratio <= bound)).to(log_ratio.dtype)


def rollout_correction_weights(
    kind: RolloutCorrection,
    train_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    cap: float,
) -> torch.Tensor:
    """The weights of correction `kind` with bound `cap` (C > 1 for the masks): (batch, seq) for token-level
    kinds, (batch, 1) for sequence-level ones; both broadcast over the token losses. No gradient."""
    if cap <= 0 or (kind in ("token_mask", "sequence_mask") and cap <= 1):
        raise ValueError(f"rollout correction {kind} needs a bound C > {1 if kind.endswith('mask') else 0}, got {cap}")
    if kind == "token_tis":
        return truncated_importance_weights(train_log_probs, rollout_log_probs, cap)
    if kind == "sequence_tis":
        return sequence_truncated_importance_weights(train_log_probs, rollout_log_probs, response_mask, cap)
    if kind == "token_mask":
        return in_bounds(train_log_probs.detach() - rollout_log_probs, cap)
    if kind == "sequence_mask":
        return in_bounds(sequence_log_ratios(train_log_probs, rollout_log_probs, response_mask), cap)
    raise ValueError(f"unknown rollout correction {kind!r}; expected one of {', '.join(RolloutCorrection.__args__)}")


def rollout_mismatch(delta: torch.Tensor) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's: delta = trainer - engine, one per response token.

    `rollout_kl_k3` estimates KL(engine || trainer) on the engine's own samples.
    """
    return {
        "rollout_logprob_diff_mean": delta.abs().mean().item(),
        "rollout_logprob_diff_max": delta.abs().max().item(),
        "rollout_kl_k3": k3(delta).mean().item(),
    }
