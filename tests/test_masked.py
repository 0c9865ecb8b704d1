import math

import numpy as np
import pytest
import torch

from tests.adapters import run_masked_mean, run_masked_normalize

T = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], [-1.0, 0.5, 7.0, 2.0]])
M = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)


def test_masked_mean_by_hand():
    assert run_masked_mean(T, M).item() == pytest.approx((1 + 2 + 20 + 30 + 40) / 5, abs=1e-5)
    per_row = run_masked_mean(T, M, dim=1)
    assert per_row[0].item() == pytest.approx(1.5, abs=1e-5)
    assert per_row[1].item() == pytest.approx(30.0, abs=1e-5)
    assert math.isnan(per_row[2].item())  # nothing selected: NaN, like torch's mean of nothing
    assert torch.equal(run_masked_mean(T, M, dim=-1).isnan(), per_row.isnan())


def test_masked_mean_dim0_matches_numpy():
    t, m = T.numpy().astype(np.float64), M.numpy().astype(np.float64)
    expected = [(t[:, j] * m[:, j]).sum() / m[:, j].sum() if m[:, j].sum() else np.nan for j in range(4)]
    np.testing.assert_allclose(run_masked_mean(T, M, dim=0).numpy(), expected, atol=1e-5)


def test_masked_mean_all_masked_is_nan_and_float_mask_works():
    assert math.isnan(run_masked_mean(T, torch.zeros_like(M)).item())
    assert run_masked_mean(T, M.float()).item() == pytest.approx(93 / 5, abs=1e-5)


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
def test_masked_normalize_matches_numpy(dim):
    t, m = T.numpy().astype(np.float64), M.numpy().astype(np.float64)
    expected = (t * m).sum(axis=dim) / 3.5
    np.testing.assert_allclose(run_masked_normalize(T, M, dim=dim, normalize_constant=3.5).numpy(), expected, atol=1e-5)


def test_masked_normalize_default_constant_is_plain_masked_sum():
    assert run_masked_normalize(T, M).item() == pytest.approx(93.0, abs=1e-5)
    # an all-masked row sums to 0, not NaN (the constant is fixed)
    assert run_masked_normalize(T, M, dim=1)[2].item() == 0.0


def test_pku_hw3_length_normalization_example_prints_the_handouts_numbers():
    """PKU HW3 §6's worked example (Lambert's): 4 and 7 response tokens, advantage 2, max_gen_len 7. The handout
    builds integer tensors with requires_grad, which torch refuses; floats give its printed values."""
    ratio = torch.ones(2, 7, requires_grad=True)
    advs = torch.full((2, 7), 2.0)
    masks = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1] * 7])
    mean = run_masked_mean(ratio * advs, masks, dim=1)
    normalized = run_masked_normalize(ratio * advs, masks, dim=1, normalize_constant=7)
    assert mean.tolist() == [2.0, 2.0] and normalized.tolist() == pytest.approx([1.1429, 2.0], abs=1e-4)
    mean.mean().backward()
    assert ratio.grad.tolist() == [[0.25] * 4 + [0.0] * 3, pytest.approx([1 / 7] * 7)]
    ratio.grad.zero_()
    normalized.mean().backward()
    assert ratio.grad.tolist() == [pytest.approx([1 / 7] * 4 + [0.0] * 3), pytest.approx([1 / 7] * 7)]
