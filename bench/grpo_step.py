"""Seconds per GRPO step, by phase, on the CPU demo workload.

    uv run python bench/grpo_step.py

SmolLM2-135M-Instruct in float32, 8 keyword prompts x group 4, 32 new tokens, one optimizer step per rollout
batch (GRPO-Clip, on-policy), no reference model, hf backend. Reports each step's phases and the mean over
the steps after the first (which pays one-time costs).
"""

import json
import platform
import statistics
import tempfile
from pathlib import Path

import torch
import typer

from alignment.grpo.config import GRPOConfig
from alignment.grpo_run import train_grpo

PHASES = ("rollout", "grading", "old_logprob", "train", "weight_sync")


def main(steps: int = 6, output: Path | None = None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            model="smollm2-135m",
            task="keywords",
            keywords_per_prompt=2,
            n_train_prompts=256,
            n_eval_examples=8,
            n_grpo_steps=steps,
            learning_rate=3e-5,
            rollout_batch_size=32,
            group_size=4,
            train_batch_size=32,
            gradient_accumulation_steps=4,
            sampling_min_tokens=32,
            sampling_max_tokens=32,
            loss_type="grpo_clip",
            eval_every=10_000,
            eval_max_tokens=4,
            checkpoint_every=10_000,
            kl_reference=False,
            kl_prev=False,
            backend="hf",
            grader_workers=1,
            output_dir=Path(output or tmp),
        )
        rows = train_grpo(config)
    for row in rows:
        phases = ", ".join(f"{p} {row.get(f'time_{p}_s', 0.0):.2f}s" for p in PHASES)
        print(f"step {row['grpo_step']}: {sum(row.get(f'time_{p}_s', 0.0) for p in PHASES):.2f}s ({phases})")
    later = rows[1:] or rows
    means = {p: statistics.mean(r.get(f"time_{p}_s", 0.0) for r in later) for p in PHASES}
    total = sum(means.values())
    print(json.dumps({"mean_step_s": round(total, 2)} | {f"mean_{p}_s": round(v, 2) for p, v in means.items()}))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}")


if __name__ == "__main__":
    typer.run(main)
