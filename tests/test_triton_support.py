"""triton_runs_on (alignment/kernels/support.py): where Triton runs its probe kernel (here, in its interpreter) the
library's kernels serve; where it cannot build or launch one, they step aside for torch's, with a warning that says
why, once. And the run of every Triton kernel check in Triton's interpreter (tests/triton_checks.py)."""

import warnings
from contextlib import contextmanager

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from alignment.kernels.support import triton_runs_on
from tests.triton_checks import compiled, interpreted, run_interpreted


@compiled
def test_where_triton_does_not_run_a_warning_says_why_and_torchs_kernels_serve():
    """Compiled kernels cannot launch on CPU tensors: a failure to launch, seen as a missing C compiler would be."""
    triton_runs_on.cache_clear()
    with pytest.warns(UserWarning, match="Triton kernels do not run on cpu"):
        assert not triton_runs_on(torch.device("cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tried once: the answer is kept, no second warning
        assert not triton_runs_on(torch.device("cpu"))
    triton_runs_on.cache_clear()


def test_the_kernels_in_tritons_interpreter():
    """The interpreted checks of the probe (below), the head's kernels (16) and the sampling kernel (11), in one pytest
    started with TRITON_INTERPRET=1: all of them pass."""
    run_interpreted(checks=28)


@interpreted
def test_where_the_probe_kernel_runs_triton_serves():
    triton_runs_on.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert triton_runs_on(torch.device("cpu"))  # the interpreter runs kernels on CPU tensors
    triton_runs_on.cache_clear()


class TwoGPUs:
    """torch.cuda's current device on a machine of two GPUs, as the device guard sets it, without a GPU: `device`
    stands in for torch.cuda.device, `current` is what torch.cuda.current_device() would answer."""

    def __init__(self) -> None:
        self.current = 0

    @contextmanager
    def device(self, device: torch.device | int):
        before, self.current = (
            self.current,
            torch.device("cuda", device).index if isinstance(device, int) else device.index,
        )
        try:
            yield
        finally:
            self.current = before


class RecordedKernel:
    """Stands in for a Triton kernel: a launch `kernel[grid](...)` records the current device and launches nothing."""

    def __init__(self, gpus: TwoGPUs) -> None:
        self.gpus, self.launches = gpus, []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append(self.gpus.current)


@compiled
def test_every_launch_runs_on_its_tensors_device(monkeypatch):
    """The sampling kernel, the head's two kernels and the probe, given fake tensors on cuda:1 while cuda:0 is current,
    each launch with cuda:1 current (Triton launches on the current device and its current stream); a launch outside
    the guard would record 0, as the last check shows."""
    from alignment.kernels import head, probe, sampling

    gpus = TwoGPUs()
    monkeypatch.setattr(torch.cuda, "device", gpus.device)
    kernels = {name: RecordedKernel(gpus) for name in ("sample", "stats", "grad", "probe")}
    monkeypatch.setattr(sampling, "_sample_kernel", kernels["sample"])
    monkeypatch.setattr(head, "_stats_kernel", kernels["stats"])
    monkeypatch.setattr(head, "_grad_kernel", kernels["grad"])
    monkeypatch.setattr(probe, "_add_one", kernels["probe"])
    triton_runs_on.cache_clear()
    with FakeTensorMode(), torch.device("cuda:1"):
        logits, labels = torch.randn(4, 3000, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.long)
        sampling.draw_rows(logits, torch.rand(4, dtype=torch.float64), 0.7)
        log_totals = head.chunk_stats(logits, labels)[1]
        head.chunk_grad(logits, log_totals, labels, torch.ones(4), torch.float32)
        with pytest.warns(UserWarning, match="do not run on cuda:1"):  # fake data: the probe's answer cannot be read
            triton_runs_on(torch.device("cuda:1"))
    triton_runs_on.cache_clear()
    assert {name: kernel.launches for name, kernel in kernels.items()} == dict.fromkeys(kernels, [1])
    assert gpus.current == 0  # each guard restored the device it found
    kernels["sample"][(4,)]()  # what a launch outside the guard would see
    assert kernels["sample"].launches == [1, 0]
