"""A transformers KV cache that reserves room for the tokens still to come instead of concatenating.

DynamicCache appends each decode step's keys and values with torch.cat, which copies the layer's whole cache:
per step the cost grows with the sequence (a third of a step at 1,000 tokens on the CPU). Here each layer
keeps a buffer with room for `reserve` more tokens past what it has seen, writes new tokens in place and hands
attention a view of the filled part; it grows (by another `reserve`) only when full. Rows leaving the batch
and the prompt-to-group copy are the same operations as DynamicCache's, on the buffers.
"""

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class ReservedLayer(DynamicLayer):
    """One layer's keys and values, (batch, kv_heads, filled, head_dim) views of larger buffers."""

    def __init__(self, reserve: int) -> None:
        super().__init__()
        self.reserve = reserve
        self.filled = 0
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.filled + key_states.shape[-2]
        if self.key_buffer is None or end > self.key_buffer.shape[-2]:
            self._resize(end + self.reserve, key_states, value_states)
        self.key_buffer[:, :, self.filled : end] = key_states
        self.value_buffer[:, :, self.filled : end] = value_states
        self.filled = end
        self._expose()
        return self.keys, self.values

    def _resize(self, capacity: int, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        buffers = []
        for old, new in ((self.key_buffer, key_states), (self.value_buffer, value_states)):
            buffer = new.new_empty((*new.shape[:2], capacity, new.shape[-1]))
            if old is not None:
                buffer[:, :, : self.filled] = old[:, :, : self.filled]
            buffers.append(buffer)
        self.key_buffer, self.value_buffer = buffers

    def _expose(self) -> None:
        self.keys = self.key_buffer[:, :, : self.filled]
        self.values = self.value_buffer[:, :, : self.filled]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.filled:
            self.key_buffer = self.key_buffer.repeat_interleave(repeats, dim=0)
            self.value_buffer = self.value_buffer.repeat_interleave(repeats, dim=0)
            self._expose()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.filled:
            self.key_buffer, self.value_buffer = self.key_buffer[indices], self.value_buffer[indices]
            self._expose()

    def reset(self) -> None:
        self.filled, self.key_buffer, self.value_buffer = 0, None, None
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("ReservedLayer does not crop; it serves sampling, which never rewinds")

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx)


class ReservedCache(DynamicCache):
    """DynamicCache whose layers reserve room for `reserve` more tokens (e.g. the sampling's max_tokens)."""

    def __init__(self, reserve: int) -> None:
        super().__init__()
        self.layer_class_to_replicate = lambda: ReservedLayer(reserve)
