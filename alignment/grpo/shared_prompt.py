"""Response log-probs with each distinct prompt run through the model once, however many responses it has.

GRPO scores group_size responses per prompt. Under causal attention a prompt's hidden states do not depend on
what follows it, so the forward pass over the prompt is the same for every response in its group. Here it runs
once per distinct prompt, and every response of the group attends to its keys and values. Autograd sums the
group's gradients into that one prompt pass: the result equals scoring every row separately (tested to float
tolerance), at the cost of prompt tokens x distinct prompts instead of x rows. On the CPU demo (~45-token
prompts, 32-token responses, groups of 4) that is 44% fewer tokens through the model and a 24% shorter train
phase (docs/benchmarks/grpo_cpu.md).

Two ways to run it. Packed: one sequence per distinct prompt, the prompt followed by each of its rows'
suffixes, under a block-causal mask (a suffix sees its prompt and itself), so every weight multiplies all of a
microbatch's tokens at once; the masked-out suffix-to-suffix attention is computed and thrown away. Cached:
the prompts in one pass, then the suffixes on top of their KV cache; nothing is wasted, but each weight
multiplies two smaller blocks of tokens. Packing is used when the wasted attention is small beside the
weights' work (short responses: a CPU demo microbatch's forward and backward took 3.21 s cached, 2.63 s
packed, bench/cpu_kernels.py) and the attention takes a prepared mask (sdpa; not flash-attention).

Rows are in RolloutBatch layout: right-padded prompt + response, labels = input_ids shifted left, and
response_mask True on a contiguous run of label positions. The prompt fed once is the row up to the position
predicting the first response token; that position itself and the response form the per-row suffix.

Given a ForwardTape and the slots of the rows' positions, every model call here replays the sampler's recorded
linear-layer outputs instead of recomputing them (alignment/rollout/forward_tape.py); slots follow tokens through
each layout by the same indexing.
"""

import dataclasses
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from alignment.distributed.sharding import is_sharded, root_forward
from alignment.logprobs import get_response_log_probs, head_log_probs_and_entropy
from alignment.models.gqa_attention import NAME as GQA_NAME
from alignment.models.packed_rows import NAME as PACKED_NAME
from alignment.models.transformer_lm import TransformerLM
from alignment.rollout.forward_tape import ForwardTape


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


@dataclass(frozen=True)
class Layout:
    """A microbatch as distinct prompts plus per-row suffixes (built by shared_prompt_log_probs)."""

    unique: torch.Tensor  # (prompts, width) the distinct prompts, right-padded with -1
    prompt_length: torch.Tensor  # (prompts,)
    inverse: torch.Tensor  # (batch,) which prompt each row continues
    suffix_ids: torch.Tensor  # (batch, suffix) tokens from the column predicting the first response token
    position: torch.Tensor  # (batch, suffix) their columns in the row = position ids
    valid: torch.Tensor  # (batch, suffix) bool, False past a row's response
    prompt_slots: torch.Tensor | None = None  # (prompts, width) tape slots of the distinct prompts' tokens
    suffix_slots: torch.Tensor | None = None  # (batch, suffix) tape slots of the suffixes, -1 where not valid
    tape: ForwardTape | None = None

    def replaying(self, slots: torch.Tensor | None) -> AbstractContextManager:
        """A model call that replays the tape at `slots` (a no-op without a tape)."""
        return nullcontext() if self.tape is None or slots is None else self.tape.replaying(slots)


def shared_prompt_log_probs(
    model: nn.Module,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    response_mask: torch.Tensor,
    return_token_entropy: bool = False,
    tape: ForwardTape | None = None,
    slots: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Same contract as get_response_log_probs(..., response_mask=...): (batch, seq) float32, 0 off the response.

    Falls back to scoring every row in full when `can_share_prompts` says no or no prompt repeats, and for a policy
    sharded over processes (alignment/distributed/sharding.py: every rank must make the same calls). With `tape`
    and `slots` (batch, seq), the tape slot of each input position (ForwardTape.row_slots), the model's linear
    layers replay what the sampler computed.
    """
    if is_sharded(model):  # one decoder call per microbatch on every rank, the root's weights gathered around it
        return root_forward(
            model,
            lambda: get_response_log_probs(model, input_ids, labels, return_token_entropy, response_mask=response_mask),
        )
    batch, seq = input_ids.shape
    device = input_ids.device
    tape = tape if slots is not None else None
    unique, inverse = prompt_groups(input_ids, response_mask)  # (prompts, width), (batch,)
    if not can_share_prompts(model, response_mask) or len(unique) == batch:
        replay = nullcontext() if tape is None else tape.replaying(slots, slots[response_mask])
        with replay:
            return get_response_log_probs(model, input_ids, labels, return_token_entropy, response_mask=response_mask)

    prompt_length = (unique >= 0).sum(dim=1)  # (prompts,)
    start, length = prompt_length[inverse], response_mask.sum(dim=1)  # (batch,) each
    # Per-row suffix, from the column predicting the first response token; labels are the response.
    steps = torch.arange(int(length.max()), device=device)
    position = start[:, None] + steps  # (batch, suffix) column in the row = position id
    valid = steps < length[:, None]
    gather_at = position.clamp(max=seq - 1)
    layout = Layout(unique, prompt_length, inverse, input_ids.gather(1, gather_at), position, valid)
    if tape is not None:
        # a distinct prompt's slots are those of its first row
        rows = torch.arange(batch, device=device)
        first = torch.full((len(unique),), batch, device=device).scatter_reduce(0, inverse, rows, "amin")
        layout = dataclasses.replace(
            layout,
            prompt_slots=slots[first, : unique.shape[1]],
            suffix_slots=slots.gather(1, gather_at).masked_fill(~valid, -1),
            tape=tape,
        )
    run = packed_hidden if packing_pays(model, prompt_length, inverse, length) else cached_hidden
    hidden = run(model, layout)  # (response tokens, d_model)
    targets = labels.gather(1, gather_at)[valid]
    with layout.replaying(None if layout.suffix_slots is None else layout.suffix_slots[valid]):
        log_probs, entropy = head_log_probs_and_entropy(model, hidden, targets)  # (response tokens,) each
    rows = torch.arange(batch, device=device)[:, None].expand_as(position)[valid]
    where = (rows, position[valid])
    zeros = torch.zeros((batch, seq), dtype=log_probs.dtype, device=device)
    out = {"log_probs": zeros.index_put(where, log_probs)}
    return out | ({"token_entropy": zeros.index_put(where, entropy)} if return_token_entropy else {})


def packing_pays(model: nn.Module, prompt_length: torch.Tensor, inverse: torch.Tensor, length: torch.Tensor) -> bool:
    """Whether the packed layout's wasted attention stays under 5% of the weights' work.

    Per token, a transformer's weights cost about 24 * d_model^2 FLOPs (4 d^2 attention projections, 8 d^2 MLP,
    doubled for multiply-add) and attention 4 * d_model per key it looks at, so each masked-out key a token
    computes costs 1 / (6 * d_model) of its weight work.
    """
    if isinstance(model, TransformerLM):
        d_model = model.config.d_model
    elif model.config._attn_implementation in ("sdpa", GQA_NAME, PACKED_NAME) and "sliding_attention" not in (
        getattr(model.config, "layer_types", None) or ()  # a prepared mask would replace the window
    ):
        d_model = model.config.hidden_size
    else:
        return False
    p, n = prompt_length.double(), length.double()
    total = p.index_add(0, inverse, n)  # (prompts,) packed lengths
    computed = (total * (total + 1) / 2).sum()  # keys looked at under the causal part of the mask
    used = (p * (p + 1) / 2).sum() + (n * p[inverse] + n * (n + 1) / 2).sum()
    return bool((computed - used) / total.sum() < 0.05 * 6 * d_model)


def packed_hidden(model: nn.Module, layout: Layout) -> torch.Tensor:
    """Final hidden states of the response-predicting positions, row by row: (valid.sum(), d_model)."""
    unique, prompt_length, inverse, valid = layout.unique, layout.prompt_length, layout.inverse, layout.valid
    device, width = unique.device, unique.shape[1]
    length = valid.sum(dim=1)
    # each row's suffix starts after its prompt and the suffixes of its group's earlier rows
    earlier_in_group = (inverse[:, None] == inverse[None, :]).tril(diagonal=-1)  # (batch, batch)
    offset = prompt_length[inverse] + (earlier_in_group * length).sum(dim=1)  # (batch,)
    total = int(prompt_length.index_add(0, inverse, length).max())
    in_prompt = torch.arange(width, device=device) < prompt_length[:, None]  # (prompts, width)
    rows = torch.arange(len(inverse), device=device)[:, None].expand_as(valid)[valid]
    at = (inverse[rows], (offset[:, None] + torch.arange(valid.shape[1], device=device))[valid])

    def pack(prompt_part: torch.Tensor, suffix_part: torch.Tensor, fill: int) -> torch.Tensor:
        """(prompts, total): each prompt's row of the prompt part (fill past its length), then its rows' suffixes."""
        packed = torch.full((len(unique), total), fill, dtype=torch.long, device=device)
        packed[:, :width] = prompt_part.where(in_prompt, fill)
        packed[at] = suffix_part
        return packed

    ids = pack(unique, layout.suffix_ids[valid], 0)
    position_ids = pack(torch.arange(width, device=device).expand_as(unique), layout.position[valid], 0)
    segment = pack(torch.full_like(unique, -1), rows, -2)  # -2 padding, -1 the prompt, r >= 0 row r's suffix
    slots = None if layout.suffix_slots is None else pack(layout.prompt_slots, layout.suffix_slots[valid], -1)
    causal = torch.ones((total, total), dtype=torch.bool, device=device).tril()
    key, query = segment[:, None, :], segment[:, :, None]
    # every query sees the prompt's first token, so no row of the mask is empty (which would give NaN)
    mask = (causal & ((key == -1) | ((key == query) & (key >= 0))))[:, None]  # (prompts, 1, total, total)
    with layout.replaying(slots):
        if isinstance(model, TransformerLM):
            hidden, _ = model.forward_with_cache(ids, mask, positions=position_ids)
        else:
            hidden = model.base_model(
                input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state
    return hidden[at]


def cached_hidden(model: nn.Module, layout: Layout) -> torch.Tensor:
    """packed_hidden's result from a prompt pass and a suffix pass on the prompts' KV cache."""
    unique, prompt_length, inverse, valid = layout.unique, layout.prompt_length, layout.inverse, layout.valid
    suffix_ids, position = layout.suffix_ids, layout.position
    device, width = unique.device, unique.shape[1]
    # Distinct prompts, left-padded so that every one ends at the same column as the cache the suffixes extend.
    source = torch.arange(width, device=device) - (width - prompt_length)[:, None]  # (prompts, width); < 0 is padding
    prompt_mask = source >= 0
    prompt_ids = unique.gather(1, source.clamp(min=0)).masked_fill(~prompt_mask, 0)
    prompt_slots = None
    if layout.prompt_slots is not None:
        prompt_slots = layout.prompt_slots.gather(1, source.clamp(min=0)).masked_fill(~prompt_mask, -1)
    if isinstance(model, TransformerLM):
        with layout.replaying(prompt_slots):
            _, cache = model.forward_with_cache(prompt_ids, prompt_mask, positions=source.clamp(min=0))
        with layout.replaying(layout.suffix_slots):
            hidden, _ = model.forward_with_cache(suffix_ids, valid, positions=position, cache=cache.select(inverse))
    else:
        with layout.replaying(prompt_slots):
            cache = model.base_model(
                input_ids=prompt_ids,
                attention_mask=prompt_mask.long(),
                position_ids=source.clamp(min=0),
                use_cache=True,
            ).past_key_values
        cache.reorder_cache(inverse)  # (prompts, ...) -> (batch, ...) by index_select, so gradients flow back
        with layout.replaying(layout.suffix_slots):
            hidden = model.base_model(
                input_ids=suffix_ids,
                attention_mask=torch.cat([prompt_mask[inverse], valid], dim=1).long(),
                position_ids=position,
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state
    return hidden[valid]
