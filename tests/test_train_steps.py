"""Microbatch steps: loss values and gradients against closed forms derived by hand.

For a loss L = mean_b( sum_t l_bt m_bt / n_b ) / G with per-token loss l, the gradient w.r.t. log-prob x_bt
is (dl_bt/dx_bt) m_bt / n_b / B / G, and K accumulated identical steps give K times that.
"""

import math

import numpy as np
import pytest
import torch

from alignment.grpo_step import grpo_microbatch_train_step
from tests.adapters import run_grpo_microbatch_train_step, run_sft_microbatch_train_step

LOGP = [[-1.0, -0.2, -3.0, -0.5], [-0.7, -2.0, -0.1, -0.9], [-0.3, -0.4, -1.2, -2.2]]
OLD = [[-1.5, -0.2, -2.0, -0.5], [-0.1, -2.1, -0.6, -0.8], [-0.3, -0.9, -1.1, -2.0]]
MASK = [[1, 1, 1, 0], [0, 1, 1, 1], [1, 0, 0, 0]]
ADV = [1.5, -0.5, 0.25]
RAW = [1.0, 0.0, 1.0]
G = 4


def leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def token_loss_and_grad(loss_type: str, b: int, t: int, eps: float = 0.2) -> tuple[float, float]:
    """Per-token loss and its derivative w.r.t. the token's log-prob, in float64."""
    x, a = LOGP[b][t], (RAW if loss_type == "no_baseline" else ADV)[b]
    if loss_type in ("no_baseline", "reinforce_with_baseline"):
        return -a * x, -a
    r = math.exp(x - OLD[b][t])
    if loss_type == "grpo_no_clip":
        return -r * a, -r * a
    clamped = min(max(r, 1 - eps), 1 + eps)
    if clamped * a < r * a:  # the clipped side is the min: constant in x unless r is inside the range
        return -clamped * a, (-r * a if 1 - eps <= r <= 1 + eps else 0.0)
    return -r * a, -r * a


def reference(loss_type: str, constant: float | None = None) -> tuple[float, np.ndarray]:
    batch = len(LOGP)
    total, grad = 0.0, np.zeros((batch, 4))
    for b in range(batch):
        denom = constant if constant is not None else sum(MASK[b])
        for t in range(4):
            if MASK[b][t]:
                term, dl = token_loss_and_grad(loss_type, b, t)
                total += term / denom / batch / G
                grad[b, t] = dl / denom / batch / G
    return total, grad


def call(loss_type, logp, **extra):
    return run_grpo_microbatch_train_step(
        logp,
        torch.tensor(MASK, dtype=torch.bool),
        G,
        loss_type,
        raw_rewards=torch.tensor(RAW).unsqueeze(1),
        advantages=torch.tensor(ADV).unsqueeze(1),
        old_log_probs=torch.tensor(OLD),
        cliprange=0.2,
        **extra,
    )


@pytest.mark.parametrize("loss_type", ["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip"])
def test_grpo_step_loss_and_gradients_after_1_and_10_steps(loss_type):
    expected_loss, expected_grad = reference(loss_type)
    logp = leaf(LOGP)
    loss, meta = call(loss_type, logp)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-5)
    assert meta["unscaled_loss"].item() == pytest.approx(expected_loss * G, abs=1e-5)
    np.testing.assert_allclose(logp.grad.numpy(), expected_grad, atol=1e-5)
    for _ in range(9):
        call(loss_type, logp)
    np.testing.assert_allclose(logp.grad.numpy(), 10 * expected_grad, atol=1e-5)


def test_grpo_clip_fraction_counts_response_tokens_only():
    _, meta = call("grpo_clip", leaf(LOGP))
    clipped = []
    for b in range(3):
        for t in range(4):
            if MASK[b][t]:
                r = math.exp(LOGP[b][t] - OLD[b][t])
                clipped.append(min(max(r, 0.8), 1.2) * ADV[b] < r * ADV[b])
    assert meta["clip_fraction"].item() == pytest.approx(sum(clipped) / len(clipped), abs=1e-6)
    assert 0 < sum(clipped) < len(clipped)  # the fixture exercises both sides


def test_dr_grpo_constant_normalization():
    expected_loss, expected_grad = reference("reinforce_with_baseline", constant=16.0)
    logp = leaf(LOGP)
    loss, _ = grpo_microbatch_train_step(
        logp,
        torch.tensor(MASK),
        G,
        "reinforce_with_baseline",
        advantages=torch.tensor(ADV).unsqueeze(1),
        normalize_constant=16.0,
    )
    assert loss.item() == pytest.approx(expected_loss, abs=1e-5)
    np.testing.assert_allclose(logp.grad.numpy(), expected_grad, atol=1e-5)


def test_old_log_probs_receive_no_gradient():
    old = torch.tensor(OLD, requires_grad=True)
    logp = leaf(LOGP)
    run_grpo_microbatch_train_step(
        logp,
        torch.tensor(MASK),
        G,
        "grpo_clip",
        advantages=torch.tensor(ADV).unsqueeze(1),
        old_log_probs=old.detach(),
        cliprange=0.2,
    )
    assert old.grad is None and logp.grad is not None


@pytest.mark.parametrize("constant", [1.0, 7.5])
def test_sft_step_loss_and_gradients_after_1_and_10_steps(constant):
    batch = len(LOGP)
    nll = -sum(LOGP[b][t] for b in range(batch) for t in range(4) if MASK[b][t])
    expected_loss = nll / constant / batch / G
    expected_grad = -np.array(MASK, dtype=np.float64) / constant / batch / G
    logp = leaf(LOGP)
    loss, meta = run_sft_microbatch_train_step(logp, torch.tensor(MASK), G, constant)
    assert loss.item() == pytest.approx(expected_loss, abs=1e-5)
    assert meta["response_tokens"].item() == 3 + 3 + 1
    np.testing.assert_allclose(logp.grad.numpy(), expected_grad, atol=1e-5)
    for _ in range(9):
        run_sft_microbatch_train_step(logp, torch.tensor(MASK), G, constant)
    np.testing.assert_allclose(logp.grad.numpy(), 10 * expected_grad, atol=1e-5)
