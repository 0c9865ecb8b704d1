"""Response log-probs with each distinct prompt run through the model once, however many responses it has.

GRPO scores group_size responses per prompt. Under causal attention a prompt's hidden states do not depend on
what follows it, so the forward pass over the prompt is the same for every response in its group. Here it runs
once per distinct prompt; its keys and values are then indexed out to the rows that share it and the responses
run on top of them. Autograd sums the group's gradients into that one prompt pass: the result equals scoring
every row separately (tested to float tolerance), at the cost of prompt tokens x distinct prompts instead of
x rows. On the CPU demo (~45-token prompts, 32-token responses, groups of 4) that is 44% fewer tokens through
the model and a 24% shorter train phase (docs/benchmarks.md).

Rows are in RolloutBatch layout: right-padded prompt + response, labels = input_ids shifted left, and
response_mask True on a contiguous run of label positions. The prompt fed once is the row up to the position
predicting the first response token; that position itself and the response form the per-row suffix.
"""

import torch
from torch import nn

from alignment.logprobs import get_response_log_probs, label_log_probs_and_entropy, log_probs_of_labels, output_head
from alignment.transformer_lm import TransformerLM


def can_share_prompts(model: nn.Module, response_mask: torch.Tensor) -> bool:
    """Sharing needs our TransformerLM or a transformers model that returns a KV cache (not under gradient
    checkpointing, which disables the cache), and every row to have a response and a non-empty prompt."""
    if not isinstance(model, TransformerLM) and (
        not hasattr(model, "base_model") or getattr(model, "is_gradient_checkpointing", False)
    ):
        return False
    has_response = response_mask.any(dim=1)
    return bool(has_response.all()) and bool((response_mask.float().argmax(dim=1) > 0).all())


def prompt_groups(input_ids: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct prompts and which one each row continues, read from the tokens themselves.

    A row's prompt is its tokens before the first response label. Returns (prompts, width) right-padded with
    -1 (never a token id) and (batch,) indices into them.
    """
    start = response_mask.float().argmax(dim=1)
    columns = torch.arange(input_ids.shape[1], device=input_ids.device)
    prefixes = torch.where(columns < start[:, None], input_ids, -1)[:, : max(int(start.max()), 1)]
    return torch.unique(prefixes, dim=0, return_inverse=True)


def shared_prompt_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    response_mask: torch.Tensor,
    return_token_entropy: bool = False,
) -> dict[str, torch.Tensor]:
    """Same contract as get_response_log_probs(..., response_mask=...): (batch, seq) float32, 0 off the response.

    Falls back to scoring every row in full when `can_share_prompts` says no or no prompt repeats.
    """
    batch, seq = input_ids.shape
    device = input_ids.device
    if not can_share_prompts(model, response_mask):
        return get_response_log_probs(model, input_ids, labels, return_token_entropy, response_mask=response_mask)
    unique, inverse = prompt_groups(input_ids, response_mask)  # (prompts, width), (batch,)
    if len(unique) == batch:
        return get_response_log_probs(model, input_ids, labels, return_token_entropy, response_mask=response_mask)

    # Distinct prompts, left-padded so that every one ends at the same column as the cache the suffixes extend.
    prompt_length = (unique >= 0).sum(dim=1)  # (prompts,)
    width = unique.shape[1]
    source = torch.arange(width, device=device) - (width - prompt_length)[:, None]  # (prompts, width); < 0 is padding
    prompt_mask = source >= 0
    prompt_ids = unique.gather(1, source.clamp(min=0)).masked_fill(~prompt_mask, 0)
    start, length = prompt_length[inverse], response_mask.sum(dim=1)  # (batch,) each
    # Per-row suffix, from the column predicting the first response token; labels are the response.
    steps = torch.arange(int(length.max()), device=device)
    position = start[:, None] + steps  # (batch, suffix) column in the row = position id
    valid = steps < length[:, None]
    gather_at = position.clamp(max=seq - 1)
    suffix_ids = input_ids.gather(1, gather_at)
    if isinstance(model, TransformerLM):
        _, cache = model.forward_with_cache(prompt_ids, prompt_mask, positions=source.clamp(min=0))
        hidden, _ = model.forward_with_cache(suffix_ids, valid, positions=position, cache=cache.select(inverse))
    else:
        cache = model.base_model(
            input_ids=prompt_ids, attention_mask=prompt_mask.long(), position_ids=source.clamp(min=0), use_cache=True
        ).past_key_values
        cache.reorder_cache(inverse)  # (prompts, ...) -> (batch, ...) by index_select, so gradients flow back
        hidden = model.base_model(
            input_ids=suffix_ids, attention_mask=torch.cat([prompt_mask[inverse], valid], dim=1).long(),
            position_ids=position, past_key_values=cache, use_cache=True,
        ).last_hidden_state
    logits = output_head(model)(hidden[valid])  # (response tokens, vocab)
    rows = torch.arange(batch, device=device)[:, None].expand_as(position)[valid]
    where = (rows, position[valid])
    zeros = torch.zeros((batch, seq), dtype=torch.float32, device=device)
    targets = labels.gather(1, gather_at)[valid]
    if not return_token_entropy:
        return {"log_probs": zeros.index_put(where, log_probs_of_labels(logits, targets))}
    log_probs, entropy = label_log_probs_and_entropy(logits, targets)
    return {"log_probs": zeros.index_put(where, log_probs), "token_entropy": zeros.index_put(where, entropy)}
