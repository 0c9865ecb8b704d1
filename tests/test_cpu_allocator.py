"""retain_freed_memory: under glibc a freed large tensor stays in the process (and is reused), by default it
goes back to the kernel; a process started with the settings in its environment (as the Ray actors are) has them
without mallopt. Each case runs in its own interpreter, as the setting is process-wide."""

import os
import platform
import subprocess
import sys

import pytest

from alignment.run.cpu_allocator import RETAIN_FREED_MEMORY_ENV

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's (Linux)"
)

PROBE = """
import sys
import torch
import alignment.run.cpu_allocator as allocator
from alignment.run.cpu_allocator import retain_freed_memory

if sys.argv[1] == "started":  # a stand-in libc whose mallopt fails the probe if it is called
    def mallopt(*args):
        raise SystemExit("mallopt called")

    class NoMallopt:
        def __init__(self, name):
            self.mallopt = mallopt

    allocator.ctypes.CDLL = NoMallopt

def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

applied = retain_freed_memory() if sys.argv[1] != "default" else None
x = torch.ones(64 * 2**20 // 4)  # 64 MiB, faulted in by the fill
held = resident_mib()
del x
freed = resident_mib()
y = torch.ones(48 * 2**20 // 4)  # a smaller one: carved out of the freed block when retained
again = resident_mib()
print(applied, held - freed, again - freed)
"""


def probe(mode: str, env: dict[str, str] | None = None) -> tuple[str, float, float]:
    argv = [sys.executable, "-c", PROBE, mode]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=os.environ | (env or {})).stdout.split()
    return out[0], float(out[1]), float(out[2])


@pytest.mark.slow  # the settings at start-up, the path actors take, run by default below
def test_freed_tensor_memory_is_kept_and_reused() -> None:
    applied, returned, regrown = probe("retain")
    assert applied == "True"
    assert returned < 4  # MiB: the 64 MiB block stays resident after `del`
    assert regrown < 4  # and the next tensor that fits takes it without growing the process


@pytest.mark.slow
def test_glibc_default_returns_freed_tensor_memory() -> None:
    applied, returned, regrown = probe("default")
    assert applied == "None"
    assert returned > 60  # unmapped at `del`
    assert regrown > 44  # and the next one is faulted in afresh


def test_a_process_started_with_the_settings_keeps_freed_memory_without_calling_mallopt() -> None:
    applied, returned, regrown = probe("started", RETAIN_FREED_MEMORY_ENV)
    assert applied == "True"
    assert returned < 4 and regrown < 4  # glibc took them from the environment at start


def test_settings_set_after_the_start_are_not_taken_for_the_start_up_ones() -> None:
    """os.environ changed while running is not what glibc read: retain_freed_memory still calls mallopt."""
    code = (
        "import os; from alignment.run.cpu_allocator import RETAIN_FREED_MEMORY_ENV, started_retaining; "
        "os.environ.update(RETAIN_FREED_MEMORY_ENV); print(started_retaining())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
