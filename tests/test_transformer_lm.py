"""Our from-scratch TransformerLM reproduces transformers' Llama logits on the same weights."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from alignment.models import SMOLLM2, resolve_model
from alignment.transformer_lm import config_from_llama, from_llama_state_dict

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
