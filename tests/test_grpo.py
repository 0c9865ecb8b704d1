"""The GRPO primitives under the test names of CS336 A5, UW CSE599-O A3 and PKU NLPDL HW3 (`uv run pytest -k
test_compute_grpo_clip_loss`, `pytest tests/test_grpo.py::test_compute_grpo_clip_loss_large_cliprange`), each
called through tests/adapters.py with the handouts' keyword arguments. Expected values are derived by hand or
recomputed here in float64 with numpy, never taken from the library's own output.

Conventions the handouts' reference snapshots encode, checked here: the group std is the unbiased one (ddof=1)
plus eps; a masked mean over nothing is NaN; the microbatch loss is each sequence's masked mean, averaged over
the batch and divided by gradient_accumulation_steps; gradients accumulate over calls (never zeroed inside).
"""

import numpy as np
import pytest
import torch

from tests.adapters import (
    run_compute_group_normalized_rewards,
    run_compute_grpo_clip_loss,
    run_compute_naive_policy_gradient_loss,
    run_compute_policy_gradient_loss,
    run_grpo_microbatch_train_step,
    run_masked_mean,
)

# 8 rollouts, 2 groups of 4; their rewards by hand: each response's reward is the number it ends in, divided by 10
RESPONSES = [f"I think the answer is {n}" for n in (2, 5, 0, 4, 9, 7, 2, 0)]
TRUTHS = ["42"] * 8
RAW = np.array([0.2, 0.5, 0.0, 0.4, 0.9, 0.7, 0.2, 0.0])


def reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    reward = int(response.rsplit(" ", 1)[1]) / 10
    return {"reward": reward, "format_reward": 1.0, "answer_reward": reward}


def inputs(seed: int = 42, batch: int = 2, seq: int = 10) -> dict[str, torch.Tensor]:
    """Policy and old log-probs (the handouts' shapes), advantages with both signs, raw rewards in [0, 1)."""
    generator = torch.Generator().manual_seed(seed)
    policy = torch.randn(batch, seq, generator=generator)
    raw = torch.rand(batch, 1, generator=generator)
    return {
        "policy_log_probs": policy,
        "old_log_probs": policy + torch.randn(batch, seq, generator=generator),
        "raw_rewards": raw,
        "advantages": raw - raw.mean(),
        "response_mask": torch.rand(batch, seq, generator=generator) > 0.5,
    }


def clip_loss_float64(advantages, policy, old, cliprange) -> np.ndarray:
    """-min(r A, clip(r, 1 - eps, 1 + eps) A) per token, r = exp(policy - old), in float64."""
    a, ratio = advantages.double().numpy(), np.exp(policy.double().numpy() - old.double().numpy())
    return -np.minimum(ratio * a, np.clip(ratio, 1 - cliprange, 1 + cliprange) * a)


def test_compute_group_normalized_rewards_normalize_by_std():
    advantages, raw, metadata = run_compute_group_normalized_rewards(
        reward_fn=reward_fn,
        rollout_responses=RESPONSES,
        repeated_ground_truths=TRUTHS,
        group_size=4,
        advantage_eps=1e-6,
        normalize_by_std=True,
    )
    groups = RAW.reshape(2, 4)
    expected = (groups - groups.mean(1, keepdims=True)) / (groups.std(1, ddof=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(raw.numpy(), RAW, rtol=0, atol=1e-7)
    np.testing.assert_allclose(advantages.numpy(), expected.reshape(-1), rtol=1e-6, atol=1e-6)
    # by hand, group 1: mean 0.275, unbiased std 0.2217 (the biased std, 0.1920, would give other numbers)
    assert advantages[1].item() == pytest.approx((0.5 - 0.275) / (np.sqrt(0.1475 / 3) + 1e-6), rel=1e-6)
    assert isinstance(metadata, dict)


def test_compute_group_normalized_rewards_no_normalize_by_std():
    advantages, raw, _ = run_compute_group_normalized_rewards(
        reward_fn=reward_fn,
        rollout_responses=RESPONSES,
        repeated_ground_truths=TRUTHS,
        group_size=4,
        advantage_eps=1e-6,
        normalize_by_std=False,
    )
    # r - group mean, no eps added: group 1's mean 0.275, group 2's 0.45
    expected = RAW - np.repeat([0.275, 0.45], 4)
    np.testing.assert_allclose(advantages.numpy(), expected, rtol=0, atol=1e-7)
    np.testing.assert_allclose(raw.numpy(), RAW, rtol=0, atol=1e-7)


def test_compute_naive_policy_gradient_loss():
    x = inputs()
    loss = run_compute_naive_policy_gradient_loss(
        raw_rewards_or_advantages=x["raw_rewards"], policy_log_probs=x["policy_log_probs"]
    )
    expected = -x["raw_rewards"].double().numpy() * x["policy_log_probs"].double().numpy()  # broadcast over tokens
    assert loss.shape == (2, 10)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_compute_grpo_clip_loss_large_cliprange():
    x = inputs()
    loss, metadata = run_compute_grpo_clip_loss(
        advantages=x["advantages"],
        policy_log_probs=x["policy_log_probs"],
        old_log_probs=x["old_log_probs"],
        cliprange=10.0,
    )
    ratio = np.exp(x["policy_log_probs"].double().numpy() - x["old_log_probs"].double().numpy())
    expected = clip_loss_float64(x["advantages"], x["policy_log_probs"], x["old_log_probs"], 10.0)
    inside = (ratio > 1 - 10.0) & (ratio < 1 + 10.0)
    # nothing is clipped where the ratio stays inside [-9, 11]: the loss is -r A there
    np.testing.assert_allclose(expected[inside], (-ratio * x["advantages"].double().numpy())[inside], rtol=1e-12)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert isinstance(metadata, dict)


def test_compute_grpo_clip_loss_small_cliprange():
    x = inputs()
    loss, _ = run_compute_grpo_clip_loss(
        advantages=x["advantages"],
        policy_log_probs=x["policy_log_probs"],
        old_log_probs=x["old_log_probs"],
        cliprange=0.1,
    )
    np.testing.assert_allclose(
        loss.numpy(),
        clip_loss_float64(x["advantages"], x["policy_log_probs"], x["old_log_probs"], 0.1),
        rtol=1e-5,
        atol=1e-6,
    )
    # both sides of the clip, by hand: A = +1 with r = 1.5 is held at 1 + 0.1; A = -1 with r = 0.5 at 1 - 0.1;
    # A = +1 with r = 0.5 and A = -1 with r = 1.5 are not clipped (the min keeps the unclipped, lower term)
    policy = torch.log(torch.tensor([[1.5, 0.5], [0.5, 1.5]], dtype=torch.float64))
    hand, _ = run_compute_grpo_clip_loss(
        advantages=torch.tensor([[1.0], [-1.0]], dtype=torch.float64),
        policy_log_probs=policy,
        old_log_probs=torch.zeros(2, 2, dtype=torch.float64),
        cliprange=0.1,
    )
    np.testing.assert_allclose(hand.numpy(), [[-1.1, -0.5], [0.9, 1.5]], rtol=1e-12)


def test_compute_policy_gradient_loss_no_baseline():
    x = inputs()
    loss, _ = run_compute_policy_gradient_loss(
        policy_log_probs=x["policy_log_probs"], loss_type="no_baseline", raw_rewards=x["raw_rewards"]
    )
    expected = -x["raw_rewards"].double().numpy() * x["policy_log_probs"].double().numpy()
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_compute_policy_gradient_loss_reinforce_with_baseline():
    x = inputs()
    loss, _ = run_compute_policy_gradient_loss(
        policy_log_probs=x["policy_log_probs"], loss_type="reinforce_with_baseline", advantages=x["advantages"]
    )
    expected = -x["advantages"].double().numpy() * x["policy_log_probs"].double().numpy()
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6, atol=1e-7)


def test_compute_policy_gradient_loss_grpo_clip():
    x = inputs()
    loss, _ = run_compute_policy_gradient_loss(
        policy_log_probs=x["policy_log_probs"],
        loss_type="grpo_clip",
        advantages=x["advantages"],
        old_log_probs=x["old_log_probs"],
        cliprange=0.5,
    )
    expected = clip_loss_float64(x["advantages"], x["policy_log_probs"], x["old_log_probs"], 0.5)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5, atol=1e-6)


# A (3, 4) tensor whose mask leaves column 2 and row 2 empty: a mean over nothing is NaN, like torch's mean of
# nothing (the handouts' snapshot holds 260 NaNs of such slices)
TENSOR = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, -6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]])
MASK = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.bool)


def test_masked_mean_dim0():
    out = run_masked_mean(tensor=TENSOR, mask=MASK, dim=0)
    # columns by hand: (1 + 5) / 2, 2 / 1, nothing, 8 / 1
    np.testing.assert_array_equal(out.numpy(), [3.0, 2.0, np.nan, 8.0])


def test_masked_mean_dim1():
    out = run_masked_mean(tensor=TENSOR, mask=MASK, dim=1)
    np.testing.assert_array_equal(out.numpy(), [1.5, 6.5, np.nan])  # (1 + 2) / 2, (5 + 8) / 2, nothing


def test_masked_mean_dimlast():
    np.testing.assert_array_equal(run_masked_mean(tensor=TENSOR, mask=MASK, dim=-1).numpy(), [1.5, 6.5, np.nan])


def test_masked_mean_dimNone():
    out = run_masked_mean(tensor=TENSOR, mask=MASK)
    assert out.item() == pytest.approx((1 + 2 + 5 + 8) / 4)
    assert torch.isnan(run_masked_mean(tensor=TENSOR, mask=torch.zeros_like(MASK))).item()


def microbatch_reference(x: dict[str, torch.Tensor], cliprange: float, accumulation: int) -> tuple[float, np.ndarray]:
    """Loss = mean over sequences of (sum of masked token losses / masked tokens) / accumulation, and its gradient
    per log-prob, in float64: the token's d loss / d logp (-r A where the clip does not hold it, else 0) times
    mask / tokens / batch / accumulation."""
    a = x["advantages"].double().numpy()
    policy, old = x["policy_log_probs"].double().numpy(), x["old_log_probs"].double().numpy()
    mask = x["response_mask"].numpy().astype(np.float64)
    ratio = np.exp(policy - old)
    token_loss = clip_loss_float64(x["advantages"], x["policy_log_probs"], x["old_log_probs"], cliprange)
    # where the clipped term is strictly the smaller, r lies outside the range and the term is constant in logp
    held = np.clip(ratio, 1 - cliprange, 1 + cliprange) * a < ratio * a
    d_token = np.where(held, 0.0, -ratio * a)
    counts, batch = mask.sum(1, keepdims=True), mask.shape[0]
    loss = float(((token_loss * mask).sum(1) / counts[:, 0]).mean() / accumulation)
    return loss, d_token * mask / counts / batch / accumulation


def test_grpo_microbatch_train_step_grpo_clip():
    x = inputs()
    policy = x["policy_log_probs"].clone().requires_grad_(True)
    loss, metadata = run_grpo_microbatch_train_step(
        policy_log_probs=policy,
        response_mask=x["response_mask"],
        gradient_accumulation_steps=2,
        loss_type="grpo_clip",
        raw_rewards=x["raw_rewards"],
        advantages=x["advantages"],
        old_log_probs=x["old_log_probs"],
        cliprange=0.1,
    )
    expected_loss, expected_grad = microbatch_reference(x, 0.1, 2)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    np.testing.assert_allclose(policy.grad.numpy(), expected_grad, rtol=1e-5, atol=1e-8)
    assert isinstance(metadata, dict)
    # a response of no tokens (an all-zero mask row) adds 0 to the loss and gets no gradient; the other row keeps
    # its share, 1 / batch
    empty = dict(x, response_mask=x["response_mask"].clone())
    empty["response_mask"][1] = False
    policy = x["policy_log_probs"].clone().requires_grad_(True)
    loss, _ = run_grpo_microbatch_train_step(
        policy_log_probs=policy,
        response_mask=empty["response_mask"],
        gradient_accumulation_steps=2,
        loss_type="grpo_clip",
        raw_rewards=x["raw_rewards"],
        advantages=x["advantages"],
        old_log_probs=x["old_log_probs"],
        cliprange=0.1,
    )
    mask0 = empty["response_mask"][0].numpy()
    token_loss = clip_loss_float64(x["advantages"], x["policy_log_probs"], x["old_log_probs"], 0.1)[0]
    assert loss.item() == pytest.approx((token_loss * mask0).sum() / mask0.sum() / 2 / 2, rel=1e-5)
    _, full_grad = microbatch_reference(x, 0.1, 2)  # row 0's gradient: its tokens' share as before
    np.testing.assert_allclose(policy.grad[0].numpy(), full_grad[0], rtol=1e-5, atol=1e-8)
    assert policy.grad[1].abs().sum().item() == 0.0


def test_grpo_microbatch_train_step_grpo_clip_10_steps():
    x = inputs()
    policy = x["policy_log_probs"].clone().requires_grad_(True)
    losses, grads = [], []
    for _ in range(10):  # the handouts' test: .grad is never zeroed between calls, so it accumulates
        loss, _ = run_grpo_microbatch_train_step(
            policy_log_probs=policy,
            response_mask=x["response_mask"],
            gradient_accumulation_steps=2,
            loss_type="grpo_clip",
            raw_rewards=x["raw_rewards"],
            advantages=x["advantages"],
            old_log_probs=x["old_log_probs"],
            cliprange=0.1,
        )
        losses.append(loss.item())
        grads.append(policy.grad.clone())
    expected_loss, expected_grad = microbatch_reference(x, 0.1, 2)
    assert losses == pytest.approx([expected_loss] * 10, rel=1e-5)
    for k, grad in enumerate(grads, start=1):
        np.testing.assert_allclose(grad.numpy(), k * expected_grad, rtol=1e-5, atol=1e-8)
