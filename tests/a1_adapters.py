"""CS336 A1's adapter functions (its tests/adapters.py names and arguments) on our TransformerLM and tokenizer, so
that A1's own tests and snapshots check that a student's A1 weights mean the same thing in our model
(tests/test_a1_model.py runs them from a local checkout). Blocks, attention and the whole model go through the
loader (alignment/models/a1_checkpoint.py), so its renames, orientation and RoPE reordering are what is tested."""

from collections.abc import Iterable, Iterator

import torch
import torch.nn.functional as F

from alignment.models.a1_checkpoint import A1Shape, from_a1_state_dict, interleaved_to_half_split
from alignment.models.bpe_tokenizer import bpe_tokenizer
from alignment.models.transformer_lm import RMSNorm, SwiGLU, TransformerConfig, rotary


def _model(d_model, num_heads, d_ff, theta, weights, layers=1, vocab_size=None, context_length=None):
    """Our model of an A1 state dict; a lone block's weights get a placeholder embedding, final norm and head."""
    state = dict(weights)
    if "token_embeddings.weight" not in state:
        state = {f"layers.0.{k}": v for k, v in state.items()}
        vocab_size = 1
        state |= {
            "token_embeddings.weight": torch.zeros(1, d_model),
            "ln_final.weight": torch.ones(d_model),
            "lm_head.weight": torch.zeros(1, d_model),
        }
    for key in ("ln1.weight", "ln2.weight"):  # attention alone: the norms are unused
        state.setdefault(f"layers.0.{key}", torch.ones(d_model))
    for key, size in (("ffn.w1.weight", (d_ff, d_model)), ("ffn.w3.weight", (d_ff, d_model))):
        state.setdefault(f"layers.0.{key}", torch.zeros(size))
    state.setdefault("layers.0.ffn.w2.weight", torch.zeros(d_model, d_ff))
    shape = A1Shape(vocab_size, context_length or 1024, d_model, layers, num_heads, d_ff, theta)
    return from_a1_state_dict(state, shape)


def _causal(batch: int, seq: int) -> torch.Tensor:
    return torch.ones(seq, seq, dtype=torch.bool).tril()[None, None].expand(batch, 1, seq, seq)


def _attend(model, in_features, token_positions):
    x = in_features.reshape(-1, *in_features.shape[-2:])
    batch, seq = x.shape[:2]
    positions = torch.arange(seq) if token_positions is None else token_positions
    positions = positions.reshape(-1, seq).expand(batch, seq)
    return model.blocks[0].attn(x, positions, _causal(batch, seq), None)[0].reshape(in_features.shape)


def run_linear(d_in, d_out, weights, in_features):
    return in_features @ weights.T


def run_embedding(vocab_size, d_model, weights, token_ids):
    return weights[token_ids]


def run_swiglu(d_model, d_ff, w1_weight, w2_weight, w3_weight, in_features):
    ffn = SwiGLU(TransformerConfig(vocab_size=1, d_model=d_model, n_layers=1, n_heads=1, n_kv_heads=1, d_ff=d_ff))
    ffn.load_state_dict({"gate.weight": w1_weight, "up.weight": w3_weight, "down.weight": w2_weight})
    return ffn(in_features)


def run_scaled_dot_product_attention(Q, K, V, mask=None):  # noqa: N803 - A1's argument names
    # the call our Attention makes: scale 1/sqrt(d_k), a boolean mask True where attention is allowed
    return F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)


def run_multihead_self_attention(
    d_model, num_heads, q_proj_weight, k_proj_weight, v_proj_weight, o_proj_weight, in_features
):
    weights = {"attn.q_proj.weight": q_proj_weight, "attn.k_proj.weight": k_proj_weight}
    weights |= {"attn.v_proj.weight": v_proj_weight, "attn.output_proj.weight": o_proj_weight}
    model = _model(d_model, num_heads, d_model, 10000.0, weights)
    seq = in_features.shape[-2]
    return _attend(model, in_features, torch.zeros(seq, dtype=torch.long))  # position 0 everywhere: no rotation


def run_multihead_self_attention_with_rope(
    d_model,
    num_heads,
    max_seq_len,
    theta,
    q_proj_weight,
    k_proj_weight,
    v_proj_weight,
    o_proj_weight,
    in_features,
    token_positions=None,
):
    weights = {"attn.q_proj.weight": q_proj_weight, "attn.k_proj.weight": k_proj_weight}
    weights |= {"attn.v_proj.weight": v_proj_weight, "attn.output_proj.weight": o_proj_weight}
    return _attend(_model(d_model, num_heads, d_model, theta, weights), in_features, token_positions)


def run_rope(d_k, theta, max_seq_len, in_query_or_key, token_positions):
    order = interleaved_to_half_split(d_k)
    x = in_query_or_key.reshape(-1, *in_query_or_key.shape[-2:])[..., order]
    positions = token_positions.reshape(-1, x.shape[1]).expand(x.shape[0], x.shape[1])
    rotated = rotary(x[:, None], positions, theta)[:, 0]
    return rotated[..., torch.argsort(order)].reshape(in_query_or_key.shape)


def run_transformer_block(d_model, num_heads, d_ff, max_seq_len, theta, weights, in_features):
    model = _model(d_model, num_heads, d_ff, theta, weights)
    batch, seq = in_features.shape[:2]
    positions = torch.arange(seq).expand(batch, seq)
    return model.blocks[0](in_features, positions, _causal(batch, seq), None)[0]


def run_transformer_lm(
    vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta, weights, in_indices
):
    shape = A1Shape(vocab_size, context_length, d_model, num_layers, num_heads, d_ff, rope_theta)
    return from_a1_state_dict(weights, shape)(in_indices)


def run_rmsnorm(d_model, eps, weights, in_features):
    norm = RMSNorm(d_model, eps)
    norm.load_state_dict({"weight": weights})
    return norm(in_features)


def run_silu(in_features):
    return F.silu(in_features)


class _Tokenizer:
    """A1's Tokenizer interface (encode, decode, encode_iterable) over our transformers tokenizer."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, clean_up_tokenization_spaces=False)

    def encode_iterable(self, iterable: Iterable[str]) -> Iterator[int]:
        for chunk in iterable:
            yield from self.encode(chunk)


def get_tokenizer(vocab, merges, special_tokens=None):
    return _Tokenizer(bpe_tokenizer(vocab, merges, special_tokens or ()))
