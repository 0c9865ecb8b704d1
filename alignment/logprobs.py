"""Per-token log-probabilities and entropies of a causal LM's next-token distribution."""

import torch
from torch import nn

from alignment.transformer_lm import TransformerLM


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


def output_head(model: nn.Module) -> nn.Module:
    """The LM head: the map from final hidden states to logits, for our TransformerLM or a transformers model."""
    return model.lm_head if isinstance(model, TransformerLM) else model.get_output_embeddings()


def get_response_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
    attention_mask: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Score `labels` under `model` fed `input_ids` (labels are input_ids shifted left by one).

    Returns {"log_probs": (batch, seq)} and, when asked, {"token_entropy": (batch, seq)}, both float32.
    Right padding needs no attention mask (causal attention never looks ahead); pass one for left padding.
    With `response_mask` (batch, seq), the LM head runs only where it is True and other positions hold 0:
    prompt logits are never used, and over a large vocabulary they cost a quarter of a training step.
    """
    if response_mask is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask)
        logits = logits if isinstance(logits, torch.Tensor) else logits.logits
        out = {"log_probs": log_probs_of_labels(logits, labels)}
        if return_token_entropy:
            with torch.no_grad():
                out["token_entropy"] = compute_entropy(logits.float())
        return out
    if isinstance(model, TransformerLM):
        hidden = model.forward_with_cache(input_ids, attention_mask)[0]
    else:
        hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    logits = output_head(model)(hidden[response_mask])  # (response tokens, vocab)
    log_probs = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    out = {"log_probs": log_probs.masked_scatter(response_mask, log_probs_of_labels(logits, labels[response_mask]))}
    if return_token_entropy:
        with torch.no_grad():
            entropy = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
            out["token_entropy"] = entropy.masked_scatter(response_mask, compute_entropy(logits.float()))
    return out
