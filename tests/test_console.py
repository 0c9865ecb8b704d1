"""What a script prints (alignment/utils/console.py): no INFO or WARNING lines of vLLM, transformers or torch, and no
bars of theirs, unless --verbose; one line per validation. The scripts' consoles are checked where they already run as
subprocesses: train_grpo.py's on the hf backend in tests/test_sweep.py (default suite), on vLLM in
tests/test_vllm_rollout.py (slow)."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.utils.console import QUIET_ENV, VERBOSE_ENV, validation_line
from tests.test_cli import SCRIPTS

ROOT = Path(__file__).resolve().parents[1]
# a library's line: vLLM's log format (its process prefix when it has one), torch's (glog) and C++ warnings, Python
# warnings, and the bars of transformers (loading and writing weights) and vLLM (loading its checkpoint)
LIBRARY_LINE = re.compile(
    r"^(\(\w+ pid=\d+\) )?(INFO|WARNING) \d\d-\d\d |^\[?[IW]\d{4} |Warning: |Loading weights|"
    r"Loading safetensors|Writing model shards",
    re.MULTILINE,
)


def run_script(script: str, *args: str | Path, verbose: bool = False) -> str:
    """The script's console (stdout and stderr) in a fresh process, whose environment says nothing of quieting."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "WANDB_MODE": "disabled"}
    for name in (VERBOSE_ENV, *QUIET_ENV):  # this test process may have set them
        env.pop(name, None)
    command = [sys.executable, f"scripts/{script}", *map(str, args), *(["--verbose"] if verbose else [])]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


# plot.py and write_arithmetic.py load no library that logs
@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in ("plot", "write_arithmetic")])
def test_every_script_has_a_verbose_flag(script):
    result = CliRunner().invoke(importlib.import_module(f"scripts.{script}").app, ["--help"])
    assert result.exit_code == 0 and "--verbose" in result.output


def test_a_validation_row_is_one_line():
    row = {"grpo_step": 4, "eval_reward": 0.25, "eval_format_reward": 0.75, "eval_answer_reward": 0.25}
    assert validation_line(row) == "step 4: held-out reward 0.250 (format 0.750, answer 0.250)"
    assert validation_line({"grpo_step": 0, "eval_reward": 1.0}) == "step 0: held-out reward 1.000"
