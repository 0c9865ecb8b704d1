"""Keep freed memory in the process for CPU training under glibc, so big tensors stop page-faulting in.

glibc's malloc serves each request above its mmap threshold (128 KiB, adapting up to 32 MiB) with a fresh
mmap() and unmaps it on free, and hands the free top of its heap back to the kernel beyond a trim threshold. A
training step on the CPU allocates and frees the same large tensors every microbatch (logits over the vocabulary,
weight gradients, the embedding's dense gradient), so under the defaults each one is faulted in page by page
again: at times 2 GB/s on the 2-core VM, a twentieth of its copy bandwidth. With every request served from
the heap and nothing trimmed, the freed blocks are reused as they are: at such times the demo GRPO step's train
phase went from 10.3 s to 6.9 s; when faults were fast it made no difference (docs/benchmarks/grpo_cpu.md). The price
is that the resident size stays at its peak (it did not grow in the demo: 4.7 GiB either way).

CUDA tensors are untouched (PyTorch's caching allocator already keeps them); other C libraries (musl, macOS)
are left as they are.

glibc's manual marks mallopt MT-Unsafe (const:mallopt): it rewrites settings that malloc and free read, unlocked,
in every thread. A script's process calls it from its one busy thread; a Ray actor's process has already started
Ray's and gloo's threads, which allocate all the time. So the actors get the same settings as environment variables
(RETAIN_FREED_MEMORY_ENV, passed by alignment/ray/actors.py's `spawn`), which glibc reads when the process starts,
before any thread exists, and retain_freed_memory then leaves malloc alone.
"""

import ctypes
import sys

# mallopt parameters from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
INT_MAX = 2**31 - 1

# the same two settings as glibc's start-up environment variables (its tunables' aliases)
RETAIN_FREED_MEMORY_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(INT_MAX)}


def started_retaining() -> bool:
    """Whether this process was started with RETAIN_FREED_MEMORY_ENV (read from the environment it was started with,
    not os.environ, which a running process may change after glibc has read it)."""
    try:
        with open("/proc/self/environ", "rb") as f:
            started = dict(e.decode(errors="replace").partition("=")[::2] for e in f.read().split(b"\0") if e)
    except OSError:
        return False
    return all(started.get(k) == v for k, v in RETAIN_FREED_MEMORY_ENV.items())


def retain_freed_memory() -> bool:
    """Process-wide: glibc serves all allocations from its heap and never trims it below 2 GiB of free top.

    Returns whether the settings took (False off glibc). Idempotent; later calls change nothing. A process started
    with RETAIN_FREED_MEMORY_ENV already has them: mallopt is not called there (see the module docstring).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if started_retaining():
        return True
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1
