"""The courses' own tests against our adapters, as a student runs them: CS336 A5's tests/test_grpo.py and
tests/test_sft.py with its conftest and reference snapshots, read at run time from a local checkout of the public
stanford-cs336/assignment5-alignment ($CS336_A5_REPO), copied into a temporary folder beside our tests/adapters.py
and run there; UW CSE599-O A3's tests/test_grpo.py the same way ($UW_A3_REPO), and PKU NLPDL HW3's
hw3_posttrain/tests/test_grpo.py from a checkout of linhaowei1/NLPDL-2025Fall ($PKU_HW3_REPO). Nothing of the
courses is copied into this project; without a checkout a test is skipped.

The handout's model tests load Qwen2.5-Math-1.5B from its cluster path, so test_tokenize_prompt_and_output and
test_get_response_log_probs are left out here (tests/test_sft.py checks them on a tiny model). PKU's four
masked_mean snapshots are left out too: they have shapes (10, 100), (2, 100), (2, 10) and () for a mean of its
(2, 10) fixture over dim 0, 1, -1 and all, which no masked mean has (tests/test_grpo.py checks ours by hand)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ENV = "CS336_A5_REPO"
ADAPTERS = Path(__file__).resolve().parent / "adapters.py"
NEEDS_QWEN = "not test_tokenize_prompt_and_output and not test_get_response_log_probs"


@pytest.fixture
def a5_tests(tmp_path) -> Path:
    repo = Path(os.environ.get(REPO_ENV, ""))
    if not os.environ.get(REPO_ENV) or not (repo / "tests" / "_snapshots").is_dir():
        pytest.skip(f"set ${REPO_ENV} to a checkout of stanford-cs336/assignment5-alignment to run its own tests")
    folder = tmp_path / "tests"
    folder.mkdir()
    for name in ("__init__.py", "conftest.py", "test_grpo.py", "test_sft.py"):
        shutil.copy(repo / "tests" / name, folder / name)
    shutil.copytree(repo / "tests" / "_snapshots", folder / "_snapshots")
    shutil.copy(ADAPTERS, folder / "adapters.py")
    return tmp_path


def test_a5s_own_tests_pass_through_our_adapters(a5_tests):
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", NEEDS_QWEN, "tests"]
    result = subprocess.run(command, cwd=a5_tests, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "22 passed" in result.stdout  # 14 GRPO tests, 8 SFT tests without the model


UW_REPO_ENV = "UW_A3_REPO"


def test_uw_a3s_own_grpo_tests_pass_through_our_adapters(tmp_path):
    """UW CSE599-O A3's tests/test_grpo.py (the 10 graded unit tests of v2 §1.4, A5's GRPO tests and snapshots under
    the same adapter names) from a local checkout of uw-syfi/assignment3-rl ($UW_A3_REPO)."""
    repo = Path(os.environ.get(UW_REPO_ENV, ""))
    if not os.environ.get(UW_REPO_ENV) or not (repo / "tests" / "_snapshots").is_dir():
        pytest.skip(f"set ${UW_REPO_ENV} to a checkout of uw-syfi/assignment3-rl to run its own tests")
    folder = tmp_path / "tests"
    folder.mkdir()
    for name in ("__init__.py", "conftest.py", "common.py", "test_grpo.py"):
        if (repo / "tests" / name).is_file():
            shutil.copy(repo / "tests" / name, folder / name)
    shutil.copytree(repo / "tests" / "_snapshots", folder / "_snapshots")
    shutil.copy(ADAPTERS, folder / "adapters.py")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_grpo.py"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "10 passed" in result.stdout


PKU_ENV = "PKU_HW3_REPO"
PKU_SNAPSHOTS_OF_OTHER_SHAPES = "not test_masked_mean"


def test_pku_hw3s_own_grpo_tests_pass_through_our_adapters(tmp_path):
    course = Path(os.environ.get(PKU_ENV, "")) / "hw3_posttrain" / "tests"
    if not os.environ.get(PKU_ENV) or not (course / "_snapshots").is_dir():
        pytest.skip(f"set ${PKU_ENV} to a checkout of linhaowei1/NLPDL-2025Fall to run HW3's own tests")
    folder = tmp_path / "tests"
    folder.mkdir()
    for name in ("__init__.py", "conftest.py", "common.py", "test_grpo.py"):
        shutil.copy(course / name, folder / name)
    shutil.copytree(course / "_snapshots", folder / "_snapshots")
    shutil.copy(ADAPTERS, folder / "adapters.py")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", PKU_SNAPSHOTS_OF_OTHER_SHAPES]
    result = subprocess.run([*command, "tests"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "10 passed" in result.stdout  # group normalization, the three losses, the wrapper, the microbatch step
