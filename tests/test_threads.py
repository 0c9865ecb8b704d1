"""The default torch thread count: the cores idle as a run starts, from load figures injected here."""

import os

import pytest
import torch

from alignment.run import threads
from alignment.run.threads import CpuLoad, busy_time, choose_threads, describe, measure_load, set_torch_threads


@pytest.mark.parametrize(
    ("cores", "busy", "processes", "expected"),
    [
        (2, 0.0, 1, 2),  # idle: every core
        (2, 0.2, 1, 2),  # a core 80% idle counts as free
        (2, 0.3, 1, 1),  # 70% idle does not: OpenMP's team would wait on it
        (2, 1.3, 1, 1),  # loaded: at least one thread
        (2, 2.0, 1, 1),
        (16, 3.5, 1, 12),
        (16, 0.0, 4, 4),  # torchrun's processes share the free cores
        (16, 13.0, 4, 1),
        (4, 0.0, 8, 1),  # never below one
    ],
)
def test_threads_are_the_free_cores(cores, busy, processes, expected):
    assert choose_threads(CpuLoad(cores, busy), processes) == expected


PROC_STAT = """cpu  300 0 300 400 0 0 0 0 0 0
cpu0 100 0 100 200 0 0 0 0 0 0
cpu1 200 0 200 100 50 0 0 0 0 0
intr 12345 0 0
"""


def test_busy_time_sums_the_allowed_cpus_and_counts_iowait_as_idle():
    assert busy_time(PROC_STAT, [0]) == (200, 400)
    assert busy_time(PROC_STAT, [1]) == (400, 550)
    assert busy_time(PROC_STAT, [0, 1]) == (600, 950)


def fake_machine(monkeypatch, tmp_path, cpus, online, sample, loadavg, quota=None):
    """A machine with these CPUs allowed, `online` cores, /proc/stat moving as `sample` busy fraction over the
    allowed cores, and this one-minute load average."""
    stats = iter([(0, 0), (int(sample * 1000), 1000)])
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(cpus))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: online)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (loadavg, 0.0, 0.0))
    monkeypatch.setattr(threads, "busy_time", lambda text, allowed: next(stats))
    monkeypatch.setattr(threads, "PROC_STAT", tmp_path / "stat")
    (tmp_path / "stat").write_text("cpu0 0 0 0 0 0 0 0 0\n")
    quota_file = tmp_path / "cpu.max"
    quota_file.write_text("max 100000\n" if quota is None else f"{int(quota * 100000)} 100000\n")
    monkeypatch.setattr(threads, "CGROUP_V2", quota_file)


def test_measure_takes_the_busier_of_the_sample_and_the_load_average(monkeypatch, tmp_path):
    fake_machine(monkeypatch, tmp_path, cpus=[0, 1], online=2, sample=0.1, loadavg=2.6)
    assert measure_load(0.0) == CpuLoad(2, 2.0)  # a load past the cores is all of them busy
    fake_machine(monkeypatch, tmp_path, cpus=[0, 1], online=2, sample=0.65, loadavg=0.2)
    assert measure_load(0.0) == CpuLoad(2, 1.3)


def test_measure_ignores_the_machine_wide_load_average_on_a_subset_of_cores(monkeypatch, tmp_path):
    fake_machine(monkeypatch, tmp_path, cpus=[4, 5, 6, 7], online=64, sample=0.25, loadavg=60.0)
    assert measure_load(0.0) == CpuLoad(4, 1.0)


def test_a_cgroup_quota_caps_the_cores(monkeypatch, tmp_path):
    fake_machine(monkeypatch, tmp_path, cpus=range(16), online=16, sample=0.0, loadavg=0.0, quota=2.5)
    load = measure_load(0.0)
    assert load == CpuLoad(3, 0.0)
    assert choose_threads(load) == 3


def test_the_line_says_how_many_and_why():
    line = describe(1, CpuLoad(2, 1.3), 1, None)
    assert line == "torch threads: 1 (2 cores, 1.3 busy at start; --torch-threads to set)"
    assert describe(3, None, 1, "--torch-threads") == "torch threads: 3 (--torch-threads)"
    assert "per process" in describe(4, CpuLoad(16, 0.0), 4, None)
    assert "torch's default" in describe(2, None, 1, None)


@pytest.fixture
def fresh_choice(monkeypatch):
    """This process's choice not yet made (the suite's conftest fixes it to torch's count for in-process runs)."""
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)


def test_a_run_sets_the_count_once_and_says_it(fresh_choice, monkeypatch):
    monkeypatch.setattr(threads, "measure_load", lambda: CpuLoad(2, 1.3))
    assert set_torch_threads(None) == "torch threads: 1 (2 cores, 1.3 busy at start; --torch-threads to set)"
    assert torch.get_num_threads() == 1
    monkeypatch.setattr(threads, "measure_load", lambda: CpuLoad(2, 0.0))
    assert set_torch_threads(None) is None  # the warm start's SFT chose: GRPO after it keeps the count, silently
    assert torch.get_num_threads() == 1


def test_the_flag_and_omp_num_threads_come_first(fresh_choice, monkeypatch):
    monkeypatch.setattr(threads, "measure_load", lambda: pytest.fail("measured although told"))
    assert set_torch_threads(2) == "torch threads: 2 (--torch-threads)"
    assert set_torch_threads(2) is None and torch.get_num_threads() == 2  # the GRPO run after a warm start
    monkeypatch.setattr(threads, "_chosen", None)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert set_torch_threads(None) == "torch threads: 1 (OMP_NUM_THREADS; --torch-threads to set)"
    assert torch.get_num_threads() == 1


def test_without_load_figures_torch_keeps_its_default(fresh_choice, monkeypatch):
    monkeypatch.setattr(threads, "measure_load", lambda: None)
    default = torch.get_num_threads()
    assert "torch's default" in set_torch_threads(None)
    assert torch.get_num_threads() == default


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads this machine's /proc/stat")
def test_this_machine_is_measured_within_a_fraction_of_a_second():
    """The real figures of this machine: as many cores as the process may use, a busy count between 0 and them."""
    load = measure_load()
    assert load is not None and load.cores == len(os.sched_getaffinity(0))
    assert 0.0 <= load.busy <= load.cores
