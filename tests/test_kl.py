import math

import pytest
import torch

from alignment.kl import kl_estimates


def test_k1_k3_by_hand_over_response_tokens():
    policy = torch.tensor([[-1.0, -0.5, -2.0]])
    reference = torch.tensor([[-1.5, -0.5, -9.0]])
    mask = torch.tensor([[True, True, False]])  # the last token is padding and must not count
    out = kl_estimates(policy, reference, mask)
    # r = ref - policy = [-0.5, 0.0]; k1 = -r; k3 = e^r - r - 1
    assert out["k1"] == pytest.approx((0.5 + 0.0) / 2)
    assert out["k3"] == pytest.approx((math.exp(-0.5) + 0.5 - 1 + 0.0) / 2)


def test_eq8_sums_each_response_then_averages_over_responses():
    """UW's Eq. 8: (1/N) sum_i sum_t [log pi(o_t) - log pi_ref(o_t)], prompt and padding tokens masked out."""
    policy = torch.tensor([[-1.0, -0.5, -2.0, -3.0], [-0.2, -0.1, -0.3, -4.0]])
    reference = torch.tensor([[-1.5, -0.5, -9.0, -9.0], [-0.2, -1.1, -0.1, -9.0]])
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    # response 1: (-1 + 1.5) + (-0.5 + 0.5) = 0.5; response 2: 0 + 1.0 + (-0.2) = 0.8
    out = kl_estimates(policy, reference, mask)
    assert out["k1_sum"] == pytest.approx((0.5 + 0.8) / 2)
    assert out["k1"] == pytest.approx((0.5 + 0.0 + 0.0 + 1.0 - 0.2) / 5)  # the per-token mean beside it


def test_identical_policies_give_zero_and_k3_is_never_negative():
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    mask = torch.ones(4, 6, dtype=torch.bool)
    assert kl_estimates(a, a, mask) == {"k1": 0.0, "k3": 0.0, "k1_sum": 0.0}
    assert kl_estimates(a, b, mask)["k3"] > 0


def test_k1_and_k3_estimate_the_true_kl_from_samples():
    """Sampling from p, both estimators average to KL(p || q) computed exactly."""
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    exact = float((p * (p / q).log()).sum())
    draws = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    out = kl_estimates(p.log()[draws][None], q.log()[draws][None], torch.ones(1, len(draws), dtype=torch.bool))
    assert out["k1"] == pytest.approx(exact, abs=0.01)
    assert out["k3"] == pytest.approx(exact, abs=0.01)


def test_rollout_mismatch_by_hand():
    from alignment.rollout_correction import rollout_mismatch

    found = rollout_mismatch(torch.tensor([0.1, -0.2, 0.0]))  # trainer minus engine, per response token
    assert found["rollout_logprob_diff_mean"] == pytest.approx(0.1)
    assert found["rollout_logprob_diff_max"] == pytest.approx(0.2)
    k3 = ((math.exp(0.1) - 0.1 - 1) + (math.exp(-0.2) + 0.2 - 1)) / 3
    assert found["rollout_kl_k3"] == pytest.approx(k3, rel=1e-5)  # float32
