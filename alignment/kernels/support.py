"""Whether Triton kernels run on a device, asked once per device by the library's kernels (the LM head's,
alignment/kernels/head.py; sampling's, alignment/kernels/sampling.py).

Triton compiles each kernel at its first launch, and builds its launcher then with the machine's C compiler and
Python headers; a torch build may also come without Triton. Where any of that is missing, the first use of a kernel
would fail in the middle of a run. So a tiny kernel is launched once per device first: if that fails, a warning says
why and the callers keep to their torch paths.
"""

import warnings
from functools import cache

import torch


@cache
def triton_runs_on(device: torch.device) -> bool:
    """Whether a Triton kernel builds and runs on `device` (a CUDA device; the CPU has no compiled Triton here)."""
    try:
        from alignment.kernels.probe import add_one

        ones = add_one(torch.zeros(8, device=device))
        if not bool((ones == 1).all()):
            raise RuntimeError(f"a kernel that adds 1 returned {ones.tolist()}")
    except Exception as error:  # any failure to import, build or launch leaves the work to torch's kernels
        warnings.warn(
            f"Triton kernels do not run on {device} ({type(error).__name__}: {error}); the library's kernels for the "
            "LM head and sampling run as torch kernels instead",
            stacklevel=2,
        )
        return False
    return True
