"""SFT and expert iteration with the policy sharded over 2 processes (FSDP2 under torchrun, gloo on this CPU).

Tolerance: tests/sharded_sft_worker.py's SFT run (2 AdamW steps at lr 1e-3, the first of 3 microbatches, so one
rank runs an empty turn) ends within 1.2e-7 of one unsharded process in every weight, where the steps move
weights by up to 2e-3; the test allows 1e-5. Adam's update barely changes when every gradient is scaled alike, so
each step's loss and gradient norm are compared too, where averaging the ranks' gradients instead of summing them
would halve the norm and an empty turn that counted would change both. Measured: the losses are equal, the norms
differ by 8.2e-6 and 2.3e-5 relatively (the test allows 1e-4). That is the norm's own float32 rounding: on a step
of the same shape, each parameter's gradient summed over the 2 ranks was bit for bit one process's, while the sum
of squares over the 3.1M-element embedding gradient rounds differently on shards than whole (float64 norm
3.914020; one process reports 3.913953, two 3.913987).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from alignment.expert_iteration import expert_iteration
from alignment.sft_run import train_sft
from alignment.supervised.config import EIConfig, SFTConfig
from tests.sharded_sft_worker import sft_config, write_data

ROOT = Path(__file__).resolve().parents[1]


def rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def torchrun(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc-per-node 2 ARGS` (a free port: other launches may run beside it). Should it
    time out, it gets SIGTERM, which it passes on to its workers (each in a session of its own, which a SIGKILL to
    torchrun would leave running)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *args]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    with subprocess.Popen(
        command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.terminate()
            process.communicate(timeout=60)
            raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.slow  # 20-40 s of torchrun; sharded GRPO runs by default in tests/test_sharding.py
def test_two_processes_train_sft_as_one_and_run_expert_iteration(tiny_model_dir, tmp_path):
    data, one, two = tmp_path / "data", tmp_path / "one", tmp_path / "two"
    write_data(data)
    sharded = torchrun("-m", "tests.sharded_sft_worker", str(tiny_model_dir), str(data), str(two), "--expert-iteration")
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    train_sft(sft_config(str(tiny_model_dir), data, one / "sft"))  # the same run in this one unsharded process

    initial = load_file(tiny_model_dir / "model.safetensors")
    a, b = (
        load_file(one / "sft" / "policy" / "model.safetensors"),
        load_file(two / "sft" / "policy" / "model.safetensors"),
    )
    assert a.keys() == b.keys() == initial.keys()  # the tied head written once, as one process writes it
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    assert max((a[k] - initial[k]).abs().max().item() for k in a) > 1e-4  # the weights did move
    plain, shared = rows(one / "sft"), rows(two / "sft")
    assert [sorted(r) for r in plain] == [sorted(r) for r in shared]  # rank 0 alone logged: no row twice
    steps = [(x, y) for x, y in zip(plain, shared) if "loss" in x]
    assert [x["response_tokens"] for x, _ in steps] == [y["response_tokens"] for _, y in steps] and len(steps) == 2
    for x, y in steps:
        assert x["grad_norm"] > 0
        assert y["grad_norm"] == pytest.approx(x["grad_norm"], rel=1e-4)
        assert y["loss"] == pytest.approx(x["loss"], rel=1e-6)
        assert y["token_entropy"] == pytest.approx(x["token_entropy"], rel=1e-5)
    assert json.loads((two / "sft" / "checkpoint" / "state.json").read_text())["processes"] == 2

    # one EI step: both ranks sampled and graded their share of the 3 questions, and trained on what was kept
    ei = rows(two / "ei")
    step, evaluation = ei  # rank 0's rows only: the step, then the held-out evaluation
    assert step["grpo_step"] == evaluation["grpo_step"] == 1 and "eval_reward" in evaluation
    assert step["n_rollouts"] == 6 and 0 < step["n_kept"] < 6  # hash_reward accepts some of them
    assert step["sft_steps"] == -(-step["n_kept"] // 2)
    evaluated = (two / "ei" / "rollouts.jsonl").read_text().splitlines()
    assert len(evaluated) == 2  # both held-out questions, gathered from the ranks' shares, written once
    trained = load_file(two / "ei" / "policy" / "model.safetensors")
    assert trained.keys() == initial.keys()
    assert max((trained[k] - initial[k]).abs().max().item() for k in initial) > 1e-4


@pytest.mark.parametrize(
    "config,flag",
    [
        (SFTConfig(backend="vllm"), "--backend vllm under torchrun"),
        (EIConfig(lora_rank=8, backend="hf"), "--lora-rank > 0 under torchrun"),
    ],
)
def test_torchrun_refuses_what_the_sharded_learner_cannot_do(config, flag, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    config.output_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=flag):
        (train_sft if isinstance(config, SFTConfig) else expert_iteration)(config)
    assert not config.output_dir.exists()  # refused before any folder, group or model
