"""The kernel `triton_runs_on` launches to learn whether Triton works on a device (alignment/kernels/support.py),
apart so that importing Triton is part of what it tries."""

import torch
import triton
import triton.language as tl


@triton.jit
def _add_one(x, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    tl.store(x + offsets, tl.load(x + offsets, mask=inside) + 1, mask=inside)


def add_one(x: torch.Tensor) -> torch.Tensor:
    """x + 1, in place, by a Triton kernel: x a contiguous float32 vector."""
    _add_one[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
    return x
