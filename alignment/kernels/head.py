"""Triton kernels for the chunked head's elementwise work (alignment/models/chunked_head.py) on a GPU.

Per chunk of c tokens the head's matmul writes (c, V) logits in the compute dtype. The torch path then runs a chain of
kernels over them, each reading and writing the chunk: by count 38 bytes a logit forward and 30 backward in bfloat16,
some 10 ms a micro-batch at the handouts' shape (2 x 1,536 tokens, V = 151,936) against about 6 ms of the head's
matrix products. Here one program per token row reads its logits and keeps the sums in registers:

- `chunk_stats`: the row's max in one pass, then the sum of exp(z - max) and of exp(z - max) * (z - max) in a
  second (the arithmetic of the torch path's `_chunk_stats`, in float32): two reads, 4 bytes a logit in half
  precision (fewer where the second read finds the row still in L2);
- `chunk_grad`: (onehot - softmax) times the row's upstream gradient, written in the gradient's dtype: one read and
  one write, 4 bytes a logit, in place over the logits where their dtypes agree.

Both take contiguous rows of float16, bfloat16 or float32 logits and match the torch path's values to float32 rounding
(tests/test_head_kernels.py runs them in Triton's interpreter on the CPU; tests/test_gpu_learner.py on a GPU).
"""

import torch
import triton
import triton.language as tl

from alignment.kernels.support import DTYPES, on_device

MAX_BLOCK = 4096  # logits a program holds at once: 16 KB of float32 per accumulator, 16 per thread at 8 warps


@triton.jit
def _stats_kernel(logits, labels, log_probs, log_totals, entropy, vocab, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    start_of_row = logits + row * row_stride
    offsets = tl.arange(0, BLOCK)
    top = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, vocab, BLOCK):
        z = tl.load(start_of_row + start + offsets, mask=start + offsets < vocab, other=float("-inf"))
        top = tl.maximum(top, z.to(tl.float32))
    top_of_row = tl.max(top, axis=0)
    total = tl.zeros([BLOCK], tl.float32)
    weighted = tl.zeros([BLOCK], tl.float32)
    for start in range(0, vocab, BLOCK):
        z = tl.load(start_of_row + start + offsets, mask=start + offsets < vocab, other=float("-inf"))
        shifted = z.to(tl.float32) - top_of_row
        p = tl.exp(shifted)
        total += p
        weighted += p * tl.where(p > 0, shifted, 0.0)  # a -inf logit adds 0, not 0 * -inf
    total_of_row = tl.sum(total, axis=0)
    log_total = tl.log(total_of_row)
    label_logit = tl.load(start_of_row + tl.load(labels + row)).to(tl.float32)
    tl.store(log_probs + row, label_logit - top_of_row - log_total)
    tl.store(log_totals + row, top_of_row + log_total)
    tl.store(entropy + row, log_total - tl.sum(weighted, axis=0) / total_of_row)


@triton.jit
def _grad_kernel(logits, labels, log_totals, upstream, grad, vocab, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    label = tl.load(labels + row)
    log_total = tl.load(log_totals + row)
    scale = tl.load(upstream + row)
    offsets = tl.arange(0, BLOCK)
    for start in range(0, vocab, BLOCK):
        columns = start + offsets
        inside = columns < vocab
        z = tl.load(logits + row * row_stride + columns, mask=inside, other=float("-inf"))
        p = tl.exp(z.to(tl.float32) - log_total)
        g = (tl.where(columns == label, 1.0, 0.0) - p) * scale
        tl.store(grad + row * row_stride + columns, g.to(grad.dtype.element_ty), mask=inside)


def _check(logits: torch.Tensor, labels: torch.Tensor) -> None:
    """Logits and labels the kernels read as they assume (their range, which needs a host read: `check_labels`)."""
    if logits.dtype not in DTYPES or logits.stride(1) != 1:
        raise ValueError(f"the head's kernels take (c, V) logits of {DTYPES} with rows contiguous, got {logits.dtype}")
    rows = logits.shape[0]
    if (
        labels.dtype != torch.int64
        or labels.shape != (rows,)
        or labels.stride() != (1,)
        or labels.device != logits.device
    ):
        raise ValueError(
            f"the head's kernels take labels of shape ({rows},), int64, contiguous, on the logits' device "
            f"{logits.device}; got {labels.dtype} labels of shape {tuple(labels.shape)} and strides {labels.stride()} "
            f"on {labels.device}"
        )


def check_labels(labels: torch.Tensor, vocab: int) -> None:
    """A ValueError unless every label is a word id in [0, vocab): a kernel would read outside its row otherwise. One
    host read, for a whole forward's labels at once."""
    if labels.numel() and not bool(((labels >= 0) & (labels < vocab)).all()):
        low, high = labels.min().item(), labels.max().item()
        raise ValueError(f"labels must be word ids in [0, {vocab}), got labels from {low} to {high}")


def _block(vocab: int) -> int:
    return min(MAX_BLOCK, triton.next_power_of_2(vocab))


def chunk_stats(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A chunk's (label log-prob, log-sum-exp, entropy) from its logits (c, V) and labels (c,) int64, in [0, V)
    (`check_labels`) -> (c,) float32 each."""
    _check(logits, labels)
    rows, vocab = logits.shape
    log_probs, log_totals, entropy = (torch.empty(rows, dtype=torch.float32, device=logits.device) for _ in range(3))
    with on_device(logits):
        _stats_kernel[(rows,)](
            logits, labels, log_probs, log_totals, entropy, vocab, logits.stride(0), BLOCK=_block(vocab), num_warps=8
        )
    return log_probs, log_totals, entropy


def chunk_grad(
    logits: torch.Tensor, log_totals: torch.Tensor, labels: torch.Tensor, upstream: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """d(label log-prob)/d(logits) times each row's upstream gradient, in `dtype`: logits (c, V), log_totals and
    upstream (c,) float32, labels (c,) int64 in [0, V) -> (c, V), written over the logits when they are of `dtype`."""
    _check(logits, labels)
    rows, vocab = logits.shape
    upstream = upstream.float().contiguous()
    grad = logits if logits.dtype == dtype else torch.empty_like(logits, dtype=dtype)
    with on_device(logits):
        _grad_kernel[(rows,)](
            logits, labels, log_totals, upstream, grad, vocab, logits.stride(0), BLOCK=_block(vocab), num_warps=8
        )
    return grad
