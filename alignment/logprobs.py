"""Per-token log-probabilities and entropies of a causal LM's next-token distribution."""

import torch
from torch import nn


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim.  (..., vocab) -> (...).

    H = -sum_v p_v log p_v with log p from log_softmax, which subtracts the max logit before the logsumexp:
    the shortcut logsumexp(z) - sum_v p_v z_v cancels catastrophically in float32 once |z| is ~1e4.
    Tokens of probability 0 (logit -inf) contribute 0 rather than 0 * -inf = NaN.
    """
    log_probs = torch.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    return -torch.where(probs > 0, probs * log_probs, 0.0).sum(dim=-1)


def log_probs_of_labels(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[label] in float32 without materializing the full log-softmax.

    logits: (batch, seq, vocab); labels: (batch, seq) -> (batch, seq).
    """
    logits = logits.float()
    chosen = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(logits, dim=-1)


def get_response_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
    attention_mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Score `labels` under `model` fed `input_ids` (labels are input_ids shifted left by one).

    Returns {"log_probs": (batch, seq)} and, when asked, {"token_entropy": (batch, seq)}, both float32.
    Right padding needs no attention mask (causal attention never looks ahead); pass one for left padding.
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    out = {"log_probs": log_probs_of_labels(logits, labels)}
    if return_token_entropy:
        with torch.no_grad():
            out["token_entropy"] = compute_entropy(logits.float())
    return out
