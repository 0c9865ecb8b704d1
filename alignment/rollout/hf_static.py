"""The hf backend's step on the static decode path: a transformers model's own forward over the slot buffers.

Three pieces make the model's forward a fixed-shape step with no host reads (alignment/rollout/static_decoding.py):
- SlotCache, a transformers Cache whose layers write each new key and value at the state's column of the slot buffers
  and hand attention the step's span of them (its first columns, a fixed length per captured graph);
- the mask passed ready-made, 4D, which the model takes as it is (no mask building, no host reads);
- attention as one_token_attention (alignment/models/decode_attention.py: grouped heads folded into the query axis,
  no copy of the cache), registered with transformers under NAME and selected only while the step runs.
Models: the Llama, Qwen2, Qwen3 and OLMo 2 families with full attention in every layer; `static_support` says why
another model cannot take the static path (it then decodes eagerly).
"""

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.cache_utils import Cache, CacheLayerMixin

from alignment.models.decode_attention import one_token_attention
from alignment.rollout.static_decoding import KVSpec, SlotState, StepLogits

NAME = "alignment_one_token"
MODEL_TYPES = ("llama", "qwen2", "qwen3", "olmo2")
# attention implementations whose arithmetic is plain softmax attention (sdpa_gqa: alignment/models/gqa_attention.py;
# sdpa_packed, which loaded models get, is sdpa or sdpa_gqa for every call without packed rows: models/packed_rows.py)
PLAIN_ATTENTION = ("sdpa", "sdpa_gqa", "sdpa_packed", "eager")
RECOMPUTED_ROPE = ("dynamic", "longrope")  # rotary frequencies that a step recomputes from the positions it sees


def one_token_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract for one query token: query (rows, heads, 1, dim), key/value
    (rows, kv_heads, length, dim), mask (rows, 1, 1, length) bool -> ((rows, 1, heads, dim), None)."""
    return one_token_attention(query, key, value, attention_mask, scaling).transpose(1, 2), None


AttentionInterface.register(NAME, one_token_attention_forward)


class SlotLayer(CacheLayerMixin):
    """One layer's keys and values: the first `rows` slots and `span` columns of the state's buffers, written at the
    state's column."""

    is_compileable = True
    is_sliding = False

    def __init__(self, state: SlotState, layer: int, rows: int, span: int) -> None:
        super().__init__()
        self.keys, self.values = state.slots(rows, span)[layer]
        self.column, self.length = state.column, span
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        pass  # the buffers exist before the first step

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys.index_copy_(2, self.column, key_states)
        self.values.index_copy_(2, self.column, value_states)
        return self.keys, self.values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length, 0

    def get_seq_length(self) -> int:
        return self.length  # only read when no position_ids are given; the step always gives them

    def get_max_length(self) -> int:
        return self.length


class SlotCache(Cache):
    """The transformers Cache of a static step over the first `rows` slots and `span` columns."""

    def __init__(self, state: SlotState, rows: int, span: int) -> None:
        super().__init__(layers=[SlotLayer(state, layer, rows, span) for layer in range(len(state.keys))])


def static_support(model: PreTrainedModel) -> str | None:
    """Why `model` cannot take the static path, or None when it can."""
    config = model.config
    if config.model_type not in MODEL_TYPES:
        return f"model type {config.model_type!r} (the static path serves {', '.join(MODEL_TYPES)})"
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"}:
        return f"layers of types {sorted(layer_types)} (the static path attends over every position)"
    if config._attn_implementation not in PLAIN_ATTENTION:
        return f"attention implementation {config._attn_implementation!r}"
    rope_type = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope_type in RECOMPUTED_ROPE:
        return f"rope_type {rope_type!r} (its frequencies follow the longest position, read on the host each step)"
    return None


def kv_spec(model: PreTrainedModel) -> KVSpec:
    """The cache one layer of `model` keeps per token."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return KVSpec(c.num_hidden_layers, kv_heads, head_dim, model.dtype)


@contextmanager
def attention_implementation(model: PreTrainedModel, name: str) -> Iterator[None]:
    """Inside, `model`'s attention layers run the attention function registered as `name`."""
    config = model.config
    before = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = before


def hf_step_logits(model: PreTrainedModel) -> StepLogits:
    """The static step's model call for a transformers causal LM: next-token logits (rows, vocab) of state.tokens."""

    def step(state: SlotState, rows: int, span: int) -> torch.Tensor:
        with attention_implementation(model, NAME):
            out = model(
                input_ids=state.tokens[:rows, None],
                attention_mask=state.attention_mask(rows, span),
                position_ids=state.positions[:rows, None],
                past_key_values=SlotCache(state, rows, span),
                use_cache=True,
            )
        return out.logits[:, -1]

    return step
