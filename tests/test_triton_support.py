"""triton_runs_on (alignment/kernels/support.py): where Triton runs its probe kernel (here, in its interpreter) the
library's kernels serve; where it cannot build or launch one, they step aside for torch's, with a warning that says
why, once. And the run of every Triton kernel check in Triton's interpreter (tests/triton_checks.py)."""

import warnings

import pytest
import torch

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
