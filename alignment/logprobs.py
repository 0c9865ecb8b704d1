"""Per-token log-probabilities and entropies of a causal LM's next-token distribution."""

import torch
from torch import nn
from transformers import PreTrainedModel

from alignment.models.chunked_head import fused_log_probs_and_entropy, unsupported
from alignment.models.packed_rows import NAME as PACKED_ATTENTION
from alignment.models.packed_rows import SEGMENTS, PackedRows, pack_rows, packing_rows
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
        # cancels; -inf logits (p = 0) are clamped to the most negative float so they add 0, not NaN. An
        # elementwise product, not a matmul: TF32 (--tf32) would round a float32 matmul's inputs to 10 bits.
        weighted = shifted.clamp_(min=torch.finfo(shifted.dtype).min).mul_(probs).sum(dim=-1)
        entropy = log_total.squeeze(-1) - weighted
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


def gives_hidden_states(model: nn.Module) -> bool:
    """Whether the final hidden states and the head of `model` can be had apart: our TransformerLM, or a transformers
    model with an output head (not a peft PeftModel wrapper, whose base_model returns logits)."""
    return isinstance(model, TransformerLM) or (
        isinstance(model, PreTrainedModel) and model.get_output_embeddings() is not None
    )


def head_log_probs_and_entropy(
    model: nn.Module, hidden: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of each label, entropy) under `model`'s LM head at final hidden states (tokens, d_model) ->
    (tokens,) each, at least float32, only the first differentiable. Fused with the head in chunks
    (alignment/models/chunked_head.py) when the head allows it, else from the head's whole logits."""
    head = output_head(model)
    if unsupported(head) is None:
        return fused_log_probs_and_entropy(hidden, head, labels)
    return label_log_probs_and_entropy(head(hidden), labels)


def packs_rows(model: nn.Module) -> bool:
    """Whether `model` takes packed rows: our TransformerLM, or a transformers model on `sdpa_packed` attention, where
    the process packs rows (--packed-rows)."""
    if not packing_rows():
        return False
    if isinstance(model, TransformerLM):
        return True
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == PACKED_ATTENTION


def packed_hidden_states(model: nn.Module, packed: PackedRows) -> torch.Tensor:
    """The final hidden states (1, tokens, d_model) of a packed sequence under a `model` that `packs_rows`."""
    if isinstance(model, TransformerLM):
        return model.forward_with_cache(packed.ids, positions=packed.positions, segments=packed.segments)[0]
    return model.base_model(
        input_ids=packed.ids,
        attention_mask=torch.ones_like(packed.ids),  # all real: transformers skips building a mask
        position_ids=packed.positions,
        use_cache=False,
        **{SEGMENTS: packed.segments},
    ).last_hidden_state


def final_hidden_states(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, scored: torch.Tensor
) -> torch.Tensor:
    """The final hidden states (scored.sum(), d_model) at the True positions of `scored` (batch, seq) bool.

    Rows are packed without padding (alignment/models/packed_rows.py: each row's real tokens up to its last scored
    position, positions restarted per row) when the model takes them (`packs_rows`: our TransformerLM, a loaded
    transformers model) and its layers compute as themselves (not while the forward tape replays them); otherwise
    the padded batch runs whole.
    """
    real = torch.ones_like(scored) if attention_mask is None else attention_mask.bool()
    columns = torch.arange(scored.shape[1], device=scored.device)
    last = torch.where(scored, columns, -1).amax(dim=1, keepdim=True)  # (batch, 1) each row's last scored column
    replaying = "forward" in vars(output_head(model))
    packed = None if replaying or not packs_rows(model) else pack_rows(input_ids, real & (columns <= last))
    if packed is not None:
        at = packed.at[scored]  # indexed before the forward is queued, so that its sync waits on no kernel
        return packed_hidden_states(model, packed)[0, at]
    if isinstance(model, TransformerLM):
        return model.forward_with_cache(input_ids, attention_mask)[0][scored]
    return model.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state[scored]


def get_response_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    return_token_entropy: bool = False,
    attention_mask: torch.Tensor | None = None,
    response_mask: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Score `labels` under `model` fed `input_ids` (labels are input_ids shifted left by one).

    Returns {"log_probs": (batch, seq)} and, when asked, {"token_entropy": (batch, seq)}, both float32 (float64
    for a float64 model). Right padding needs no attention mask (causal attention never looks ahead); pass one for
    left padding. With `response_mask` (batch, seq), only positions where it is True are scored and others hold 0:
    prompt logits are never used, and over a large vocabulary they cost a quarter of a training step.

    For our TransformerLM and transformers models (`gives_hidden_states`) the whole (tokens x vocab) logits never
    exist: the head and the log-softmax run in chunks of tokens (alignment/models/chunked_head.py), and the rows run
    packed, without their padding (alignment/models/packed_rows.py). Any other module is called for its logits.
    """
    if not gives_hidden_states(model):
        logits = model(input_ids=input_ids, attention_mask=attention_mask)
        logits = logits if isinstance(logits, torch.Tensor) else logits.logits
        out = {"log_probs": log_probs_of_labels(logits, labels)}
        if return_token_entropy:
            with torch.no_grad():
                out["token_entropy"] = compute_entropy(logits.float())
        return out
    scored = torch.ones_like(labels, dtype=torch.bool) if response_mask is None else response_mask.bool()
    if attention_mask is not None:  # padding is never scored (packed rows hold none of it)
        scored = scored & attention_mask.bool()
    scored_labels = labels[scored]  # before the forward is queued: boolean indexing syncs with the device
    hidden = final_hidden_states(model, input_ids, attention_mask, scored)
    log_probs, entropy = head_log_probs_and_entropy(model, hidden, scored_labels)
    zeros = torch.zeros(labels.shape, dtype=log_probs.dtype, device=labels.device)
    out = {"log_probs": zeros.masked_scatter(scored, log_probs)}
    if return_token_entropy:
        out["token_entropy"] = zeros.masked_scatter(scored, entropy)
    return out
