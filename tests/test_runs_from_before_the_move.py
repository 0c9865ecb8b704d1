"""Run folders written before the package was laid out by subsystem still resume: the flat package of commit c955495
(read from git history) starts a GRPO run and an SFT run, is killed with kill -9 in its second step, and this version
continues each with --resume. Under -m slow: each builds the old package's run in a subprocess (about 20 s each on
an idle 2-core machine)."""

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from alignment.grpo_run import train_grpo
from scripts import train_sft as train_sft_script
from tests.test_grpo_loop import TASK, tiny_config
from tests.test_sft_scripts import sft_flags

pytestmark = pytest.mark.slow

BEFORE_THE_MOVE = "c955495"  # the last commit of the flat alignment/ (82 modules in one folder)
REPO = Path(__file__).resolve().parents[1]
ADDED_SINCE = ("grader", "ignore_memory_plan", "keyword_match", "kl_prev_step")  # settings the flat package had not
LOGGED_SINCE = ("eval_examples",)  # metrics this version logs and the flat package did not

OLD_GRPO = """
import sys, zlib
from pathlib import Path
from alignment.grpo_config import GRPOConfig
from alignment.grpo_run import train_grpo
from alignment.task import Task

def hash_reward(response, truth):
    r = (zlib.crc32(response.encode()) % 5) / 4
    return {"format_reward": 1.0, "answer_reward": r, "reward": r}

task = Task(["What is 1 + 1?", "Name a fruit.", "Count to three.", "Say hello."], ["2", "apple", "3", "hello"],
            "Q: {question}\\nA:", hash_reward)
settings = {k: Path(v) if k == "output_dir" else v for k, v in __import__("json").loads(sys.argv[1]).items()}
known = {f.name for f in __import__("dataclasses").fields(GRPOConfig)}  # settings added since: at their defaults
train_grpo(GRPOConfig(**{k: v for k, v in settings.items() if k in known}), task, task)
"""


@pytest.fixture(scope="module")
def old_code(tmp_path_factory) -> Path:
    """The pre-move package, prompts and scripts, extracted from git history."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{BEFORE_THE_MOVE}^{{commit}}"], capture_output=True
    )
    if found.returncode:
        pytest.skip(f"this clone has no commit {BEFORE_THE_MOVE} (a shallow clone): the old code cannot be read")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", BEFORE_THE_MOVE, "alignment", "prompts", "scripts", "data/keywords.txt"],
        capture_output=True,
        check=True,
    ).stdout
    root = tmp_path_factory.mktemp("before-the-move")
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(root, filter="data")
    return root


def run_old(old_code: Path, args: list[str], fault: str) -> subprocess.CompletedProcess:
    """Python from `old_code` (its alignment/ first on the path), killed at ALIGNMENT_FAULT=`fault`."""
    env = os.environ | {"ALIGNMENT_FAULT": fault, "PYTHONPATH": str(old_code)}
    return subprocess.run([sys.executable, *args], cwd=old_code, env=env, capture_output=True, text=True, timeout=600)


def metric_rows(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time_") and k not in LOGGED_SINCE} for row in rows]


def test_a_grpo_run_of_the_flat_package_resumes_here(old_code, tiny_model_dir, tmp_path):
    """The flat package's checkpoint is read and its run continued to the end. Since then every prompt of a rollout
    call samples from its own seed, so the steps after the resume cannot equal an uninterrupted run of either version:
    what must hold is that the old rows up to the checkpoint stay as written, every step is logged once, and two
    resumes of the same checkpoint agree bit for bit (the whole state, sampler RNGs included, was read back)."""
    # that package graded leniently (the only grader it had), matched whole keywords, and knew none of the settings
    # added since
    config = tiny_config(
        tiny_model_dir, tmp_path / "old", n_grpo_steps=2, loss_type="grpo_clip", grader="lenient", keyword_match="word"
    )
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in config.to_json().items() if k not in ADDED_SINCE}
    killed = run_old(old_code, ["-c", OLD_GRPO, json.dumps(settings)], "optimizer_step:2")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (config.output_dir / "checkpoint" / "COMPLETE").read_text() == "1"
    step_0 = metric_rows(config.output_dir)[0]  # the old code's validation before any update
    twin = replace(config, output_dir=tmp_path / "twin")
    shutil.copytree(config.output_dir, twin.output_dir)
    for run in (config, twin):
        train_grpo(run, TASK, TASK, resume=True)
    rows = metric_rows(config.output_dir)
    assert rows[0] == step_0 and step_0["grpo_step"] == 0
    assert sorted({row["grpo_step"] for row in rows if "loss" in row}) == [1, 2]
    assert [row["grpo_step"] for row in rows if "eval_reward" in row][-1] == 2
    assert rows == metric_rows(twin.output_dir)
    resumed, again = (load_file(c.output_dir / "policy" / "model.safetensors") for c in (config, twin))
    assert all(torch.equal(resumed[k], again[k]) for k in again)


def test_an_sft_run_of_the_flat_package_resumes_here(old_code, tiny_model_dir, data, tmp_path):
    data = data | {"model": tiny_model_dir}
    old, new = tmp_path / "old", tmp_path / "new"
    killed = run_old(old_code, ["scripts/train_sft.py", *sft_flags(data, old)], "checkpoint_write:2")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (old / "checkpoint" / "COMPLETE").read_text() == "1"
    runner = CliRunner()
    resumed = runner.invoke(train_sft_script.app, ["--resume", str(old)])
    assert resumed.exit_code == 0, resumed.output
    straight = runner.invoke(train_sft_script.app, [*sft_flags(data, new), "--grader", "lenient"])
    assert straight.exit_code == 0, straight.output

    # training reads the data, so its rows and weights are the flat package's bit for bit; validation samples, and
    # each prompt now has a seed of its own, so its rows are left out
    def training(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if not k.startswith("eval_")} for row in rows]

    assert training(metric_rows(old)) == training(metric_rows(new))
    a, b = (load_file(folder / "policy" / "model.safetensors") for folder in (old, new))
    assert all(torch.equal(a[k], b[k]) for k in b)
