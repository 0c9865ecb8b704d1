"""The sharded learner against one process: GRPO step time by phase and peak memory per process.

    uv run python bench/sharded_step.py                  # plain 1 process, torchrun 1 (FSDP2, world 1), torchrun 2
    uv run python bench/sharded_step.py --steps 4 --model smollm2-135m

Each arm runs the keyword demo's workload (configs/keyword_demo.toml: 32 rollouts of 32 tokens, 4 microbatches of 8)
with the hf backend for --steps GRPO steps and no evaluation but the first, in fresh processes. Reported per arm:
the mean seconds per step of each phase over the steps after the first (the first pays one-time costs), and each
process's peak resident memory (ru_maxrss, written by the process itself at exit).
"""

import json
import os
import resource
import runpy
import subprocess
import sys
from pathlib import Path

import typer

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("rollout", "grading", "train", "weight_sync")


def train_and_report(args: list[str]) -> None:
    """Inside each process of an arm: scripts/train_grpo.py with `args`, then this process's peak memory to
    <output-dir>/peak-<rank>.json."""
    sys.argv = ["train_grpo.py", *args]
    try:
        runpy.run_path(str(ROOT / "scripts" / "train_grpo.py"), run_name="__main__")
    except SystemExit as done:
        if done.code:
            raise
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    output = Path(args[args.index("--output-dir") + 1])
    (output / f"peak-{os.environ.get('RANK', '0')}.json").write_text(json.dumps({"peak_gib": peak}))


def run_arm(name: str, launcher: list[str], output: Path, steps: int, model: str) -> dict:
    flags = [
        "--config",
        "configs/keyword_demo.toml",
        "--model",
        model,
        "--backend",
        "hf",
        "--n-grpo-steps",
        str(steps),
        "--eval-every",
        str(10 * steps),
        "--checkpoint-every",
        str(10 * steps),
        "--n-eval-examples",
        "4",
        "--output-dir",
        str(output / name),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    with open(output / f"{name}.log", "w") as log:
        done = subprocess.run([*launcher, __file__, "--inside", *flags], cwd=ROOT, env=env, stdout=log, stderr=log)
    if done.returncode != 0:
        raise RuntimeError(f"arm {name} failed; see {output / name}.log")
    rows = [json.loads(line) for line in (output / name / "metrics.jsonl").read_text().splitlines()]
    steps_after_first = [r for r in rows if "loss" in r and r["grpo_step"] > 1]
    peaks = sorted((output / name).glob("peak-*.json"))
    return {
        "arm": name,
        **{
            f"{p}_s": sum(r.get(f"time_{p}_s", 0.0) for r in steps_after_first) / len(steps_after_first) for p in PHASES
        },
        "peak_gib": [json.loads(p.read_text())["peak_gib"] for p in peaks],
    }


def main(
    steps: int = typer.Option(4, help="GRPO steps per arm (the first is left out of the means)"),
    model: str = typer.Option("smollm2-135m", help="policy: smollm2-135m or a model folder"),
    output: Path = typer.Option(Path("outputs/bench_sharded_step"), help="where each arm's run folder goes"),
) -> None:
    output.mkdir(parents=True, exist_ok=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    arms = {
        "plain, 1 process": [sys.executable],
        "FSDP2, 1 process": [*torchrun, "1"],
        "FSDP2, 2 processes": [*torchrun, "2"],
    }
    results = []
    for index, (name, launcher) in enumerate(arms.items()):
        results.append(run_arm(f"arm{index}", launcher, output, steps, model) | {"arm": name})
        print(json.dumps(results[-1]), flush=True)
    print("\n| arm | " + " | ".join(f"{p} s/step" for p in PHASES) + " | step s | peak memory per process |")
    print("|---" * (len(PHASES) + 3) + "|")
    for r in results:
        step = sum(r[f"{p}_s"] for p in PHASES)
        print(
            f"| {r['arm']} | "
            + " | ".join(f"{r[f'{p}_s']:.2f}" for p in PHASES)
            + f" | {step:.2f} | "
            + ", ".join(f"{g:.2f} GiB" for g in r["peak_gib"])
            + " |"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--inside"]:
        train_and_report(sys.argv[2:])
    else:
        typer.run(main)
