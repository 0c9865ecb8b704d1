"""triton_runs_on (alignment/kernels/support.py): where Triton runs its probe kernel (here, in its interpreter) the
library's kernels serve; where it cannot build or launch one, they step aside for torch's, with a warning that says
why, once. And the run of every Triton kernel check in Triton's interpreter (tests/triton_checks.py)."""

import warnings
from contextlib import contextmanager

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from alignment.kernels import support
from alignment.kernels.support import forget_verdicts, kernel_serves, triton_runs_on, use_kernels
from alignment.models.chunked_head import TORCH_OPS, check_head_kernels
from alignment.rollout.decoding import check_sampling_kernel, flag_non_finite, sample_tokens_at, sampling_log_probs
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


@pytest.mark.slow  # 10-26 s of a pytest under TRITON_INTERPRET=1; the first-use checks and fallbacks run by default
def test_the_kernels_in_tritons_interpreter():
    """The interpreted checks of the probe and the first-use checks (below: 4), the head's kernels (16) and the sampling
    kernel (6 by default), in one pytest started with TRITON_INTERPRET=1: all of them pass."""
    run_interpreted(checks=26)


@pytest.mark.slow
def test_the_slow_kernel_checks_in_tritons_interpreter():
    """The interpreted checks marked slow (the sampling kernel's draws at its other 6 dtype and temperature pairs), in
    one pytest started with TRITON_INTERPRET=1 and -m slow: all of them pass."""
    run_interpreted(checks=6, marker="slow")


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


@pytest.fixture
def fresh_verdicts():
    """Every device's verdicts forgotten before and after, --kernels auto after."""
    forget_verdicts()
    yield
    use_kernels("auto")
    forget_verdicts()


@compiled
def test_a_kernel_that_fails_its_first_use_check_warns_once_by_name_and_torch_serves(fresh_verdicts, monkeypatch):
    gpus = TwoGPUs()
    monkeypatch.setattr(torch.cuda, "device", gpus.device)
    monkeypatch.setattr(support, "triton_runs_on", lambda device: True)
    cuda1 = torch.device("cuda:1")
    checked = []

    def failing(device, dtype):
        checked.append((device, dtype, gpus.current))  # under the device's guard
        raise RuntimeError("out of resource: shared memory, Required: 262144, Hardware limit: 232448")

    with pytest.warns(UserWarning, match=r"Triton sampling kernel failed its first-use check on cuda:1 for torch.bf"):
        assert not kernel_serves("sampling", cuda1, torch.bfloat16, failing)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the verdict is kept: no second check, no second warning
        assert not kernel_serves("sampling", cuda1, torch.bfloat16, failing)
        assert kernel_serves("sampling", cuda1, torch.float32, lambda device, dtype: None)  # each dtype its own
    assert checked == [(cuda1, torch.bfloat16, 1)]
    use_kernels("triton")  # asked for by name, a failed check is an error
    with pytest.raises(RuntimeError, match="--kernels triton: the Triton sampling kernel cannot serve on cuda:1"):
        kernel_serves("sampling", cuda1, torch.bfloat16, failing)
    # a dtype no kernel takes stays with torch untried, even when asked for by name
    assert not kernel_serves("head", cuda1, torch.float64, failing) and len(checked) == 1
    use_kernels("torch")  # nothing is tried
    assert not kernel_serves("head", cuda1, torch.float16, failing) and len(checked) == 1
    with pytest.raises(ValueError, match="--kernels 'tritn' is not one of auto, torch, triton"):
        use_kernels("tritn")


def torch_draw(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float):
    log_probs = sampling_log_probs(logits, temperature, 1.0)
    return flag_non_finite(sample_tokens_at(log_probs.exp(), uniforms), log_probs)


@compiled
@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda tokens, log_probs: (torch.where(tokens < 0, tokens, tokens + 1), log_probs), "outside the vocabulary"),
        (
            lambda tokens, log_probs: (torch.where(tokens < 0, tokens, 1000), log_probs),
            "CDF misses the point",
        ),  # banned
        (
            lambda tokens, log_probs: (torch.where(tokens < 0, tokens, (tokens + 500) % 3088), log_probs),
            "CDF misses the point",
        ),
        (lambda tokens, log_probs: (tokens, log_probs + 1e-4), "log-probs"),
        (lambda tokens, log_probs: (tokens.clamp(min=0), log_probs), r"a NaN drew \[0, 0\], not -1"),  # silent 0
    ],
)
def test_the_sampling_check_refuses_a_kernel_that_draws_wrongly(monkeypatch, wrong, message):
    from alignment.kernels import sampling

    monkeypatch.setattr(sampling, "sample_rows", torch_draw)
    check_sampling_kernel(torch.device("cpu"), torch.float32)  # the torch draw itself passes
    monkeypatch.setattr(sampling, "sample_rows", lambda *args: wrong(*torch_draw(*args)))
    with pytest.raises(AssertionError, match=message):
        check_sampling_kernel(torch.device("cpu"), torch.float32)


@compiled
@pytest.mark.parametrize("part", ["stats", "grad"])
def test_the_head_check_refuses_kernels_that_compute_wrongly(monkeypatch, part):
    from alignment.kernels import head

    def stats(logits, labels):
        return TORCH_OPS.stats(logits.float(), labels)

    def grad(logits, log_totals, labels, upstream, dtype):
        return TORCH_OPS.grad(logits.float(), log_totals, labels, upstream, dtype)

    monkeypatch.setattr(head, "chunk_stats", stats)
    monkeypatch.setattr(head, "chunk_grad", grad)
    check_head_kernels(torch.device("cpu"), torch.bfloat16)  # torch's ops pass
    if part == "stats":
        monkeypatch.setattr(head, "chunk_stats", lambda *args: (*stats(*args)[:2], stats(*args)[2] * 1.001))
        match = "entropies"
    else:
        monkeypatch.setattr(head, "chunk_grad", lambda *args: grad(*args).index_fill_(-1, torch.tensor([77]), 0.5))
        match = "gradient"
    with pytest.raises(AssertionError, match=match):
        check_head_kernels(torch.device("cpu"), torch.bfloat16)


@interpreted
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_real_kernels_pass_their_first_use_checks(dtype, fresh_verdicts):
    """The checks a GPU runs at first use, on the kernels themselves (in Triton's interpreter): they pass, so a
    device where the kernels compute as they do here keeps them."""
    with warnings.catch_warnings():
        warnings.simplefilter(
            "error", UserWarning
        )  # (numpy's RuntimeWarnings at the rows of -inf are the interpreter's)
        assert kernel_serves("sampling", torch.device("cpu"), dtype, check_sampling_kernel)
        assert kernel_serves("head", torch.device("cpu"), dtype, check_head_kernels)


class FailingLaunch:
    """Stands in for a Triton kernel whose launch fails as a GPU short of shared memory fails it."""

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise RuntimeError("out of resource: shared memory, Required: 264192, Hardware limit: 232448")

        return launch


@compiled
@pytest.mark.parametrize("name, kernel", [("sampling", "_sample_kernel"), ("head", "_stats_kernel")])
def test_a_kernel_whose_launch_fails_at_first_use_leaves_its_work_to_torch(fresh_verdicts, monkeypatch, name, kernel):
    """The real first-use checks, through the real launchers, with the launch failing: a warning naming the kernel and
    the reason, and the verdict torch's."""
    from alignment.kernels import head, sampling

    monkeypatch.setattr(support, "triton_runs_on", lambda device: True)
    monkeypatch.setattr(sampling if name == "sampling" else head, kernel, FailingLaunch())
    check = check_sampling_kernel if name == "sampling" else check_head_kernels
    with pytest.warns(UserWarning, match=f"Triton {name} kernel failed its first-use check on cpu .*out of resource"):
        assert not kernel_serves(name, torch.device("cpu"), torch.bfloat16, check)
