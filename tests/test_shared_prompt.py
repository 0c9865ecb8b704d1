"""Scoring each distinct prompt once must give the same log-probs, entropies and gradients as scoring every row."""

import copy

import pytest
import torch
from transformers import LlamaForCausalLM

import alignment.grpo.shared_prompt as shared_prompt
from alignment.grpo.batch import collate
from alignment.grpo.shared_prompt import can_share_prompts, packing_pays, shared_prompt_log_probs
from alignment.logprobs import get_response_log_probs
from alignment.models.transformer_lm import TransformerLM, config_from_llama, from_llama_state_dict
from alignment.rollout.interface import Rollout


def rollout(prompt_index: int, tokens: list[int]) -> Rollout:
    return Rollout(prompt_index, "", tokens, [0.0] * len(tokens), "stop")


def make_batch(tokenizer, group_size: int = 3):
    """Three prompts of different lengths (so the shared pass is left-padded), responses of different lengths."""
    prompts = [
        tokenizer(p)["input_ids"]
        for p in ("Name a river.", "What is two plus two? Answer briefly, please.", "Hi there")
    ]
    generator = torch.Generator().manual_seed(0)
    rollouts = [
        rollout(
            p,
            torch.randint(
                5, 1000, (int(torch.randint(1, 9, (1,), generator=generator)),), generator=generator
            ).tolist(),
        )
        for p in range(len(prompts))
        for _ in range(group_size)
    ]
    n = len(rollouts)
    return collate(prompts, rollouts, torch.zeros(n), torch.zeros(n), tokenizer.pad_token_id)


def scored(model, batch, shared: bool):
    model.zero_grad(set_to_none=True)
    fn = (
        shared_prompt_log_probs
        if shared
        else lambda *a, **k: get_response_log_probs(*a[:3], k["return_token_entropy"], response_mask=a[3])
    )
    out = fn(model, batch.input_ids, batch.labels, batch.response_mask, return_token_entropy=True)
    weights = torch.linspace(-1, 1, batch.labels.numel()).view_as(
        batch.labels
    )  # a loss that weighs every token differently
    (out["log_probs"] * weights).sum().backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def tiny_llama(tiny_model_dir) -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(tiny_model_dir).eval()


def as_transformer_lm(model: LlamaForCausalLM) -> TransformerLM:
    return from_llama_state_dict(config_from_llama(model.config), model.state_dict())


@pytest.fixture(params=["transformers", "transformer_lm"])
def policy(request, tiny_model, tiny_llama):
    """A tiny transformers model (Llama or Qwen2), or the tiny Llama's weights in our own TransformerLM."""
    return (
        copy.deepcopy(tiny_model).train() if request.param == "transformers" else as_transformer_lm(tiny_llama).train()
    )


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "cached"])
def test_shared_prompts_match_full_rows(policy, tokenizer, packed, monkeypatch):
    monkeypatch.setattr(shared_prompt, "packing_pays", lambda *args: packed)
    model = policy
    batch = make_batch(tokenizer)
    assert can_share_prompts(model, batch.response_mask)
    shared, shared_grads = scored(model, batch, shared=True)
    full, full_grads = scored(model, batch, shared=False)
    torch.testing.assert_close(shared["log_probs"], full["log_probs"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(shared["token_entropy"], full["token_entropy"], atol=1e-5, rtol=1e-5)
    assert (shared["log_probs"][~batch.response_mask] == 0).all() and (
        shared["log_probs"][batch.response_mask] < 0
    ).all()
    assert shared_grads.keys() == full_grads.keys()
    for name, grad in full_grads.items():
        assert torch.isfinite(shared_grads[name]).all(), name
        torch.testing.assert_close(shared_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "cached"])
def test_rows_of_one_prompt_in_any_order(tiny_model, tokenizer, packed, monkeypatch):
    """Group membership comes from the tokens, so shuffled rows and singleton groups are handled."""
    monkeypatch.setattr(shared_prompt, "packing_pays", lambda *args: packed)
    batch = make_batch(tokenizer)
    picked = batch.select(torch.tensor([4, 0, 8, 3, 1]))
    with torch.no_grad():
        shared = shared_prompt_log_probs(tiny_model, picked.input_ids, picked.labels, picked.response_mask)
        full = get_response_log_probs(tiny_model, picked.input_ids, picked.labels, response_mask=picked.response_mask)
    torch.testing.assert_close(shared["log_probs"], full["log_probs"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("checkpointing", [True, False])
def test_sharing_is_off_under_gradient_checkpointing(tiny_model, tokenizer, checkpointing):
    model = copy.deepcopy(tiny_model)
    if checkpointing:
        model.gradient_checkpointing_enable()
    assert can_share_prompts(model, make_batch(tokenizer).response_mask) is not checkpointing


def test_one_token_prompt_is_scored_in_full(tiny_model, tokenizer):
    """A one-token prompt leaves nothing to share (its only token predicts the first response token)."""
    batch = collate(
        [[tokenizer.bos_token_id or 1]], [rollout(0, [7, 8]), rollout(0, [9])], torch.zeros(2), torch.zeros(2), 0
    )
    assert not can_share_prompts(tiny_model, batch.response_mask)
    with torch.no_grad():
        out = shared_prompt_log_probs(tiny_model, batch.input_ids, batch.labels, batch.response_mask)
    assert out["log_probs"][batch.response_mask].lt(0).all()


def test_transformer_lm_policy_scores_like_transformers(tiny_llama, tokenizer):
    """Our model as a train-loop policy: same log-probs as the transformers model holding the same weights."""
    ours = as_transformer_lm(tiny_llama)
    batch = make_batch(tokenizer)
    with torch.no_grad():
        theirs = get_response_log_probs(tiny_llama, batch.input_ids, batch.labels, response_mask=batch.response_mask)
        mine = shared_prompt_log_probs(ours, batch.input_ids, batch.labels, batch.response_mask)
    torch.testing.assert_close(mine["log_probs"], theirs["log_probs"], atol=1e-4, rtol=1e-4)


def test_packing_is_chosen_for_short_responses_on_sdpa_only(tiny_model):
    """The demo's microbatch (2 prompts of 42 tokens, 4 responses of 32 each, d_model 576) wastes about 36 keys
    a token, 1% of the weights' work; 8 responses of 1024 tokens would waste ~3,500 (38% at d_model 1536)."""
    model = copy.deepcopy(tiny_model)
    inverse = torch.arange(2).repeat_interleave(4)
    demo = (torch.tensor([42, 42]), inverse, torch.full((8,), 32))
    model.config.hidden_size = 576
    assert packing_pays(model, *demo)
    model.config.hidden_size = 64  # the same batch beside a narrow model: 36 keys are 9% of its weight work
    assert not packing_pays(model, *demo)
    model.config.hidden_size = 1536
    long = (torch.tensor([150]), torch.zeros(8, dtype=torch.long), torch.full((8,), 1024))
    assert not packing_pays(model, *long)
    model.config.hidden_size = 576
    model.config.layer_types = ["full_attention", "sliding_attention"]
    assert not packing_pays(model, *demo)
    model.config.layer_types = ["full_attention", "full_attention"]
    assert packing_pays(model, *demo)
    model.config._attn_implementation = "flash_attention_2"  # takes no prepared 4D mask
    assert not packing_pays(model, *demo)


def test_synthetic_rows_in_groups_share_their_prompts_and_are_scored_with_them_once():
    """bench/precision_gpu.py --shared-prompts: rows in groups of 2 continue one prompt each (their responses differ),
    so each microbatch of 2 scores one distinct prompt."""
    from alignment.grpo.synthetic import synthetic_rows

    rows = synthetic_rows(6, 5, 7, 50, group=2)
    prompts, responses = rows.input_ids[:, :5], rows.input_ids[:, 5:]
    assert torch.equal(prompts[0::2], prompts[1::2]) and not torch.equal(prompts[0], prompts[2])
    assert not torch.equal(responses[0], responses[1])
    unique, inverse = shared_prompt.prompt_groups(rows.input_ids, rows.response_mask)
    assert len(unique) == 3 and torch.equal(inverse[0::2], inverse[1::2]) and len(set(inverse.tolist())) == 3
    apart = synthetic_rows(6, 5, 7, 50)  # the default: a prompt of its own for each row
    assert len(shared_prompt.prompt_groups(apart.input_ids, apart.response_mask)[0]) == 6
