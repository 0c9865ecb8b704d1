import math

import numpy as np
import pytest
import torch

from tests.adapters import (
    run_compute_grpo_clip_loss,
    run_compute_naive_policy_gradient_loss,
    run_compute_policy_gradient_loss,
)

ADV = torch.tensor([[1.5], [-0.5]])
LOGP = torch.tensor([[-1.0, -0.2, -3.0], [-0.7, -2.0, -0.1]])
OLD = torch.tensor([[-1.5, -0.2, -2.0], [-0.1, -2.1, -0.6]])


def clip_loss_reference(adv, logp, old, eps):
    """Element by element, in float64: -min(r * A, clip(r) * A) and whether the clipped side won."""
    loss, clipped = np.zeros(logp.shape), np.zeros(logp.shape, dtype=bool)
    for i in range(logp.shape[0]):
        a = float(adv[i, 0])
        for t in range(logp.shape[1]):
            r = math.exp(float(logp[i, t]) - float(old[i, t]))
            plain, clamped = r * a, min(max(r, 1 - eps), 1 + eps) * a
            loss[i, t] = -min(plain, clamped)
            clipped[i, t] = clamped < plain
    return loss, clipped


def test_naive_loss_by_hand():
    loss = run_compute_naive_policy_gradient_loss(ADV, LOGP)
    assert loss[0].tolist() == pytest.approx([1.5, 0.3, 4.5], abs=1e-5)
    assert loss[1].tolist() == pytest.approx([-0.35, -1.0, -0.05], abs=1e-5)


def test_grpo_clip_loss_matches_reference():
    loss, meta = run_compute_grpo_clip_loss(ADV, LOGP, OLD, 0.2)
    ref, ref_clipped = clip_loss_reference(ADV, LOGP, OLD, 0.2)
    np.testing.assert_allclose(loss.numpy(), ref, atol=1e-5)
    assert meta["clipped"].numpy().tolist() == ref_clipped.tolist()
    assert meta["clip_fraction"].item() == pytest.approx(ref_clipped.mean(), abs=1e-6)
    # by hand: ratio e^0.5 = 1.6487 with A = 1.5 is clipped to 1.2 -> loss -1.8
    assert loss[0, 0].item() == pytest.approx(-1.8, abs=1e-5)
    # ratio e^-0.6 = 0.5488 with A = -0.5: the clip (0.8 * -0.5 = -0.4) is smaller -> loss 0.4
    assert loss[1, 0].item() == pytest.approx(0.4, abs=1e-5)


def test_policy_gradient_dispatch():
    raw = torch.tensor([[1.0], [0.0]])
    loss, meta = run_compute_policy_gradient_loss(LOGP, "no_baseline", raw_rewards=raw)
    assert torch.allclose(loss, -raw * LOGP) and meta == {}
    loss, _ = run_compute_policy_gradient_loss(LOGP, "reinforce_with_baseline", advantages=ADV)
    assert torch.allclose(loss, -ADV * LOGP)
    loss, meta = run_compute_policy_gradient_loss(LOGP, "grpo_clip", advantages=ADV, old_log_probs=OLD, cliprange=0.2)
    assert np.allclose(loss.numpy(), clip_loss_reference(ADV, LOGP, OLD, 0.2)[0], atol=1e-5) and "clipped" in meta
    loss, _ = run_compute_policy_gradient_loss(LOGP, "grpo_no_clip", advantages=ADV, old_log_probs=OLD)
    expected = -np.exp(LOGP.numpy().astype(np.float64) - OLD.numpy()) * ADV.numpy()
    np.testing.assert_allclose(loss.numpy(), expected, atol=1e-5)


@pytest.mark.parametrize(
    "loss_type,kwargs,missing",
    [
        ("no_baseline", {"advantages": ADV}, "raw_rewards"),
        ("reinforce_with_baseline", {"raw_rewards": ADV}, "advantages"),
        ("grpo_clip", {"advantages": ADV, "cliprange": 0.2}, "old_log_probs"),
        ("grpo_clip", {"advantages": ADV, "old_log_probs": OLD}, "cliprange"),
        ("grpo_no_clip", {"advantages": ADV}, "old_log_probs"),
    ],
)
def test_missing_inputs_raise_naming_them(loss_type, kwargs, missing):
    with pytest.raises(ValueError, match=missing):
        run_compute_policy_gradient_loss(LOGP, loss_type, **kwargs)


def test_unknown_loss_type_raises():
    with pytest.raises(ValueError, match="unknown loss_type 'ppo'"):
        run_compute_policy_gradient_loss(LOGP, "ppo", advantages=ADV)
