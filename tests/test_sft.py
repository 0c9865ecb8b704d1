"""The SFT primitives under CS336 A5's test names (`uv run pytest -k test_sft_microbatch_train_step`, ...), each
called through tests/adapters.py with the handout's keyword arguments; expected values derived by hand or recomputed
here in float64. The handout's model tests use Qwen2.5-Math-1.5B; here SmolLM2's tokenizer and tiny random Llama and
Qwen2 models on it (tests/conftest.py) take its place, with the handout's inputs."""

import numpy as np
import pytest
import torch

from tests.adapters import (
    run_compute_entropy,
    run_get_response_log_probs,
    run_masked_normalize,
    run_sft_microbatch_train_step,
    run_tokenize_prompt_and_output,
)

STRINGS = ["Hello, world!", "This is a test.", "This is another test."]  # the handout's prompts and outputs


def test_tokenize_prompt_and_output(tokenizer):
    out = run_tokenize_prompt_and_output(prompt_strs=STRINGS, output_strs=STRINGS, tokenizer=tokenizer)
    prompts = [tokenizer(s)["input_ids"] for s in STRINGS]
    outputs = [tokenizer(s, add_special_tokens=False)["input_ids"] for s in STRINGS]
    longest = max(len(p) + len(o) for p, o in zip(prompts, outputs))
    assert out["input_ids"].shape == out["labels"].shape == out["response_mask"].shape == (3, longest - 1)
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        row = p + o + [tokenizer.pad_token_id] * (longest - len(p) - len(o))  # right-padded with the pad id
        assert out["input_ids"][i].tolist() == row[:-1] and out["labels"][i].tolist() == row[1:]
        # labels shift by one: the first output token is the label of the last prompt position
        assert out["response_mask"][i].tolist() == [j + 1 in range(len(p), len(p) + len(o)) for j in range(longest - 1)]
        assert tokenizer.decode(out["labels"][i][out["response_mask"][i]]) == STRINGS[i]


def test_compute_entropy():
    logits = torch.randn(2, 10, 100, generator=torch.Generator().manual_seed(42))  # the handout's shape
    z = logits.double().numpy()
    log_p = z - z.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    expected = -(np.exp(log_p) * log_p).sum(-1)
    entropy = run_compute_entropy(logits=logits)
    assert entropy.shape == (2, 10)
    np.testing.assert_allclose(entropy.numpy(), expected, rtol=1e-5, atol=1e-6)
    # by hand: uniform over 100 values has entropy log 100; one certain value has 0
    flat = run_compute_entropy(logits=torch.tensor([[[0.0] * 100, [0.0] + [-1e4] * 99]]))
    assert flat.tolist()[0] == pytest.approx([np.log(100), 0.0], abs=1e-5)


def test_get_response_log_probs(tiny_model):
    generator = torch.Generator().manual_seed(42)
    input_ids = torch.randint(0, 100, (2, 10), generator=generator)  # the handout's inputs
    labels = torch.cat([input_ids[:, 1:], torch.zeros(2, 1, dtype=torch.long)], dim=1)
    out = run_get_response_log_probs(model=tiny_model, input_ids=input_ids, labels=labels, return_token_entropy=True)
    with torch.no_grad():
        logits = tiny_model(input_ids).logits.double()
    log_p = torch.log_softmax(logits, dim=-1)
    expected = log_p.gather(-1, labels[..., None])[..., 0]
    np.testing.assert_allclose(out["log_probs"].detach().numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    entropy = -(log_p.exp() * log_p).sum(-1)
    np.testing.assert_allclose(out["token_entropy"].detach().numpy(), entropy.numpy(), rtol=1e-5, atol=1e-5)


# A (3, 4) tensor whose mask leaves column 2 and row 2 empty; the handout's normalize_constant, 42
TENSOR = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, -6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]])
MASK = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.bool)


def test_masked_normalize_dim0():
    out = run_masked_normalize(tensor=TENSOR, mask=MASK, normalize_constant=42.0, dim=0)
    np.testing.assert_allclose(out.numpy(), np.array([1 + 5, 2, 0, 8]) / 42, rtol=1e-6)  # an empty sum is 0


def test_masked_normalize_dim1():
    out = run_masked_normalize(tensor=TENSOR, mask=MASK, normalize_constant=42.0, dim=1)
    np.testing.assert_allclose(out.numpy(), np.array([1 + 2, 5 + 8, 0]) / 42, rtol=1e-6)


def test_masked_normalize_dimlast():
    out = run_masked_normalize(tensor=TENSOR, mask=MASK, normalize_constant=42.0, dim=-1)
    np.testing.assert_allclose(out.numpy(), np.array([3, 13, 0]) / 42, rtol=1e-6)


def test_masked_normalize_dimNone():
    out = run_masked_normalize(tensor=TENSOR, mask=MASK, normalize_constant=42.0)
    assert out.item() == pytest.approx((1 + 2 + 5 + 8) / 42)
    assert run_masked_normalize(tensor=TENSOR, mask=MASK).item() == pytest.approx(16.0)  # the default constant is 1


def sft_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(42)
    log_probs = torch.randn(2, 10, generator=generator)
    return log_probs, torch.rand(2, 10, generator=generator) > 0.5


def sft_reference(log_probs, mask, accumulation, constant) -> tuple[float, np.ndarray]:
    """loss = -(masked sum of log-probs) / constant / batch / accumulation, and its gradient, in float64."""
    x, m = log_probs.double().numpy(), mask.numpy().astype(np.float64)
    batch = x.shape[0]
    return float(-(x * m).sum() / constant / batch / accumulation), -m / constant / batch / accumulation


def test_sft_microbatch_train_step():
    constant = 1.0
    log_probs, mask = sft_inputs()
    policy = log_probs.clone().requires_grad_(True)
    loss, _ = run_sft_microbatch_train_step(
        policy_log_probs=policy, response_mask=mask, gradient_accumulation_steps=2, normalize_constant=constant
    )
    expected_loss, expected_grad = sft_reference(log_probs, mask, 2, constant)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
    np.testing.assert_allclose(policy.grad.numpy(), expected_grad, rtol=1e-6)


def test_sft_microbatch_train_step_normalize():
    log_probs, mask = sft_inputs()
    policy = log_probs.clone().requires_grad_(True)
    loss, _ = run_sft_microbatch_train_step(
        policy_log_probs=policy, response_mask=mask, gradient_accumulation_steps=2, normalize_constant=42.0
    )
    expected_loss, expected_grad = sft_reference(log_probs, mask, 2, 42.0)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
    np.testing.assert_allclose(policy.grad.numpy(), expected_grad, rtol=1e-6)
    # 42 times smaller than with the constant 1
    assert expected_loss * 42 == pytest.approx(sft_reference(log_probs, mask, 2, 1.0)[0])


def test_sft_microbatch_train_step_10_steps():
    log_probs, mask = sft_inputs()
    policy = log_probs.clone().requires_grad_(True)
    expected_loss, expected_grad = sft_reference(log_probs, mask, 2, 1.0)
    for k in range(1, 11):  # .grad is never zeroed between the calls: it accumulates
        loss, _ = run_sft_microbatch_train_step(
            policy_log_probs=policy, response_mask=mask, gradient_accumulation_steps=2, normalize_constant=1.0
        )
        assert loss.item() == pytest.approx(expected_loss, rel=1e-6)
        np.testing.assert_allclose(policy.grad.numpy(), k * expected_grad, rtol=1e-6)
