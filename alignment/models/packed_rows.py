"""Rows packed end to end into one sequence, each attending causally to itself alone: a forward without padding.

A right-padded microbatch runs every row to the longest one's length, and a left-padded one (or any batch with a
padding mask) makes attention take a mask, which keeps scaled_dot_product_attention off its flash kernel. Packed,
each row contributes only the tokens that matter (its real tokens up to its last scored position), rotary positions
restart at 0 for each row, and attention runs per row with no mask at all:

- on CUDA in bfloat16 / float16, torch's variable-length flash attention (`torch.nn.attention.varlen`, causal by
  `window_size` or, in earlier releases, `is_causal`; grouped key/value heads only where it takes `enable_gqa`, as
  torch 2.12's does, since copying them would cost memory the plan does not count), one kernel for every row;
- otherwise scaled_dot_product_attention once per row with `is_causal` (the flash kernel on a GPU in bfloat16 /
  float16, and on the CPU; on a GPU in float32, the memory-efficient kernel, key/value heads copied to their query
  heads, since it takes no grouped heads and the math kernel would keep every attention matrix).

Either is exact attention over each row alone, so log-probs and gradients equal the padded forward's (tested in
float64). Our TransformerLM takes `Segments` in place of a mask; a transformers Llama / Qwen2 / Qwen3 / OLMo 2 takes
them through its attention function (`use_packed_attention`, at loading, switches an sdpa model to `sdpa_packed`, which
computes every call without segments exactly as before: sdpa, or sdpa_gqa on the CPU), with a padding mask of ones
so that transformers builds no mask.
"""

import inspect
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "sdpa_packed"  # the transformers attention implementation that takes segments
SEGMENTS = "packed_segments"  # the keyword the segments travel under, through the model to each attention call
# transformers architectures whose attention calls receive that keyword
PACKABLE = ("llama", "qwen2", "qwen3", "olmo2")


@dataclass(frozen=True)
class Segments:
    """Where each packed row starts and ends: `bounds` on the host, (rows + 1,) starting at 0, and the same as
    int32 `cu_seqlens` on the tokens' device (for the varlen kernel)."""

    bounds: tuple[int, ...]
    cu_seqlens: torch.Tensor

    @property
    def longest(self) -> int:
        return max(b - a for a, b in zip(self.bounds, self.bounds[1:]))


@dataclass(frozen=True)
class PackedRows:
    """A (batch, seq) batch's kept tokens as one sequence: ids and positions (1, tokens), the segments, and `at`
    (batch, seq), each kept token's index in the pack (-1 where not kept)."""

    ids: torch.Tensor
    positions: torch.Tensor
    segments: Segments
    at: torch.Tensor


def pack_rows(input_ids: torch.Tensor, keep: torch.Tensor) -> PackedRows | None:
    """Pack the True tokens of `keep` (batch, seq) bool, row after row; None unless each row's kept tokens are one
    contiguous run and some row keeps any. Rows keeping nothing are left out."""
    counts = keep.sum(dim=1)
    first = keep.float().argmax(dim=1)
    last = keep.shape[1] - 1 - keep.flip(1).float().argmax(dim=1)
    used = counts > 0
    if not used.any() or not bool((last - first + 1 == counts)[used].all()):
        return None
    flat = keep.flatten().nonzero().flatten()  # row-major: rows in order, each row's tokens in order
    at = torch.full(keep.shape, -1, dtype=torch.long, device=keep.device)
    at.view(-1)[flat] = torch.arange(len(flat), device=keep.device)
    positions = (keep.long().cumsum(dim=1) - 1).flatten()[flat]
    bounds = (0, *torch.cumsum(counts[used], 0).tolist())
    cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=keep.device)
    return PackedRows(input_ids.flatten()[flat][None], positions[None], Segments(bounds, cu_seqlens), at)


def segment_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    segments: Segments,
    scale: float | None = None,
    dropout: float = 0.0,
) -> torch.Tensor:
    """Causal attention within each segment of a packed sequence.

    query (1, heads, tokens, head_dim); key, value (1, kv_heads, tokens, head_dim), kv_heads dividing heads ->
    (1, heads, tokens, head_dim).
    """
    varlen = _varlen_kernel()
    grouped = key.shape[1] != query.shape[1]
    if (
        varlen is not None
        and (not grouped or "enable_gqa" in varlen[1])  # an older kernel would need the key/value heads copied
        and query.is_cuda
        and query.dtype in (torch.float16, torch.bfloat16)
        and dropout == 0.0
        and query.shape[-1] % 8 == 0
        and query.shape[-1] <= 256
    ):
        return _varlen_attention(varlen, query, key, value, segments, scale)
    if grouped and query.is_cuda and query.dtype == torch.float32:
        # CUDA's flash kernel takes no float32, and its memory-efficient one no grouped heads: grouped float32 would
        # fall to the math kernel, which keeps every (tokens x tokens) attention matrix for backward
        key = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)
        value = value.repeat_interleave(query.shape[1] // value.shape[1], dim=1)
        grouped = False
    parts = [
        F.scaled_dot_product_attention(
            query[:, :, a:b],
            key[:, :, a:b],
            value[:, :, a:b],
            dropout_p=dropout,
            is_causal=True,
            scale=scale,
            enable_gqa=grouped,
        )
        for a, b in zip(segments.bounds, segments.bounds[1:])
    ]
    return torch.cat(parts, dim=2)


@cache
def _varlen_kernel() -> tuple[object, frozenset[str]] | None:
    """torch's varlen_attn and its keyword names, when this torch has a form of it that does causal attention."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    names = frozenset(inspect.signature(varlen_attn).parameters)
    if not ({"window_size", "is_causal"} & names) or "scale" not in names:
        return None
    return varlen_attn, names


def _varlen_attention(
    kernel: tuple[object, frozenset[str]],
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    segments: Segments,
    scale: float | None,
) -> torch.Tensor:
    """segment_attention by torch's varlen flash kernel (tokens-major layout, one call for every segment)."""
    varlen_attn, names = kernel
    options: dict[str, object] = {"scale": scale}
    options |= {"window_size": (-1, 0)} if "window_size" in names else {"is_causal": True}
    if key.shape[1] != query.shape[1]:
        options["enable_gqa"] = True
    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))  # (tokens, heads, head_dim)
    cu, longest = segments.cu_seqlens, segments.longest
    out = varlen_attn(q, k, v, cu, cu, longest, longest, **options)  # type: ignore[operator]
    return out.transpose(0, 1)[None]


def packed_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract (query (batch, heads, q, dim) -> ((batch, q, heads, dim), None)):
    with segments, segment_attention over the packed batch of one; without, sdpa_gqa (itself sdpa off the CPU)."""
    from alignment.models.gqa_attention import sdpa_gqa_attention

    segments = kwargs.pop(SEGMENTS, None)
    if segments is None:
        return sdpa_gqa_attention(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    out = segment_attention(query, key, value, segments, scaling, dropout)
    return out.transpose(1, 2).contiguous(), None


def use_packed_attention(model: nn.Module) -> bool:
    """Switch a transformers Llama / Qwen2 / Qwen3 / OLMo 2 on sdpa (or sdpa_gqa) attention with no sliding window to
    `sdpa_packed`, whose calls without segments compute as before (sdpa_gqa on the CPU, sdpa elsewhere); returns
    whether it did. Models loaded by alignment.models.loading get it; a model built otherwise scores padded rows
    until switched."""
    from alignment.models.gqa_attention import NAME as GQA_NAME

    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in PACKABLE or not hasattr(model, "set_attn_implementation"):
        return False
    windowed = "sliding_attention" in (getattr(config, "layer_types", None) or ())
    if windowed or getattr(config, "use_sliding_window", False):
        return False
    if config._attn_implementation not in ("sdpa", GQA_NAME, NAME):  # type: ignore[union-attr]
        return False
    model.set_attn_implementation(NAME)
    return True


# registered on import, so that a model switched to it works in any process that imports the library
AttentionInterface.register(NAME, packed_attention_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)
