"""How many CPU threads torch uses in a run: --torch-threads, else OMP_NUM_THREADS, else the cores idle at its start.

torch's own default is one thread per core. OpenMP's threads wait for each other at the end of every parallel
region, spinning, so a team larger than the cores that are free makes every thread wait on the slowest one, whose core
some other job holds: on the 2-core VM with other work running, the keyword demo's rollout and train took 151 s a
step at torch's default of two threads and 40 s at one (docs/benchmarks/grpo_cpu.md). One thread too few on an idle
machine costs at most the parallel speed-up; one too many on a busy one costs several times over. So a run takes the
cores that are free as it starts, rounding down unless a core is at least three quarters idle:

- the cores it may use: its CPU affinity (os.sched_getaffinity), capped by a cgroup CPU quota (a container's --cpus);
- how busy they are: the busier of a 0.25 s sample of /proc/stat over those cores and, where the process may use
  every core, the one-minute load average (it remembers a burst the sample may fall between);
- under torchrun, the free cores are shared among the processes of the machine (LOCAL_WORLD_SIZE).

The choice is made once per process (a warm start's SFT and the GRPO run after it use the same count) and the run's
first line says it and why, e.g. "torch threads: 1 (2 cores, 1.3 busy at start; --torch-threads to set)". Where
no load figure can be read (no /proc, no load average), torch's default stays and the line says so.
"""

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

SAMPLE_S = 0.25  # long enough for 25 scheduler ticks per core at 100 Hz, short enough not to be noticed
IDLE_ENOUGH = 0.75  # a core counts as free when at least this much of it is idle
PROC_STAT = Path("/proc/stat")
CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
CGROUP_V1 = (Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"))


@dataclass(frozen=True)
class CpuLoad:
    """The cores a process may run on and how many of them other work kept busy when it looked."""

    cores: int
    busy: float  # in cores, 0..cores


def choose_threads(load: CpuLoad, processes: int = 1) -> int:
    """Threads for each of `processes` processes sharing the machine: the free cores (a core at least IDLE_ENOUGH
    idle counts whole), split evenly, at least one."""
    free = max(0.0, load.cores - load.busy)
    whole = math.floor(free + (1 - IDLE_ENOUGH) + 1e-9)
    return max(1, min(load.cores, whole) // max(1, processes))


def allowed_cpus() -> list[int] | None:
    """The CPUs this process may run on (None where the system does not say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cpu_quota() -> float | None:
    """A cgroup's CPU quota in cores (a container started with --cpus 2: 2.0); None when there is none."""
    try:
        quota, period = CGROUP_V2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us, period_us = (int(p.read_text()) for p in CGROUP_V1)
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


def busy_time(stat_text: str, cpus: list[int]) -> tuple[int, int]:
    """(busy ticks, total ticks) summed over `cpus` from the text of /proc/stat; idle and iowait count as idle."""
    busy = total = 0
    wanted = {f"cpu{i}" for i in cpus}
    for line in stat_text.splitlines():
        name, *fields = line.split()
        if name not in wanted:
            continue
        ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal (guest is in user)
        idle = ticks[3] + ticks[4]
        total += sum(ticks)
        busy += sum(ticks) - idle
    return busy, total


def sampled_busy_fraction(cpus: list[int], seconds: float = SAMPLE_S) -> float | None:
    """How busy `cpus` were over `seconds` (0..1), read from /proc/stat; None where it cannot be read."""
    try:
        before = busy_time(PROC_STAT.read_text(), cpus)
        time.sleep(seconds)
        after = busy_time(PROC_STAT.read_text(), cpus)
    except (OSError, ValueError, IndexError):
        return None
    total = after[1] - before[1]
    return None if total <= 0 else (after[0] - before[0]) / total


def measure_load(seconds: float = SAMPLE_S) -> CpuLoad | None:
    """The cores this process may use and how busy they are now; None where neither figure can be read."""
    cpus = allowed_cpus()
    online = os.cpu_count() or 1
    cores = len(cpus) if cpus else online
    quota = cpu_quota()
    if quota is not None:
        cores = max(1, min(cores, math.ceil(quota)))
    fractions = []
    if cpus:
        sampled = sampled_busy_fraction(cpus, seconds)
        if sampled is not None:
            fractions.append(sampled)
    if cpus is None or len(cpus) == online:  # the load average is the whole machine's
        try:
            fractions.append(os.getloadavg()[0] / online)
        except (AttributeError, OSError):
            pass
    if not fractions:
        return None
    return CpuLoad(cores, round(min(1.0, max(fractions)) * cores, 1))


def describe(threads: int, load: CpuLoad | None, processes: int, reason: str | None) -> str:
    """The run's line: how many threads and why."""
    count = f"{threads} per process" if processes > 1 else str(threads)
    if reason is not None:
        return f"torch threads: {count} ({reason})"
    if load is None:
        return f"torch threads: {count} (torch's default: no load figures on this system; --torch-threads to set)"
    shared = f", shared by {processes} processes" if processes > 1 else ""
    return f"torch threads: {count} ({load.cores} cores, {load.busy:.1f} busy at start{shared}; --torch-threads to set)"


_chosen: int | None = None  # this process's choice, made once


def set_torch_threads(requested: int | None) -> str | None:
    """Set torch's thread count: `requested` (--torch-threads), else OMP_NUM_THREADS's, else the cores idle now,
    measured once per process. Returns the line saying which and why, or None when this process has chosen already
    (it keeps that count)."""
    global _chosen
    processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    load, reason = None, None
    if requested is not None and requested == _chosen:  # a warm start's SFT set it: said once
        torch.set_num_threads(requested)
        return None
    if requested is not None:
        threads, reason = requested, "--torch-threads"
    elif _chosen is not None:
        torch.set_num_threads(_chosen)
        return None
    elif os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        threads, reason = int(os.environ["OMP_NUM_THREADS"]), "OMP_NUM_THREADS; --torch-threads to set"
    else:
        load = measure_load()
        threads = torch.get_num_threads() if load is None else choose_threads(load, processes)
    _chosen = threads
    torch.set_num_threads(threads)
    return describe(threads, load, processes, reason)


def use_torch_threads(requested: int | None, main: bool = True) -> None:
    """set_torch_threads, its line printed (above any progress bar) by the main process of a run."""
    line = set_torch_threads(requested)
    if line is not None and main:
        tqdm.write(line)
