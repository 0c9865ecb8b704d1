"""Our from-scratch TransformerLM reproduces transformers' Llama logits on the same weights."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from alignment.models.loading import SMOLLM2, resolve_model
from alignment.models.transformer_lm import config_from_llama, from_llama_state_dict

PROMPTS = ["The capital of France is", "1 2 3 4 5", "Write a short story about a dragon who loves tea."]


def padded(tokenizer):
    batch = tokenizer(PROMPTS, padding=True, return_tensors="pt")  # right padding
    assert tokenizer.padding_side == "right" and (batch["attention_mask"] == 0).any()
    return batch


def compare(reference, tokenizer) -> float:
    ours = from_llama_state_dict(config_from_llama(reference.config), reference.state_dict()).eval()
    batch = padded(tokenizer)
    with torch.no_grad():
        expected = reference(**batch).logits
        got = ours(batch["input_ids"], batch["attention_mask"])
        for i, prompt in enumerate(PROMPTS):  # each prompt alone, no padding at all
            alone = tokenizer(prompt, return_tensors="pt")["input_ids"]
            n = alone.shape[1]
            assert (ours(alone)[0] - reference(alone).logits[0]).abs().max() <= 1e-4
            assert torch.allclose(got[i, :n], ours(alone)[0], atol=1e-4)
    real = batch["attention_mask"].bool()
    return (got[real] - expected[real]).abs().max().item()


@pytest.fixture(scope="module")
def tiny_llama(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def test_logits_match_tiny_random_llama(tiny_llama, tokenizer):
    assert compare(tiny_llama, tokenizer) <= 1e-4


@pytest.mark.slow  # 20 s: the 135M model in float32 twice; the tiny random Llama's logits are matched by default
def test_logits_match_smollm2_135m(tokenizer):
    reference = AutoModelForCausalLM.from_pretrained(resolve_model(SMOLLM2), dtype=torch.float32).eval()
    assert compare(reference, tokenizer) <= 1e-4


def test_loading_rejects_foreign_checkpoints(tiny_llama):
    config = config_from_llama(tiny_llama.config)
    state = dict(tiny_llama.state_dict())
    state.pop("model.layers.1.mlp.up_proj.weight")
    with pytest.raises(ValueError, match="lacks model.layers.1.mlp.up_proj.weight"):
        from_llama_state_dict(config, state)
    state = dict(tiny_llama.state_dict()) | {"model.layers.0.self_attn.q_norm.weight": torch.ones(16)}
    with pytest.raises(ValueError, match="does not use: model.layers.0.self_attn.q_norm.weight"):
        from_llama_state_dict(config, state)


# --- KV cache -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_ours(tiny_llama):
    return from_llama_state_dict(config_from_llama(tiny_llama.config), tiny_llama.state_dict()).eval()


def left_padded(tokenizer, texts):
    batch = tokenizer(texts, padding=True, padding_side="left", return_tensors="pt")
    assert (batch["attention_mask"][:, 0] == 0).any()
    return batch["input_ids"], batch["attention_mask"]


def test_prefill_then_one_token_at_a_time_matches_the_full_forward(tiny_ours, tokenizer):
    ids, mask = left_padded(tokenizer, PROMPTS)
    continuation = torch.randint(0, tokenizer.vocab_size, (len(PROMPTS), 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = tiny_ours(torch.cat([ids, continuation], 1), torch.cat([mask, torch.ones_like(continuation)], 1))
        hidden, cache = tiny_ours.forward_with_cache(ids, mask)
        steps = [tiny_ours.lm_head(hidden)]
        for t in range(continuation.shape[1]):
            hidden, cache = tiny_ours.forward_with_cache(continuation[:, t : t + 1], cache=cache)
            steps.append(tiny_ours.lm_head(hidden))
    stepped = torch.cat(steps, dim=1)
    real = torch.cat([mask, torch.ones_like(continuation)], 1).bool()
    assert (stepped[real] - full[real]).abs().max() <= 1e-5
    assert cache.mask.shape == real.shape and torch.equal(cache.mask, real)
    assert cache.keys[0].shape == (len(PROMPTS), tiny_ours.config.n_kv_heads, real.shape[1], tiny_ours.config.head_dim)


def test_responses_on_a_shared_prompt_cache_match_full_rows_in_value_and_gradient(tiny_ours, tokenizer):
    """Training's use: prefill each prompt once, repeat its cache to its group, run right-padded responses."""
    ids, mask = left_padded(tokenizer, PROMPTS[:2])
    group = 3
    responses = torch.randint(0, tokenizer.vocab_size, (2 * group, 4), generator=torch.Generator().manual_seed(1))
    response_mask = torch.ones_like(responses)
    response_mask[1, 2:] = 0  # right padding on one response
    full_ids = torch.cat([ids.repeat_interleave(group, 0), responses], 1)
    full_mask = torch.cat([mask.repeat_interleave(group, 0), response_mask], 1)
    real = response_mask.bool()

    tiny_ours.zero_grad()
    expected = tiny_ours(full_ids, full_mask)[:, ids.shape[1] :]
    expected[real].sum().backward()
    expected_grads = {k: p.grad.clone() for k, p in tiny_ours.named_parameters()}

    tiny_ours.zero_grad()
    _, prompt_cache = tiny_ours.forward_with_cache(ids, mask)
    got = tiny_ours(responses, response_mask, cache=prompt_cache.repeat_interleave(group))
    got[real].sum().backward()
    assert (got[real] - expected[real]).abs().max() <= 1e-5
    for name, p in tiny_ours.named_parameters():
        scale = expected_grads[name].abs().max()
        assert scale > 0 and (p.grad - expected_grads[name]).abs().max() <= 1e-5 * scale, name
    tiny_ours.zero_grad()


def test_a_call_leaves_the_cache_it_continues_unchanged(tiny_ours, tokenizer):
    ids, mask = left_padded(tokenizer, PROMPTS)
    with torch.no_grad():
        _, cache = tiny_ours.forward_with_cache(ids, mask)
        keys = [k.clone() for k in cache.keys]
        first = tiny_ours(torch.tensor([[5], [6], [7]]), cache=cache)
        tiny_ours(torch.tensor([[8, 9], [8, 9], [8, 9]]), cache=cache)
        again = tiny_ours(torch.tensor([[5], [6], [7]]), cache=cache)
    assert cache.mask.shape == mask.shape and all(torch.equal(a, b) for a, b in zip(keys, cache.keys))
    assert torch.equal(first, again)


def test_explicit_positions(tiny_ours, tokenizer):
    ids = tokenizer(PROMPTS[2], return_tensors="pt")["input_ids"]
    default = torch.arange(ids.shape[1])[None]
    with torch.no_grad():
        plain = tiny_ours(ids)
        same = tiny_ours(ids, positions=default)
        shifted = tiny_ours(ids, positions=default + 37)  # rotary attention depends only on relative positions
        reversed_ = tiny_ours(ids, positions=default.flip(-1))
    assert torch.equal(plain, same)
    assert (shifted - plain).abs().max() <= 1e-5
    assert (reversed_ - plain).abs().max() > 1e-3  # other relative positions: other logits


def test_a_prepared_causal_4d_mask_gives_the_plain_forward(tiny_ours, tokenizer):
    ids = tokenizer(PROMPTS[2], return_tensors="pt")["input_ids"]
    n = ids.shape[1]
    causal = torch.ones(1, 1, n, n, dtype=torch.bool).tril()
    positions = torch.arange(n)[None]
    with torch.no_grad():
        plain = tiny_ours(ids)
        prepared = tiny_ours(ids, causal, positions)
        _, cache = tiny_ours.forward_with_cache(ids)
    assert torch.equal(plain, prepared)
    with pytest.raises(ValueError, match="4D attention_mask needs positions and no cache"):
        tiny_ours(ids, causal, positions, cache)
    with pytest.raises(ValueError, match="4D attention_mask needs positions"):
        tiny_ours(ids, causal)


def test_llama_features_the_model_lacks_are_refused_by_name(tiny_llama):
    from transformers import LlamaConfig

    base = tiny_llama.config.to_dict()
    for change, name in (
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"head_dim": 32}, "head_dim"),
        ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}, "rope_type"),
    ):
        with pytest.raises(ValueError, match=f"Llama config uses {name}, which TransformerLM does not support"):
            config_from_llama(LlamaConfig(**base | change))
    assert config_from_llama(LlamaConfig(**base)).head_dim == 16
