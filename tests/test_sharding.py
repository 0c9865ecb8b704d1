"""The FSDP2 sharded learner on this CPU with gloo: 2 processes give the update of 1, and runs resume across counts.

Tolerance: on the fixed batch of tests/sharded_worker.py, 2 processes against 1 differ by at most 1.1e-6 in any
weight after 2 AdamW steps at lr 1e-3 (float32 sums in another order, and the unsharded learner's shared-prompt
scoring), where each step moves weights by up to 2e-3; the test allows 1e-5. Adam's update barely changes when
every gradient is scaled alike, so the step's loss and gradient norm are compared too: averaging the ranks'
gradients instead of summing them would halve the norm.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from alignment.sharding import ShardGroup, my_microbatches, my_slice

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node"]
VARIANTS = ("sequence_mean", "token_mean", "constant", "mask_truncated")


def run(command: list[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)


def test_microbatch_and_prompt_shares():
    # 3 microbatches over 2 ranks: rank 1 runs one and an empty turn, so both make 2 calls
    assert my_microbatches(3, ShardGroup(0, 2)) == [0, 2]
    assert my_microbatches(3, ShardGroup(1, 2)) == [1, None]
    assert my_microbatches(3, None) == [0, 1, 2]
    assert [my_slice(5, ShardGroup(r, 2)) for r in range(2)] == [slice(0, 3), slice(3, 5)]
    assert [my_slice(1, ShardGroup(r, 3)) for r in range(3)] == [slice(0, 1), slice(1, 1), slice(1, 1)]


def test_two_processes_update_as_one(tiny_model_dir, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    plain = run([sys.executable, "-m", "tests.sharded_worker", str(tiny_model_dir), str(one)])
    assert plain.returncode == 0, plain.stderr[-3000:]
    sharded = run([*TORCHRUN, "2", "-m", "tests.sharded_worker", str(tiny_model_dir), str(two)])
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    initial = load_file(tiny_model_dir / "model.safetensors")
    for name in VARIANTS:
        a, b = load_file(one / f"{name}.safetensors"), load_file(two / f"{name}.safetensors")
        assert a.keys() == b.keys()
        assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5, name
        assert max((a[k] - initial[k]).abs().max().item() for k in initial) > 1e-4, name  # the weights did move
        steps_a, steps_b = json.loads((one / f"{name}.json").read_text()), json.loads((two / f"{name}.json").read_text())
        assert len(steps_a) == len(steps_b) == 2
        for x, y in zip(steps_a, steps_b):
            assert x["grad_norm"] > 0
            assert y["grad_norm"] == pytest.approx(x["grad_norm"], rel=1e-4), name
            assert y["loss"] == pytest.approx(x["loss"], rel=1e-3, abs=1e-7), name
