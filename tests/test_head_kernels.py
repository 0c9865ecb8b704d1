"""The chunked head's Triton kernels (alignment/kernels/head.py) against its torch ops, in Triton's interpreter
on the CPU: a chunk's label log-probs, log-sum-exps and entropies, the logit gradient, and the whole chunked head
forward and backward on them; and compiled for the GPUs users train on (Triton compiles without one), each within
the registers that keep every program of a chunk resident and with nothing spilled. The interpreted tests run in a
pytest of their own that tests/test_triton_support.py starts; the compiled kernels run on a GPU in
tests/test_gpu_learner.py."""

import math

import pytest
import torch
from torch import nn

import alignment.models.chunked_head as chunked_head
from alignment.models.chunked_head import TORCH_OPS, ElementwiseOps, fused_log_probs_and_entropy
from tests.triton_checks import TRITON_TYPES, assert_resident, compiled, interpreted, resource_usage

HALF = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3}  # a unit in the last place, relative


@compiled
@pytest.mark.parametrize("capability", [80, 90])  # A100, H100
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_kernels_compile_for_the_gpus_users_train_on(dtype, capability):
    from alignment.kernels import head as head_kernels

    constants = {"BLOCK": head_kernels.MAX_BLOCK}  # as chunk_stats and chunk_grad launch them at 151,936 words
    logits = "*" + TRITON_TYPES[dtype]
    rows = {"labels": "*i64", "vocab": "i32", "row_stride": "i32"}
    stats = {"logits": logits, "log_probs": "*fp32", "log_totals": "*fp32", "entropy": "*fp32"} | rows
    assert_resident(resource_usage(head_kernels._stats_kernel, stats, constants, capability))
    for grad in {dtype, torch.float32}:  # the gradient in the logits' dtype (in place) or in float32
        grads = {"logits": logits, "log_totals": "*fp32", "upstream": "*fp32", "grad": "*" + TRITON_TYPES[grad]}
        assert_resident(resource_usage(head_kernels._grad_kernel, grads | rows, constants, capability))


@pytest.fixture(scope="module")
def kernels():
    from alignment.kernels import head as head_kernels

    return head_kernels


def logits_of(rows: int, vocab: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of a few scales, one row with -inf words (a masked vocabulary) and one with huge tied ones."""
    generator = torch.Generator().manual_seed(rows * vocab)
    logits = torch.randn(rows, vocab, generator=generator) * torch.linspace(0.5, 8, rows)[:, None]
    logits[0, 3::7] = float("-inf")
    logits[1, :2] = 1e4
    labels = torch.randint(0, vocab, (rows,), generator=generator)
    labels[0], labels[1] = 5, 0  # a finite word of the masked row; one of the tied ones
    return logits.to(dtype), labels


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("vocab", [1000, 9000])  # one block with a ragged end; three, the last ragged
def test_the_kernels_stats_are_the_torch_ops(kernels, dtype, vocab):
    logits, labels = logits_of(6, vocab, dtype)
    mine = kernels.chunk_stats(logits, labels)
    theirs = TORCH_OPS.stats(logits.clone(), labels)
    for a, b in zip(mine, theirs, strict=True):
        assert a.dtype == torch.float32 and torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-5)
    # the row with two tied logits of 1e4 puts half its mass on each: log-prob log(1/2), entropy log 2
    assert math.isclose(mine[0][1].item(), -math.log(2), abs_tol=1e-6)
    assert math.isclose(mine[2][1].item(), math.log(2), abs_tol=1e-6)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("grad_dtype", [torch.float32, "logits'"])
def test_the_kernels_gradient_is_the_torch_ops(kernels, dtype, grad_dtype):
    grad_dtype = dtype if grad_dtype == "logits'" else grad_dtype
    logits, labels = logits_of(6, 9000, dtype)
    log_totals = TORCH_OPS.stats(logits.clone(), labels)[1]
    upstream = torch.linspace(-2, 3, 6)
    theirs = TORCH_OPS.grad(logits.to(torch.float32, copy=True), log_totals, labels, upstream, grad_dtype)
    mine = kernels.chunk_grad(logits.clone(), log_totals, labels, upstream, grad_dtype)
    assert mine.dtype == grad_dtype and torch.isfinite(mine).all()
    rtol = HALF.get(grad_dtype, 1e-5)
    torch.testing.assert_close(mine, theirs, rtol=rtol, atol=1e-6)
    # each row's gradient sums to 0 (the label's 1 - p against the other words' -p), times its upstream; to within the
    # float32 log-sum-exp of the row of 1e4 logits, whose unit in the last place is 1e-3
    torch.testing.assert_close(mine.double().sum(dim=-1), torch.zeros(6, dtype=torch.float64), rtol=0, atol=1e-3 + rtol)


@interpreted
def test_the_gradient_is_written_over_logits_of_its_dtype(kernels):
    logits, labels = logits_of(3, 1000, torch.bfloat16)
    log_totals = kernels.chunk_stats(logits, labels)[1]
    assert kernels.chunk_grad(logits, log_totals, labels, torch.ones(3), torch.bfloat16) is logits
    assert kernels.chunk_grad(logits, log_totals, labels, torch.ones(3), torch.float32) is not logits


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_chunked_head_on_the_kernels_matches_it_on_torch_ops(kernels, dtype):
    """Forward and backward through chunks of 5 of 13 tokens: log-probs, entropies and every gradient."""
    torch.manual_seed(0)
    head = nn.Linear(32, 3000).to(dtype)
    hidden = torch.randn(13, 32, dtype=dtype)
    labels = torch.randint(0, 3000, (13,))
    upstream = torch.randn(13)
    on_kernels = ElementwiseOps(kernels.chunk_stats, kernels.chunk_grad, float_logits=False)
    results = []
    for ops in (TORCH_OPS, on_kernels):
        copy = nn.Linear(32, 3000).to(dtype)
        copy.load_state_dict(head.state_dict())
        h = hidden.clone().requires_grad_()
        log_probs, entropy = fused_log_probs_and_entropy(h, copy, labels, chunk=5, ops=ops)
        (log_probs * upstream).sum().backward()
        results.append((log_probs, entropy, h.grad, copy.weight.grad, copy.bias.grad))
    # bfloat16: gradients that differ by a unit in the last place here and there, summed over 3,000 words
    atol = 1e-4 if dtype == torch.bfloat16 else 1e-5
    for mine, theirs in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(mine, theirs, rtol=HALF.get(dtype, 1e-5), atol=atol)


def test_the_kernels_serve_cuda_heads_only():
    assert chunked_head.elementwise_ops(torch.zeros(2, 3)) is TORCH_OPS  # on the CPU, torch's ops


@interpreted
def test_bad_logits_are_refused_by_name(kernels):
    with pytest.raises(ValueError, match="logits"):
        kernels.chunk_stats(torch.zeros(2, 8, dtype=torch.float64), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="contiguous"):
        kernels.chunk_stats(torch.zeros(8, 2).t(), torch.zeros(2, dtype=torch.long))


@compiled
def test_labels_are_checked_before_the_kernels_read_them():
    """Their dtype, shape and layout at each launch (no host read); their range once per head call, where a label past
    the vocabulary would have the kernel read another row's logit."""
    from alignment.kernels import head

    logits = torch.zeros(4, 50)
    for labels, what in (
        (torch.zeros(4, dtype=torch.int32), "int32 labels"),
        (torch.zeros(8, dtype=torch.long)[::2], r"strides \(2,\)"),
        (torch.zeros(3, dtype=torch.long), r"shape \(3,\)"),
    ):
        with pytest.raises(ValueError, match=f"labels of shape .4,., int64, contiguous.*{what}"):
            head.chunk_stats(logits, labels)
        with pytest.raises(ValueError, match=what):
            head.chunk_grad(logits, torch.zeros(4), labels, torch.ones(4), torch.float32)
    kernels_like = ElementwiseOps(TORCH_OPS.stats, TORCH_OPS.grad, float_logits=True)  # not torch's own: checked
    linear = nn.Linear(8, 50)
    for bad in (50, -1):
        labels = torch.tensor([3, bad, 7])
        with pytest.raises(ValueError, match=f"labels must be word ids in \\[0, 50\\), got labels from {min(bad, 3)}"):
            fused_log_probs_and_entropy(torch.randn(3, 8), linear, labels, ops=kernels_like)
    fused_log_probs_and_entropy(torch.randn(3, 8), linear, torch.tensor([3, 49, 0]), ops=kernels_like)
