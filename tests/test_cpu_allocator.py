"""retain_freed_memory: under glibc a freed large tensor stays in the process (and is reused), by default it
goes back to the kernel. Each case runs in its own interpreter, as the setting is process-wide."""

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's (Linux)"
)

PROBE = """
import sys
import torch
from alignment.run.cpu_allocator import retain_freed_memory

def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

applied = retain_freed_memory() if sys.argv[1] == "retain" else None
x = torch.ones(64 * 2**20 // 4)  # 64 MiB, faulted in by the fill
held = resident_mib()
del x
freed = resident_mib()
y = torch.ones(48 * 2**20 // 4)  # a smaller one: carved out of the freed block when retained
again = resident_mib()
print(applied, held - freed, again - freed)
"""


def probe(mode: str) -> tuple[str, float, float]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True).stdout.split()
    return out[0], float(out[1]), float(out[2])


def test_freed_tensor_memory_is_kept_and_reused() -> None:
    applied, returned, regrown = probe("retain")
    assert applied == "True"
    assert returned < 4  # MiB: the 64 MiB block stays resident after `del`
    assert regrown < 4  # and the next tensor that fits takes it without growing the process


def test_glibc_default_returns_freed_tensor_memory() -> None:
    applied, returned, regrown = probe("default")
    assert applied == "None"
    assert returned > 60  # unmapped at `del`
    assert regrown > 44  # and the next one is faulted in afresh
