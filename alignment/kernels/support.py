"""Whether a device runs the library's Triton kernels (the LM head's, alignment/kernels/head.py; sampling's,
alignment/kernels/sampling.py), decided at their first use and kept for the process, and the guard every launch runs
under.

Triton compiles each kernel at its first launch, and builds its launcher then with the machine's C compiler and
Python headers; a torch build may also come without Triton; a kernel may compile and still fail for want of
registers or shared memory, or compute wrongly on a GPU nobody has tried. Where any of that happens in the middle of a
run, the run would end, or go on with wrong numbers. So before a kernel first serves on a device and dtype:

1. a tiny kernel is launched on the device (`triton_runs_on`): if it fails, a warning says why;
2. the real kernel runs once on a small input and is compared with the torch path it replaces, values and gradients,
   within the tolerances of the CPU tests (the caller's `check`: decoding.check_sampling_kernel,
   chunked_head.check_head_kernels): a failure or a mismatch warns once, naming the kernel and the reason.

Either way that device and dtype keep to torch's kernels for the rest of the process. `--kernels` (KernelSettings)
chooses: auto (the checks decide), torch (never a Triton kernel), triton (a failed check is an error, not a warning).

Triton launches on the current CUDA device and on that device's current stream, not on its tensors' device: with the
sampler on cuda:1 while cuda:0 is current, a kernel would read another device's memory on a stream unordered with the
one that wrote it. Every launch runs under `on_device(tensor)`, which makes the tensors' device current (and with it
that device's current stream) for the launch.
"""

import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cache
from typing import Literal, get_args

import torch

Kernels = Literal["auto", "torch", "triton"]
KERNELS_HELP = (
    "The library's Triton kernels on CUDA (the LM head's stats and gradient, the sampling draw): auto (each checked "
    "once per device and dtype against the torch path it replaces at its first use; a failure warns and that device "
    "keeps to torch), torch (never a Triton kernel), or triton (as auto, but a failed check is an error)."
)
Check = Callable[[torch.device, torch.dtype], None]
DTYPES = (torch.float16, torch.bfloat16, torch.float32)  # what every kernel here takes; others keep to torch

_choice: list[Kernels] = ["auto"]
_verdicts: dict[tuple[str, torch.device, torch.dtype], str | None] = {}


@dataclass
class KernelSettings:
    """The Triton kernels' setting, for every script whose learner or sampler may run them (training, generation)."""

    # a field as alignment.config.settings.setting makes it, written out: this room stands below config/
    kernels: Kernels = field(default="auto", metadata={"help": KERNELS_HELP})


def use_kernels(choice: str) -> None:
    """Make `choice` (auto, torch or triton: --kernels) the process's; a ValueError naming the flag otherwise."""
    if choice not in get_args(Kernels):
        raise ValueError(f"--kernels {choice!r} is not one of {', '.join(get_args(Kernels))}")
    _choice[0] = choice  # type: ignore[assignment]


def kernel_choice() -> Kernels:
    """The process's --kernels."""
    return _choice[0]


def on_device(place: torch.Tensor | torch.device) -> AbstractContextManager:
    """Inside, the CUDA device of `place` (a tensor or a device) is current, and with it that device's current stream,
    where a Triton kernel launches; nothing changes for a place elsewhere (the CPU, where only Triton's interpreter
    launches)."""
    device = place.device if isinstance(place, torch.Tensor) else place
    return torch.cuda.device(device) if device.type == "cuda" else nullcontext()


@cache
def triton_runs_on(device: torch.device) -> bool:
    """Whether a Triton kernel builds and runs on `device` (a CUDA device; the CPU has no compiled Triton here)."""
    try:
        from alignment.kernels.probe import add_one

        ones = torch.zeros(8, device=device)
        with on_device(ones):
            add_one(ones)
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


def kernel_serves(name: str, device: torch.device, dtype: torch.dtype, check: Check) -> bool:
    """Whether the Triton kernel `name` does its work on `device` for inputs of `dtype`: never under --kernels torch
    or for a dtype outside DTYPES; else where Triton runs on the device and `check(device, dtype)` (the kernel against
    its torch path, raising on a mismatch) passed, tried once per kernel, device and dtype. A failure warns once,
    naming the kernel and the reason; under --kernels triton it raises instead."""
    if kernel_choice() == "torch" or dtype not in DTYPES:
        return False
    key = (name, device, dtype)
    if key not in _verdicts:
        _verdicts[key] = _failure(name, device, dtype, check)
    failure = _verdicts[key]
    if failure is not None and kernel_choice() == "triton":
        raise RuntimeError(
            f"--kernels triton: the Triton {name} kernel cannot serve on {device} for {dtype}: {failure}"
        )
    return failure is None


def _failure(name: str, device: torch.device, dtype: torch.dtype, check: Check) -> str | None:
    if not triton_runs_on(device):  # which warned
        return "Triton kernels do not run there"
    try:
        with torch.no_grad(), torch.autocast(device.type, enabled=False), on_device(device):
            check(device, dtype)
    except Exception as error:  # a failure to compile or launch, or a mismatch: the work stays with torch's kernels
        reason = f"{type(error).__name__}: {str(error).strip()[:500]}"
        if kernel_choice() != "triton":
            warnings.warn(
                f"the Triton {name} kernel failed its first-use check on {device} for {dtype} ({reason}); torch's "
                "kernels do its work there instead",
                stacklevel=3,
            )
        return reason
    return None


def forget_verdicts() -> None:
    """Forget every device's verdicts (the probe's and the kernels' checks), so that the next use tries again."""
    _verdicts.clear()
    triton_runs_on.cache_clear()
