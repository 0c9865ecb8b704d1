"""ReservedCache: the logits of DynamicCache at every step of a left-padded decode that copies prompts to their
groups, outgrows its reserve, and drops rows."""

import copy

import pytest
import torch
from transformers import DynamicCache

from alignment.rollout.reserved_cache import ReservedCache


def decode_logits(model, cache, steps: int = 6) -> list[torch.Tensor]:
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :3] = 0
    with torch.no_grad():
        out = [
            model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                past_key_values=cache,
                use_cache=True,
            ).logits[:, -1]
        ]
        cache.batch_repeat_interleave(2)
        mask = mask.repeat_interleave(2, dim=0)
        position = mask.sum(-1)
        for step in range(steps):
            if step == 3:  # rows 1 and 2 finish
                kept = torch.tensor([0, 3])
                cache.batch_select_indices(kept)
                mask, position = mask[kept], position[kept]
            mask = torch.cat([mask, mask.new_ones((len(mask), 1))], dim=-1)
            token = torch.randint(0, 1000, (len(mask), 1))
            out.append(
                model(
                    input_ids=token,
                    attention_mask=mask,
                    position_ids=position[:, None],
                    past_key_values=cache,
                    use_cache=True,
                ).logits[:, -1]
            )
            position = position + 1
    return out


@pytest.mark.parametrize("reserve", [2, 64])  # 2: the buffers grow twice on the way
def test_reserved_cache_matches_dynamic_cache(tiny_model, reserve):
    model = copy.deepcopy(tiny_model)
    expected = decode_logits(model, DynamicCache())
    cache = ReservedCache(reserve)
    got = decode_logits(model, cache)
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert cache.get_seq_length() == 7 + 6
    layer = cache.layers[0]
    assert layer.key_buffer.shape[-2] >= 13 and layer.keys.shape == (
        2,
        model.config.num_key_value_heads,
        13,
        layer.keys.shape[-1],
    )
