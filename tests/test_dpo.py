"""Per-instance DPO loss: log 2 when policy equals reference, and the formula recomputed from full-sequence logits."""

import copy
import math

import torch
import torch.nn.functional as F

from alignment.data.packed_sft import ALPACA_TEMPLATE
from alignment.dpo import dpo_loss
from tests.adapters import run_compute_per_instance_dpo_loss

PROMPT, CHOSEN, REJECTED = "What is 2 + 2?", "4", "5, obviously"


def sequence_log_prob(model, tokenizer, text: str, prompt_text: str) -> float:
    """Sum of log-probs of the tokens after the prompt, from one full forward pass over prompt + response."""
    prompt_ids = tokenizer(prompt_text)["input_ids"]
    ids = prompt_ids + tokenizer(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    return sum(log_probs[t - 1, ids[t]].item() for t in range(len(prompt_ids), len(ids)))


def test_equal_models_give_log_two(tiny_model, tokenizer):
    loss = run_compute_per_instance_dpo_loss(
        tiny_model, copy.deepcopy(tiny_model), tokenizer, 0.5, PROMPT, CHOSEN, REJECTED
    )
    assert loss.shape == () and math.isclose(loss.item(), math.log(2), rel_tol=1e-6)


def test_loss_matches_formula_and_is_differentiable(tiny_model, tokenizer):
    torch.manual_seed(1)
    policy = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    beta = 0.1
    prompt_text = ALPACA_TEMPLATE.format(instruction=PROMPT, response="")
    eos = tokenizer.eos_token
    margin = (
        sequence_log_prob(policy, tokenizer, CHOSEN + eos, prompt_text)
        - sequence_log_prob(tiny_model, tokenizer, CHOSEN + eos, prompt_text)
        - sequence_log_prob(policy, tokenizer, REJECTED + eos, prompt_text)
        + sequence_log_prob(tiny_model, tokenizer, REJECTED + eos, prompt_text)
    )
    expected = math.log1p(math.exp(-beta * margin))  # -log sigmoid(x) = log(1 + e^-x)
    loss = run_compute_per_instance_dpo_loss(policy, tiny_model, tokenizer, beta, PROMPT, CHOSEN, REJECTED)
    assert math.isclose(loss.item(), expected, rel_tol=1e-4)
    loss.backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())
    assert all(p.grad is None for p in tiny_model.parameters())


def test_dpo_loss_by_hand():
    # margin = (-1 - -2) - (-3 - -2) = 2; beta 0.5 -> -log sigmoid(1) = log(1 + e^-1)
    loss = dpo_loss(torch.tensor(-1.0), torch.tensor(-3.0), torch.tensor(-2.0), torch.tensor(-2.0), beta=0.5)
    assert math.isclose(loss.item(), math.log(1 + math.exp(-1)), rel_tol=1e-6)
    assert math.isclose(F.softplus(torch.tensor(-1.0)).item(), loss.item(), rel_tol=1e-6)
