"""A decoder-only Transformer language model written from scratch (no transformers modeling code).

Pre-norm blocks of RMSNorm -> grouped-query causal attention with rotary position embeddings -> RMSNorm ->
SwiGLU feed-forward, then a final RMSNorm and the LM head (optionally tied to the embedding). Its layout
matches the Llama architecture, so Llama-family checkpoints (SmolLM2 among them) load into it.

`forward_with_cache` also returns a `KVCache` that a later call continues from (decoding, or responses run
against a prompt prefilled once); `forward` takes such a cache too and returns logits only. `decode_into` decodes
one token per row against fixed-length caches it writes in place (the static decode path).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from alignment.models.decode_attention import one_token_attention
from alignment.models.packed_rows import Segments, segment_attention


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    context_length: int | None = None  # the longest sequence it was trained on (A1's context_length), if known

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.context_length is not None and self.context_length < 1:
            raise ValueError(f"context_length must be >= 1, got {self.context_length}")
        if self.d_model % self.n_heads or self.n_heads % self.n_kv_heads or self.head_dim % 2:
            raise ValueError(
                f"need n_kv_heads | n_heads | d_model and an even head size; got d_model {self.d_model}, "
                f"n_heads {self.n_heads}, n_kv_heads {self.n_kv_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate channel pairs (i, i + d/2) of x by angle position * theta^(-2i/d).

    x: (batch, heads, seq, head_dim); positions: (batch, seq). The half-split pairing is Llama's.
    """
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(0, half, device=x.device, dtype=torch.float32) / half)
    angles = positions.float()[:, None, :, None] * inv_freq  # (batch, 1, seq, half)
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


@dataclass(frozen=True)
class KVCache:
    """Keys and values of the tokens seen so far, per layer, and which of them are real (not padding).

    keys[i], values[i]: (batch, n_kv_heads, past, head_dim), keys already rotated; mask: (batch, past) bool.
    A call never changes a cache; it returns a longer one built by concatenation. So a cache can sit in an
    autograd graph, and one prompt cache can serve several continuations.
    """

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    mask: torch.Tensor

    def select(self, rows: torch.Tensor) -> "KVCache":
        """The cache of batch rows `rows` ((batch',) long), in that order: drops finished rows, repeats prompts."""
        return KVCache(tuple(k[rows] for k in self.keys), tuple(v[rows] for v in self.values), self.mask[rows])

    def repeat_interleave(self, n: int) -> "KVCache":
        """Each row n times in a row: prompt i's cache becomes rows i*n .. i*n+n-1."""
        return self.select(torch.arange(self.mask.shape[0], device=self.mask.device).repeat_interleave(n))


class Attention(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.c = c
        self.q = nn.Linear(c.d_model, c.n_heads * c.head_dim, bias=False)
        self.k = nn.Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=False)
        self.v = nn.Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=False)
        self.out = nn.Linear(c.n_heads * c.head_dim, c.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | Segments,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: (batch, seq, d_model); mask: (batch, 1, seq, past + seq) bool, True where attention is allowed, or the
        Segments of rows packed into a batch of one (causal within each); past: cached (keys, values), each (batch,
        n_kv_heads, past, head_dim). Returns the output and the keys and values of past + seq."""
        b, s, _ = x.shape
        c = self.c
        q, k, v = self._project(x, positions)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        scale = 1 / math.sqrt(c.head_dim)
        if isinstance(mask, Segments):
            y = segment_attention(q, k, v, mask, scale)
        else:  # each key/value head serves n_heads / n_kv_heads query heads (GQA), without copying the cache
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
        return self.out(y.transpose(1, 2).reshape(b, s, c.n_heads * c.head_dim)), k, v

    def decode_into(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        slots: tuple[torch.Tensor, torch.Tensor],
        column: torch.Tensor,
    ) -> torch.Tensor:
        """One new token per row against a fixed-length cache. x: (batch, 1, d_model); positions: (batch, 1); mask:
        (batch, 1, 1, length) bool; slots: (keys, values), each (batch, n_kv_heads, length, head_dim), into which this
        token's key and value are written at `column` ((1,) int64) before attending over all `length` columns."""
        b = x.shape[0]
        q, k, v = self._project(x, positions)
        slots[0].index_copy_(2, column, k)
        slots[1].index_copy_(2, column, v)
        y = one_token_attention(q, slots[0], slots[1], mask, 1 / math.sqrt(self.c.head_dim))
        return self.out(y.transpose(1, 2).reshape(b, 1, self.c.n_heads * self.c.head_dim))

    def _project(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries (batch, n_heads, seq, head_dim), rotated keys and values (batch, n_kv_heads, seq, head_dim)."""
        b, s, _ = x.shape
        c = self.c
        q = self.q(x).view(b, s, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, c.n_kv_heads, c.head_dim).transpose(1, 2)
        return rotary(q, positions, c.rope_theta), rotary(k, positions, c.rope_theta), v


class SwiGLU(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.gate = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.up = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.down = nn.Linear(c.d_ff, c.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(c.d_model, c.norm_eps), Attention(c)
        self.ffn_norm, self.ffn = RMSNorm(c.d_model, c.norm_eps), SwiGLU(c)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | Segments,
        past: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attended, k, v = self.attn(self.attn_norm(x), positions, mask, past)
        x = x + attended
        return x + self.ffn(self.ffn_norm(x)), k, v

    def decode_into(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        slots: tuple[torch.Tensor, torch.Tensor],
        column: torch.Tensor,
    ) -> torch.Tensor:
        """Attention.decode_into's arguments; the block's output (batch, 1, d_model)."""
        x = x + self.attn.decode_into(self.attn_norm(x), positions, mask, slots, column)
        return x + self.ffn(self.ffn_norm(x))


class TransformerLM(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Logits (batch, seq, vocab); the arguments are those of forward_with_cache."""
        return self.lm_head(self.forward_with_cache(input_ids, attention_mask, positions, cache)[0])

    def forward_with_cache(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        segments: Segments | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Hidden states after the final norm (batch, seq, d_model) and the cache extended by these tokens.

        input_ids: (batch, seq), continuing `cache` (batch, past) when given. attention_mask (batch, seq):
        1 for real tokens, 0 for padding (either side), covering the new tokens only (the cache keeps its
        own); or, without a cache, a prepared (batch, 1, seq, seq) bool mask, True where a query (row) may
        attend to a key (column), e.g. block-causal packing (its returned cache is not for continuing).
        positions (batch, seq): rotary positions; by default each real token's index among the real tokens
        of its row, cache included. Apply `lm_head` for logits, where they are needed. `segments`: input_ids (1,
        tokens) are rows packed end to end (alignment/models/packed_rows.py), each attending causally to itself
        alone; it needs `positions` and no mask or cache (the returned cache is not for continuing).
        """
        s, device = input_ids.shape[1], input_ids.device
        if segments is not None:
            if cache is not None or positions is None or attention_mask is not None:
                raise ValueError("packed segments need positions, and no attention_mask or cache")
            every_key = torch.ones_like(input_ids, dtype=torch.bool)
            return self._run_blocks(input_ids, positions, segments, None, every_key)
        if attention_mask is not None and attention_mask.dim() == 4:
            if cache is not None or positions is None:
                raise ValueError("a 4D attention_mask needs positions and no cache")
            every_key = torch.ones_like(input_ids, dtype=torch.bool)
            return self._run_blocks(input_ids, positions, attention_mask.bool(), None, every_key)
        new_mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        key_mask = new_mask if cache is None else torch.cat([cache.mask, new_mask], dim=1)  # (batch, past + seq)
        past = key_mask.shape[1] - s
        if positions is None:
            positions = (key_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        query_at = torch.arange(past, past + s, device=device)[:, None]  # each new token's own key column
        key_at = torch.arange(past + s, device=device)[None, :]
        # causal over real keys; a padded query also attends to itself, so no row is empty (which gives NaN)
        mask = ((key_at <= query_at) & key_mask[:, None, None, :]) | (key_at == query_at)
        return self._run_blocks(input_ids, positions, mask, cache, key_mask)

    def decode_into(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        slots: Sequence[tuple[torch.Tensor, torch.Tensor]],
        column: torch.Tensor,
    ) -> torch.Tensor:
        """Hidden states after the final norm (batch, 1, d_model) of one new token per row, decoded against fixed-length
        caches rather than a KVCache (the static decode path, alignment/rollout/static_decoding.py).

        input_ids, positions: (batch, 1); mask: (batch, 1, 1, length) bool, True where a key may be attended to;
        slots: per layer (keys, values), each (batch, n_kv_heads, length, head_dim), written at `column` ((1,) int64)
        in place. Fixed shapes and no host reads, so a CUDA graph can capture it.
        """
        x = self.embed(input_ids)
        for block, layer_slots in zip(self.blocks, slots, strict=True):
            x = block.decode_into(x, positions, mask, layer_slots, column)
        return self.norm(x)

    def _run_blocks(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | Segments,
        cache: KVCache | None,
        key_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, KVCache]:
        x = self.embed(input_ids)
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            x, k, v = block(x, positions, mask, None if cache is None else (cache.keys[i], cache.values[i]))
            keys.append(k)
            values.append(v)
        return self.norm(x), KVCache(tuple(keys), tuple(values), key_mask)


_LLAMA_NAMES = {
    "embed.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
}
_LLAMA_BLOCK_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn.q.weight": "self_attn.q_proj.weight",
    "attn.k.weight": "self_attn.k_proj.weight",
    "attn.v.weight": "self_attn.v_proj.weight",
    "attn.out.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn.gate.weight": "mlp.gate_proj.weight",
    "ffn.up.weight": "mlp.up_proj.weight",
    "ffn.down.weight": "mlp.down_proj.weight",
}


def config_from_llama(hf_config) -> TransformerConfig:
    """Our config for a transformers LlamaConfig; features this model lacks (biases, rope scaling, a head
    size other than hidden / heads) are an error naming the setting, rather than silently wrong logits."""
    # transformers >= 5 keeps rope settings in rope_parameters; older versions put scaling in rope_scaling
    rope = getattr(hf_config, "rope_parameters", None) or getattr(hf_config, "rope_scaling", None) or {}
    unsupported = {
        "attention_bias": getattr(hf_config, "attention_bias", False),
        "mlp_bias": getattr(hf_config, "mlp_bias", False),
        "rope_type": rope.get("rope_type", rope.get("type", "default")) != "default",
        "head_dim": getattr(hf_config, "head_dim", None)
        not in (None, hf_config.hidden_size // hf_config.num_attention_heads),
    }
    used = [name for name, is_used in unsupported.items() if is_used]
    if used:
        raise ValueError(f"Llama config uses {', '.join(used)}, which TransformerLM does not support")
    return TransformerConfig(
        vocab_size=hf_config.vocab_size,
        d_model=hf_config.hidden_size,
        n_layers=hf_config.num_hidden_layers,
        n_heads=hf_config.num_attention_heads,
        n_kv_heads=hf_config.num_key_value_heads,
        d_ff=hf_config.intermediate_size,
        rope_theta=rope.get("rope_theta", getattr(hf_config, "rope_theta", None) or 10000.0),
        norm_eps=hf_config.rms_norm_eps,
        tie_embeddings=hf_config.tie_word_embeddings,
    )


def llama_names(config: TransformerConfig) -> dict[str, str]:
    """Our parameter name -> the Llama checkpoint's, for every tensor stored (a tied head is stored once)."""
    names = dict(_LLAMA_NAMES)
    for i in range(config.n_layers):
        names |= {f"blocks.{i}.{ours}": f"model.layers.{i}.{theirs}" for ours, theirs in _LLAMA_BLOCK_NAMES.items()}
    if config.tie_embeddings:
        names.pop("lm_head.weight")
    return names


def to_llama_state_dict(model: "TransformerLM") -> dict[str, torch.Tensor]:
    """The model's weights under Llama checkpoint names, detached and contiguous (ready for safetensors)."""
    state = model.state_dict()
    return {theirs: state[ours].detach().contiguous() for ours, theirs in llama_names(model.config).items()}


def from_llama_state_dict(config: TransformerConfig, state_dict: dict[str, torch.Tensor]) -> TransformerLM:
    """Our model holding a Llama checkpoint's weights; a missing or unused tensor is an error naming it."""
    model = TransformerLM(config)
    load_llama_state_dict(model, state_dict)
    return model


def load_llama_state_dict(model: TransformerLM, state_dict: dict[str, torch.Tensor]) -> None:
    """Copy a Llama checkpoint's weights into `model`; a missing or unused tensor is an error naming it."""
    names = llama_names(model.config)
    missing = sorted(theirs for theirs in names.values() if theirs not in state_dict)
    if missing:
        raise ValueError(f"checkpoint lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    unused = sorted(set(state_dict) - set(names.values()) - {"lm_head.weight"})
    if unused:
        raise ValueError(f"checkpoint has tensors this architecture does not use: {', '.join(unused[:5])}")
    model.load_state_dict(
        {ours: state_dict[theirs] for ours, theirs in names.items()}, strict=not model.config.tie_embeddings
    )
