"""What the Triton kernels' tests share (tests/test_head_kernels.py, tests/test_sampling_kernel.py,
tests/test_triton_support.py): running their interpreted checks under Triton's interpreter, and compiling a kernel for
a GPU that is not here.

Triton interprets only where TRITON_INTERPRET=1 is set before it is imported (its own library functions, such as
tl.max, are kernels defined then), so the interpreted checks run in a pytest of their own, started with it; the
suite's run skips them, and one of its tests (in tests/test_triton_support.py) asserts that the second run passed them
all."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
interpreted = pytest.mark.skipif(
    not INTERPRETED, reason="run by tests/test_triton_support.py in a pytest with TRITON_INTERPRET=1, which it checks"
)
ROOT = Path(__file__).resolve().parents[1]
# the modules with `interpreted` tests: one pytest runs them all again (a pytest starts in some seconds)
INTERPRETED_MODULES = ("tests/test_head_kernels.py", "tests/test_sampling_kernel.py", "tests/test_triton_support.py")
compiled = pytest.mark.skipif(INTERPRETED, reason="the interpreted run defines the kernels for the interpreter")
TRITON_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def run_interpreted(checks: int, marker: str | None = None) -> None:
    """Run INTERPRETED_MODULES in one pytest with TRITON_INTERPRET=1 (with `marker`, `-m marker`: those marked so
    instead of the default selection): it passes, and at least `checks` tests (their interpreted ones) ran."""
    if INTERPRETED:
        pytest.skip("this is the interpreted run itself")
    selection = [] if marker is None else ["-m", marker]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *selection, *INTERPRETED_MODULES],
        cwd=ROOT,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) >= checks, run.stdout[-2000:]


def resource_usage(kernel, signature: dict[str, str], constants: dict[str, int], capability: int) -> dict[str, int]:
    """REG, STACK, LOCAL and SHARED of `kernel` compiled at 8 warps with `constants` (its constexpr arguments) for a
    CUDA GPU of `capability` (80: A100, 90: H100), read from the cubin with the cuobjdump Triton ships; `signature`
    gives each other argument's Triton type ("*bf16", "i32", ...)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    types = signature | dict.fromkeys(constants, "constexpr")
    source = ASTSource(fn=kernel, signature={name: types[name] for name in kernel.arg_names}, constexprs=constants)
    binary = triton.compile(source, target=GPUTarget("cuda", capability, 32), options={"num_warps": 8})
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    cubin = Path(os.environ.get("TMPDIR", "/tmp")) / f"kernel_{os.getpid()}.cubin"
    cubin.write_bytes(binary.asm["cubin"])
    try:
        report = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True, check=True)
    finally:
        cubin.unlink()
    line = report.stdout.strip().splitlines()[-1]  # "REG:71 STACK:0 SHARED:1024 LOCAL:0 ..."
    return {key: int(value) for key, value in (item.split(":")[:2] for item in line.split()) if value.isdigit()}


def assert_resident(usage: dict[str, int], programs: int = 3) -> None:
    """Nothing spilled to local memory, and `programs` programs of 8 warps x 32 threads fit an SM's 65,536
    registers (an H100's 132 SMs then run 132 x `programs` rows' programs at once)."""
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0, usage
    assert programs * 8 * 32 * usage["REG"] <= 65536, usage
