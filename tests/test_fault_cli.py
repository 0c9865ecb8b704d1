"""Faults from outside the process, on the real command line and a tiny model: kill -9 of scripts/train_grpo.py
mid-rollout, mid-optimizer-step and mid-checkpoint write (ALIGNMENT_FAULT, see alignment/utils/faults.py), then
--resume, must end with the metrics and weights of an uninterrupted run; the same for the Ray driver and for
a Ray actor killed mid-rollout. Also: an output folder that cannot be written, and a disk that fills up during
a checkpoint write. Minute-long tests are marked slow; their results are in docs/benchmarks/grpo_cpu.md."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from alignment.models.policy_folder import read_weights
from alignment.utils.faults import ENV_VAR

ROOT = Path(__file__).resolve().parents[1]
IGNORED_METRICS = ("time_", "samples_per_s", "device_hours")  # wall-clock figures differ between any two runs
STEPS = 3


def write_config(model_dir: Path, folder: Path, **extra: object) -> Path:
    """A keyword-task run of STEPS steps on the tiny model, checkpointed every step, validated at 0 and the end."""
    (folder / "words.txt").write_text("apple\nriver\nstone\ncloud\nbread\nlamp\n")
    settings = {
        "model": str(model_dir),
        "task": "keywords",
        "keywords_file": str(folder / "words.txt"),
        "keywords_per_prompt": 2,
        "n_train_prompts": 8,
        "n_eval_examples": 4,
        "n_grpo_steps": STEPS,
        "learning_rate": 1e-3,
        "rollout_batch_size": 4,
        "group_size": 2,
        "train_batch_size": 4,
        "gradient_accumulation_steps": 2,
        "sampling_max_tokens": 6,
        "sampling_min_tokens": 2,
        "loss_type": "grpo_clip",
        "eval_every": 100,
        "checkpoint_every": 1,
        "grader_workers": 1,
        "backend": "hf",
        **extra,
    }
    path = folder / "run.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items()))
    return path


def run_script(
    script: str, *args: str | Path, fault: str | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "WANDB_MODE": "disabled"}
    env.pop(ENV_VAR, None)
    if fault is not None:
        env[ENV_VAR] = fault
    return subprocess.run(
        [sys.executable, f"scripts/{script}", *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def train(
    script: str, config: Path, output_dir: Path, *extra: str, fault: str | None = None
) -> subprocess.CompletedProcess:
    return run_script(script, "--config", config, "--output-dir", output_dir, *extra, fault=fault)


def resume(script: str, output_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    """Continue a stopped run: the run folder keeps its settings, so `--resume DIR` alone does it."""
    return run_script(script, "--resume", output_dir, *extra)


def checkpoint_step(output_dir: Path) -> int | None:
    marker = output_dir / "checkpoint" / "COMPLETE"
    return int(marker.read_text()) if marker.is_file() else None


def final_weights(output_dir: Path) -> dict[str, torch.Tensor]:
    """The policy weights of a run's last checkpoint."""
    return read_weights(output_dir / "checkpoint" / "policy")


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def metrics(output_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(IGNORED_METRICS)} for row in rows]


def ok(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def assert_same_run(resumed: Path, straight: Path) -> None:
    assert metrics(resumed) == metrics(straight)
    expected, got = final_weights(straight), final_weights(resumed)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


@pytest.fixture(scope="module")
def straight(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(config, output folder) of the uninterrupted run every interrupted one must reproduce."""
    folder = tmp_path_factory.mktemp("straight")
    config = write_config(tiny_model_dir, folder)
    ok(train("train_grpo.py", config, folder / "run"))
    assert checkpoint_step(folder / "run") == STEPS
    return config, folder / "run"


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,saved_step",
    [
        ("rollout:3", 1),  # decoding loops: validation at step 0, step 1's rollouts, then step 2's: killed there
        ("optimizer_step:2", 1),  # step 2's weights updated in memory, the step not yet recorded
        ("checkpoint_write:2", 1),  # step 2's state file written, its completion marker not
        ("checkpoint_swap:2", 2),  # step 1's checkpoint moved aside, step 2's complete one not yet renamed into place
    ],
)
def test_kill_9_then_resume_matches_an_uninterrupted_run(straight, tmp_path, fault, saved_step):
    config, expected = straight
    run = tmp_path / "run"
    killed = train("train_grpo.py", config, run, fault=fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    if fault.startswith("checkpoint_swap"):  # only the staged checkpoint is complete: resume finishes the swap
        assert not (run / "checkpoint").exists() and (run / "checkpoint.old" / "COMPLETE").read_text() == "1"
        assert (run / "checkpoint.partial" / "COMPLETE").read_text() == str(saved_step)
    else:
        assert checkpoint_step(run) == saved_step
    ok(resume("train_grpo.py", run))
    assert checkpoint_step(run) == STEPS
    assert_same_run(run, expected)


@pytest.mark.slow
def test_a_lora_run_killed_mid_step_then_resumed_matches_an_uninterrupted_one(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    config = write_config(tiny_model_dir, tmp_path, lora_rank=4, lora_alpha=8.0)
    ok(train("train_grpo.py", config, tmp_path / "straight"))
    killed = train("train_grpo.py", config, tmp_path / "run", fault="optimizer_step:2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert checkpoint_step(tmp_path / "run") == 1
    ok(resume("train_grpo.py", tmp_path / "run"))
    assert metrics(tmp_path / "run") == metrics(tmp_path / "straight")
    expected, got = (
        load_file(tmp_path / run / "policy" / "adapter" / "adapter_model.safetensors") for run in ("straight", "run")
    )
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


def test_an_output_folder_that_cannot_be_written_is_refused_before_training(tiny_model_dir, tmp_path):
    """The script's own command line, run in this process: it stops before anything loads, so a process of its own
    (10 s of imports) would check nothing more; the slow tests above run it as its own process."""
    from scripts import train_grpo

    config = write_config(tiny_model_dir, tmp_path)
    blocker = tmp_path / "a_file"
    blocker.write_text("kept")
    result = CliRunner().invoke(train_grpo.app, ["--config", str(config), "--output-dir", str(blocker / "run")])
    message = " ".join(result.output.replace("│", " ").split())  # typer wraps the message inside a panel
    assert result.exit_code != 0 and f"--output-dir {blocker / 'run'} cannot be written" in message, message
    assert blocker.read_text() == "kept"


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes through file permissions; the read-only case needs a non-root user"
)
def test_a_read_only_run_folder_is_refused_and_left_as_it_was(straight, tmp_path):
    _, finished = straight
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    run.chmod(0o555)
    try:
        result = resume("train_grpo.py", run, "--n-grpo-steps", str(STEPS + 1))
    finally:
        run.chmod(0o755)
    assert result.returncode != 0 and "cannot be written" in " ".join(result.stderr.replace("│", " ").split())
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs mount (needs root); yields (folder, remount(size) to give it room)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a small tmpfs needs root (it simulates a disk that fills up)")

    def resize(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)

    yield mount, resize
    subprocess.run(["umount", str(mount)], check=True)


@pytest.mark.slow
def test_a_disk_that_fills_during_a_checkpoint_keeps_the_previous_one(straight, small_disk):
    config, expected = straight
    disk, resize = small_disk
    state_bytes = folder_bytes(expected / "checkpoint")
    resize(f"{int(state_bytes * 1.5)}")  # room for one checkpoint, not for a second beside it
    run = disk / "run"
    failed = train("train_grpo.py", config, run)
    assert failed.returncode == 1, failed.stderr[-3000:]  # an error, not a crash or a hang
    assert checkpoint_step(run) == 1 and (run / "checkpoint.partial").exists()
    resize(f"{state_bytes * 4}")  # space is freed: the same folder continues
    ok(resume("train_grpo.py", run))
    assert not (run / "checkpoint.partial").exists()
    assert_same_run(run, expected)


# colocated-sync: a resumed one-behind run samples its first batch with the newest weights, so it cannot match
# an uninterrupted one bit for bit (tests/test_ray_strategies.py checks that case's version lags)
RAY_ARGS = ("--strategy", "colocated-sync", "--ray-timeout-s", "120")


@pytest.fixture(scope="module")
def ray_straight(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("ray_straight")
    config = write_config(tiny_model_dir, folder)
    ok(train("train_grpo_ray.py", config, folder / "run", *RAY_ARGS))
    return config, folder / "run"


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault,message",
    [
        ("ray_step:2", None),  # the driver, right after step 2 is logged and checkpointed
        ("rollout:3", "actor ColocatedWorker died"),  # the actor: validation, batch 0, then batch 1's decoding: killed
    ],
)
def test_ray_driver_or_actor_killed_then_resume_matches(ray_straight, tmp_path, fault, message):
    config, straight_run = ray_straight
    run = tmp_path / "run"
    stopped = train("train_grpo_ray.py", config, run, *RAY_ARGS, fault=fault)
    if message is None:
        assert stopped.returncode == -signal.SIGKILL, stopped.stderr[-3000:]
    else:
        assert stopped.returncode == 1 and message in stopped.stderr and "--resume" in stopped.stderr, stopped.stderr[
            -3000:
        ]
    assert 1 <= (checkpoint_step(run) or 0) < STEPS
    ok(resume("train_grpo_ray.py", run))
    assert_same_run(run, straight_run)
