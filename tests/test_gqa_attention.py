"""sdpa_gqa: the same logits, gradients and samples as transformers' sdpa, on both tiny architectures (4 query
heads over 2 key/value heads), with the masks of left-padded rollouts and of shared-prompt scoring."""

import copy

import torch

from alignment.grpo.shared_prompt import shared_prompt_log_probs
from alignment.models.gqa_attention import NAME, use_gqa_attention
from alignment.models.loading import load_model_and_tokenizer
from alignment.models.packed_rows import NAME as PACKED_NAME
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig


def twins(model):
    """(sdpa copy, sdpa_gqa copy) of a session model, which stays as it is."""
    plain, grouped = copy.deepcopy(model), copy.deepcopy(model)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    assert use_gqa_attention(grouped) and grouped.config._attn_implementation == NAME
    assert plain.config._attn_implementation == "sdpa"
    return plain, grouped


def test_left_padded_forward_and_gradients_match_sdpa(tiny_model):
    plain, grouped = twins(tiny_model)
    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (3, 11))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[0, :5], mask[1, :2] = 0, 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    outputs = []
    for model in (plain, grouped):
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        logits[mask.bool()].logsumexp(-1).sum().backward()
        outputs.append((logits.detach(), [p.grad for p in model.parameters()]))
    torch.testing.assert_close(outputs[0][0], outputs[1][0], rtol=0, atol=1e-6)
    for a, b in zip(outputs[0][1], outputs[1][1]):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_shared_prompt_scoring_matches_sdpa(tiny_model):
    plain, grouped = twins(tiny_model)
    torch.manual_seed(1)
    prompt = torch.randint(0, 1000, (5,))
    ids = torch.cat([prompt.expand(4, 5), torch.randint(0, 1000, (4, 6))], dim=1)
    labels = torch.roll(ids, -1, dims=1)
    response = torch.zeros_like(ids, dtype=torch.bool)
    response[:, 4:10] = True
    a = shared_prompt_log_probs(plain, ids, labels, response)["log_probs"]
    b = shared_prompt_log_probs(grouped, ids, labels, response)["log_probs"]
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_seeded_rollouts_are_the_same_tokens(tiny_model, tokenizer):
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=12, seed=3)
    prompts = ["Hi", "A much longer prompt, so that the batch is left-padded"]
    runs = [
        HFRolloutEngine(model, tokenizer, progress=False).generate(prompts, 3, sampling) for model in twins(tiny_model)
    ]
    assert [r.token_ids for r in runs[0]] == [r.token_ids for r in runs[1]]
    for a, b in zip(*runs):
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-5)


def test_cpu_loads_use_it(tiny_model_dir):
    model, _ = load_model_and_tokenizer(str(tiny_model_dir), "cpu")
    # sdpa_packed: its calls without packed rows are sdpa_gqa's (tests/test_packed_rows.py)
    assert model.config._attn_implementation == PACKED_NAME
