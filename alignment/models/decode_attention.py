"""Attention of one new token per row over a fixed-length key/value cache, grouped query heads folded into the query
axis so that no key or value is copied.

With grouped-query attention several query heads read each key/value head. transformers' sdpa expands the cache to
every query head (`repeat_kv`) whenever a mask is given, and torch's fused CUDA kernels take no mask together with
grouped heads (enable_gqa), so a masked decode step would copy the whole cache (six times over for the 1.5B model:
12 query heads, 2 key/value heads). With a single query token, the query heads of one group can instead stand as that
group's queries: (rows, kv_heads, group, head_dim) against (rows, kv_heads, length, head_dim), the same products, one
plain masked attention that reads the cache once. The static decode path (alignment/rollout/static_decoding.py)
attends this way for both the hf backend and our TransformerLM.
"""

import torch
import torch.nn.functional as F


def one_token_attention(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, scale: float | None
) -> torch.Tensor:
    """Query head h reads key/value head h // (heads / kv_heads), as in grouped-query attention.

    query: (rows, heads, 1, head_dim); keys, values: (rows, kv_heads, length, head_dim); mask: (rows, 1, 1, length)
    bool, True where a key may be attended to -> (rows, heads, 1, head_dim).
    """
    rows, heads, one, head_dim = query.shape
    if one != 1:
        raise ValueError(f"one_token_attention takes one query token per row, got {one}")
    kv_heads = keys.shape[1]
    grouped = query.view(rows, kv_heads, heads // kv_heads, head_dim)
    out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=mask, scale=scale)
    return out.view(rows, heads, 1, head_dim)
