"""The README's demo end to end (about 10 minutes on 2 CPU cores): run with `uv run pytest -m slow`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_keyword_demo_raises_held_out_reward_by_10_points(tmp_path):
    out = tmp_path / "demo"
    subprocess.run(
        [sys.executable, "scripts/train_grpo.py", "--config", "configs/keyword_demo.toml", "--output-dir", str(out)],
        cwd=ROOT,
        check=True,
        timeout=1800,
    )
    evals = [
        r["eval_reward"]
        for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
        if "eval_reward" in r
    ]
    assert evals[-1] - evals[0] >= 0.10
    assert (out / "plots" / "eval_reward_vs_step.png").is_file()
