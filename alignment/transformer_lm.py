"""A decoder-only Transformer language model written from scratch (no transformers modeling code).

Pre-norm blocks of RMSNorm -> grouped-query causal attention with rotary position embeddings -> RMSNorm ->
SwiGLU feed-forward, then a final RMSNorm and the LM head (optionally tied to the embedding). Its layout
matches the Llama architecture, so Llama-family checkpoints (SmolLM2 among them) load into it.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


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


class Attention(nn.Module):
    def __init__(self, c: TransformerConfig) -> None:
        super().__init__()
        self.c = c
        self.q = nn.Linear(c.d_model, c.n_heads * c.head_dim, bias=False)
        self.k = nn.Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=False)
        self.v = nn.Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=False)
        self.out = nn.Linear(c.n_heads * c.head_dim, c.d_model, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x: (batch, seq, d_model); mask: (batch, 1, seq, seq) bool, True where attention is allowed."""
        b, s, _ = x.shape
        c = self.c
        q = self.q(x).view(b, s, c.n_heads, c.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q, k = rotary(q, positions, c.rope_theta), rotary(k, positions, c.rope_theta)
        repeat = c.n_heads // c.n_kv_heads  # each key/value head serves `repeat` query heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(c.head_dim))
        return self.out(y.transpose(1, 2).reshape(b, s, c.n_heads * c.head_dim))


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

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), positions, mask)
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

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, seq, vocab). attention_mask (batch, seq): 1 for real tokens, 0 for padding (either side)."""
        b, s = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(s, s, dtype=torch.bool, device=input_ids.device).tril()
        # a padded query row attends only to itself, so no row is empty (which would give NaN)
        mask = (causal & attention_mask.bool()[:, None, None, :]) | torch.eye(s, dtype=torch.bool, device=input_ids.device)
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x, positions, mask)
        return self.lm_head(self.norm(x))


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
    rope = getattr(hf_config, "rope_parameters", None) or {}
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


def from_llama_state_dict(config: TransformerConfig, state_dict: dict[str, torch.Tensor]) -> TransformerLM:
    """Our model holding a Llama checkpoint's weights; a missing or unused tensor is an error naming it."""
    model = TransformerLM(config)
    names = dict(_LLAMA_NAMES)
    for i in range(config.n_layers):
        names |= {f"blocks.{i}.{ours}": f"model.layers.{i}.{theirs}" for ours, theirs in _LLAMA_BLOCK_NAMES.items()}
    if config.tie_embeddings:
        names.pop("lm_head.weight")
    missing = sorted(theirs for theirs in names.values() if theirs not in state_dict)
    if missing:
        raise ValueError(f"checkpoint lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    unused = sorted(set(state_dict) - set(names.values()) - {"lm_head.weight"})
    if unused:
        raise ValueError(f"checkpoint has tensors this architecture does not use: {', '.join(unused[:5])}")
    model.load_state_dict({ours: state_dict[theirs] for ours, theirs in names.items()}, strict=not config.tie_embeddings)
    return model
