"""Per-token log-probabilities and entropies of a causal LM's next-token distribution."""

import torch
from torch import nn

from alignment.models.transformer_lm import TransformerLM


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim.  (..., vocab) -> (...).

    H = -sum_v p_v log p_v with log p from log_softmax, which subtracts the max logit before the logsumexp:
    the shortcut logsumexp(z) - sum_v p_v z_v cancels catastrophically in float32 once ``|z|`` is ~1e4.
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


class _LabelLogProbsAndEntropy(torch.autograd.Function):
    """log softmax(z)[label] (differentiable) and the entropy of softmax(z) (a metric), from one exp pass."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        work = logits.to(torch.promote_types(logits.dtype, torch.float32))
        shifted = work - work.max(dim=-1, keepdim=True).values  # <= 0: exp cannot overflow
        probs = shifted.exp()
        total = probs.sum(dim=-1, keepdim=True)  # in [1, vocab]
        log_total = total.log()
        chosen = shifted.gather(-1, labels.unsqueeze(-1)) - log_total
        probs /= total
        # H = log(total) - sum_v p_v * shifted_v: both terms are O(log vocab) after the shift, so nothing
        # cancels; -inf logits (p = 0) are clamped to the most negative float so they add 0, not NaN
        shifted.clamp_(min=torch.finfo(shifted.dtype).min)
        entropy = log_total.squeeze(-1) - (probs.unsqueeze(-2) @ shifted.unsqueeze(-1)).flatten()
        ctx.save_for_backward(probs, labels)
        ctx.logits_dtype = logits.dtype
        ctx.mark_non_differentiable(entropy)
        return chosen.squeeze(-1), entropy

    @staticmethod
    def backward(ctx, grad_chosen: torch.Tensor, _: torch.Tensor) -> tuple[torch.Tensor, None]:
        probs, labels = ctx.saved_tensors
        grad = probs * -grad_chosen.unsqueeze(-1)  # d/dz_v of z_label - logsumexp(z) is onehot_v - p_v
        grad.scatter_add_(-1, labels.unsqueeze(-1), grad_chosen.unsqueeze(-1))
        return grad.to(ctx.logits_dtype), None


def label_log_probs_and_entropy(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(log softmax(logits)[label], entropy of softmax(logits)), at least float32, only the first differentiable.

    logits: (tokens, vocab); labels: (tokens,) -> (tokens,), (tokens,). Equals log_probs_of_labels and
    compute_entropy (tested to float tolerance, gradient included) in one pass over the logits instead of
    three plus their backward: the largest tensors of a training step at a 49k-152k vocabulary.
    """
    return _LabelLogProbsAndEntropy.apply(logits, labels)


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
    zeros = torch.zeros(labels.shape, dtype=torch.float32, device=labels.device)
    if not return_token_entropy:
        return {"log_probs": zeros.masked_scatter(response_mask, log_probs_of_labels(logits, labels[response_mask]))}
    log_probs, entropy = label_log_probs_and_entropy(logits, labels[response_mask])
    return {
        "log_probs": zeros.masked_scatter(response_mask, log_probs),
        "token_entropy": zeros.masked_scatter(response_mask, entropy),
    }
