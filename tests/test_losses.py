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


def test_truncated_importance_weights_by_hand():
    from alignment.rollout_correction import truncated_importance_weights

    train = torch.tensor([[math.log(0.5), math.log(0.9)], [math.log(0.2), 0.0]], requires_grad=True)
    rollout = torch.tensor([[math.log(0.25), math.log(0.9)], [math.log(0.4), math.log(0.1)]])
    weights = truncated_importance_weights(train, rollout, cap=2.0)
    # ratios 0.5 / 0.25 = 2, 1, 0.2 / 0.4 = 0.5, 1 / 0.1 = 10 -> capped at 2
    assert torch.allclose(weights, torch.tensor([[2.0, 1.0], [0.5, 2.0]]))
    assert not weights.requires_grad  # a weight on the gradient, never differentiated itself


def test_tis_weights_the_policy_gradient_term_of_each_token():
    from alignment.grpo_step import grpo_microbatch_train_step

    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    rollout = torch.tensor([[-1.0 - math.log(3.0), -2.0 + math.log(2.0), -0.5]])  # ratios 3, 0.5, 1
    mask = torch.tensor([[True, True, False]])
    loss, meta = grpo_microbatch_train_step(
        logp,
        mask,
        1,
        "reinforce_with_baseline",
        advantages=torch.tensor([[2.0]]),
        rollout_log_probs=rollout,
        tis_cap=2.0,
    )
    # per-token loss -A * w * logp with w = min(3, 2) = 2 and 0.5, masked mean over 2 tokens:
    # (-2 * 2 * -1 + -2 * 0.5 * -2) / 2 = (4 + 2) / 2 = 3; d/dlogp = -A * w / 2 = -2, -0.5, 0
    assert loss.item() == pytest.approx(3.0)
    assert torch.allclose(logp.grad, torch.tensor([[-2.0, -0.5, 0.0]]))
    assert meta["tis_weight_mean"].item() == pytest.approx(1.25)
    with pytest.raises(ValueError, match="rollout_log_probs"):
        grpo_microbatch_train_step(logp, mask, 1, "reinforce_with_baseline", advantages=torch.ones(1, 1), tis_cap=2.0)


def test_tis_on_grpo_clip_uses_old_log_probs_as_pi_train():
    from alignment.grpo_step import grpo_microbatch_train_step

    logp = torch.tensor([[math.log(0.6)]], requires_grad=True)
    old = torch.tensor([[math.log(0.5)]])
    rollout = torch.tensor([[math.log(0.4)]])
    loss, _ = grpo_microbatch_train_step(
        logp,
        torch.ones(1, 1, dtype=torch.bool),
        1,
        "grpo_clip",
        advantages=torch.tensor([[1.0]]),
        old_log_probs=old,
        cliprange=0.1,
        rollout_log_probs=rollout,
        tis_cap=5.0,
    )
    # ratio 0.6 / 0.5 = 1.2, clipped to 1.1 for A = 1; TIS weight old / rollout = 0.5 / 0.4 = 1.25 (not 0.6 / 0.4)
    assert loss.item() == pytest.approx(-1.1 * 1.25)


@pytest.mark.parametrize(
    "overrides", [dict(tis_cap=0.0), dict(tis_cap=2.0, sampling_temperature=0.7), dict(tis_cap=2.0, sampling_top_p=0.9)]
)
def test_tis_cap_is_checked_before_a_run(overrides):
    from alignment.grpo.config import GRPOConfig, validate

    with pytest.raises(ValueError, match=r"--tis-cap .* needs --sampling-temperature 1 and --sampling-top-p 1"):
        validate(GRPOConfig(**overrides))
    validate(GRPOConfig(tis_cap=2.0))  # off-policy or on, any loss: only the cap and the sampling matter
