"""The sampling kernel (alignment/kernels/sampling.py) against the torch draw it stands in for
(decoding.sample_tokens_at over the log-softmax's exp), in Triton's interpreter on the CPU: the same tokens from the
same uniforms, the same log-probs, never a token of probability 0, at the ends of the CDF too; and compiled for the
GPUs users train on. The interpreted tests run in a pytest of their own that tests/test_triton_support.py starts; on a
GPU: tests/test_gpu_rollout.py."""

import pytest
import torch

from alignment.rollout.decoding import sample_tokens_at, sampling_log_probs
from tests.triton_checks import TRITON_TYPES, assert_resident, compiled, interpreted, resource_usage


@compiled
@pytest.mark.parametrize("capability", [80, 90])  # A100, H100
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_kernel_compiles_for_the_gpus_users_train_on(dtype, capability):
    from alignment.kernels import sampling as sampling_kernel

    signature = {"logits": "*" + TRITON_TYPES[dtype], "uniforms": "*fp64", "tokens": "*i64", "log_probs": "*fp32"}
    signature |= {"vocab": "i32", "row_stride": "i32", "inverse_temperature": "fp32"}
    usage = resource_usage(sampling_kernel._sample_kernel, signature, {"BLOCK": sampling_kernel.BLOCK}, capability)
    assert_resident(usage, programs=2)  # two programs an SM: an H100's 132 SMs draw a decode batch of 256 rows at once


def torch_draw(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float):
    log_probs = sampling_log_probs(logits, temperature, 1.0)
    tokens = sample_tokens_at(log_probs.exp(), uniforms)
    return tokens, log_probs.gather(-1, tokens[:, None]).squeeze(-1)


# each dtype at one temperature by default, the other six pairs under -m slow (each pair takes seconds interpreted)
DRAWS = [
    pytest.param(dtype, temperature, id=f"dtype{d}-{temperature}", marks=() if d == t else pytest.mark.slow)
    for d, dtype in enumerate([torch.float32, torch.bfloat16, torch.float16])
    for t, temperature in enumerate([1.0, 0.7, 1.3])
]


@interpreted
@pytest.mark.parametrize("dtype,temperature", DRAWS)
def test_the_kernel_draws_what_the_torch_path_draws(dtype, temperature):
    """64 rows of 5,000 words (three blocks, the last ragged), a banned stretch of -inf as min_tokens' EOS ban makes."""
    from alignment.kernels.sampling import sample_rows

    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(64, 5000, generator=generator) * 3).to(dtype)
    logits[:, 1000:1100] = float("-inf")
    uniforms = torch.rand(64, dtype=torch.float64, generator=generator)
    tokens, log_probs = sample_rows(logits, uniforms, temperature)
    expected_tokens, _ = torch_draw(logits, uniforms, temperature)
    assert tokens.dtype == torch.long and log_probs.dtype == torch.float32
    # the same tokens but where a point lies within rounding of a boundary between two: then the CDF moves by less than
    # 1e-6 between the two draws (the sums run in another order)
    probs = sampling_log_probs(logits, temperature, 1.0).double().exp()
    ends = probs.cumsum(dim=-1) / probs.sum(dim=-1, keepdim=True)
    differ = (tokens != expected_tokens).nonzero().flatten().tolist()
    assert len(differ) <= 2, differ
    for row in differ:
        low, high = sorted((tokens[row].item(), expected_tokens[row].item()))
        assert ends[row, high - 1] - ends[row, low - 1] < 1e-6, (row, low, high)
    expected_log_probs = sampling_log_probs(logits, temperature, 1.0).gather(-1, tokens[:, None]).squeeze(-1)
    torch.testing.assert_close(log_probs, expected_log_probs, rtol=0, atol=5e-6)


@interpreted
def test_the_ends_of_the_cdf_take_tokens_of_nonzero_probability():
    """A point of 0 takes the first word of nonzero probability, a point within rounding of 1 the last, however many
    -inf words come before or after them."""
    from alignment.kernels.sampling import sample_rows

    logits = torch.full((3, 3000), float("-inf"))
    logits[0, 2500:2600] = 0.0  # only words 2500..2599: the first and the last in the third block
    logits[1, :] = torch.linspace(-5, 5, 3000)
    logits[1, 2990:] = float("-inf")
    logits[2, 7] = 4.0  # one word alone holds all the mass
    for point, expected in ((0.0, [2500, 0, 7]), (1 - 2**-53, [2599, 2989, 7])):
        tokens, log_probs = sample_rows(logits, torch.full((3,), point, dtype=torch.float64), 1.0)
        assert tokens.tolist() == expected
        assert torch.isfinite(log_probs).all() and log_probs[2] == 0
    assert torch.equal(tokens, torch_draw(logits, torch.full((3,), 1 - 2**-53, dtype=torch.float64), 1.0)[0])


@interpreted
def test_bad_input_is_refused_by_name():
    from alignment.kernels.sampling import sample_rows

    uniforms = torch.zeros(2, dtype=torch.float64)
    with pytest.raises(ValueError, match="temperature above 0"):
        sample_rows(torch.zeros(2, 8), uniforms, 0.0)
    with pytest.raises(ValueError, match="rows contiguous"):
        sample_rows(torch.zeros(8, 2).t(), uniforms, 1.0)
    with pytest.raises(ValueError, match="float64"):
        sample_rows(torch.zeros(2, 8, dtype=torch.float64), uniforms, 1.0)


@interpreted
def test_a_row_with_nothing_to_draw_from_draws_minus_one():
    """All -inf (a vocabulary banned whole), a NaN (an fp16 overflow), an inf: token -1 and a NaN log-prob, never a
    silent token 0; the rows beside them draw as before."""
    from alignment.kernels.sampling import sample_rows

    generator = torch.Generator().manual_seed(2)
    logits = torch.randn(5, 3000, generator=generator)
    uniforms = torch.rand(5, dtype=torch.float64, generator=generator)
    clean_tokens, clean_lp = sample_rows(logits, uniforms, 1.0)
    logits[1], logits[2, 2500], logits[3, 10] = float("-inf"), float("nan"), float("inf")
    tokens, log_probs = sample_rows(logits, uniforms, 1.0)
    assert tokens[1:4].tolist() == [-1, -1, -1] and log_probs[1:4].isnan().all()
    assert torch.equal(tokens[[0, 4]], clean_tokens[[0, 4]]) and torch.equal(log_probs[[0, 4]], clean_lp[[0, 4]])
