"""Fully asynchronous GRPO against the synchronous strategies, on a workload whose response lengths vary.

    uv run python bench/async_grpo.py                        # SmolLM2-135M, configs/keyword_async.toml's workload
    uv run python bench/async_grpo.py --tiny --steps 3       # a tiny random model: checks that the bench runs
    uv run python bench/async_grpo.py --env calculator_arithmetic --only "async eta=1"   # multi-turn episodes

One after the other, with the same seed and the same samples (--steps rollout batches of --rollout-batch-size):
colocated-sync, disaggregated-one-behind, then async with --max-staleness 1, 2 and 4, each with and without partial
rollouts. Every run trains the same objective (the preset's GRPO-Clip with its --tis-cap). `--env NAME` plays that
environment's multi-turn episodes instead of the preset's task (weights load between two turns; response tokens
are an episode's sampled tokens). Prints one table per run:

- loop wall time (the sum of the steps' wall times) and samples/s over it;
- learner idle: 1 - (seconds the learner spent in its old-log-prob and train phases) / loop wall time;
- generator idle: 1 - (seconds spent sampling) / (loop wall time x generators); colocated-sync's generator is
  the worker, idle while it learns;
- mean and max version lag of the groups trained, the fraction of responses whose tokens span versions;
- the held-out reward first -> last, and the load average (1 min) over the run: other sessions share the machine.

Then a projection for N generators from an async run's idle fractions: with the learner busy a fraction b_L of
the loop and the one generator b_G, N generators (each on a device of its own, as fast as the one measured, the
learner on another) sample a batch N times faster and a learner k times faster trains one k times faster, so the
loop is set by the slower side: samples/s(N, k) = measured samples/s / max(b_L / k, b_G / N). It is an upper
bound (perfect overlap, no contention between the devices).
Writes summary.json, each run's folder (with its bench.json) and a plot of held-out reward against wall time
(held_out_reward_vs_wall_time.png) to --output-dir; `--report-only` prints them again from summary.json, and
`--skip-done` measures only the runs without a bench.json (a run that fails is reported and skipped).
"""

import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
import typer

from alignment.config.cli import read_config_file
from alignment.experiments.plotting import line_figure, read_rows
from alignment.ray.config import RayGRPOConfig
from alignment.ray.driver import train_grpo_ray
from alignment.ray.env import ray
from bench.ray_strategies import tiny_model

RUNS = {  # label -> settings over the base
    "colocated-sync": {"strategy": "colocated-sync"},
    "disaggregated-one-behind": {"strategy": "disaggregated-one-behind"},
    **{
        f"async eta={eta}{'' if partial else ', no partial'}": {
            "strategy": "async",
            "max_staleness": eta,
            "partial_rollouts": partial,
        }
        for eta in (1, 2, 4)
        for partial in (True, False)
    },
}


class LoadSampler:
    """The 1-minute load average, sampled every few seconds while a run goes."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)

    def _run(self, every_s: float) -> None:
        while not self.stop.wait(every_s):
            self.samples.append(os.getloadavg()[0])

    def __enter__(self) -> "LoadSampler":
        self.samples.append(os.getloadavg()[0])
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def summarize(config: RayGRPOConfig) -> dict[str, float]:
    rows = read_rows(config.output_dir / "metrics.jsonl")
    steps = [row for row in rows if "time_step_s" in row]
    steps = list({row["grpo_step"]: row for row in reversed(steps)}.values())[::-1]  # the first row of each step
    loop_s = sum(row["time_step_s"] for row in steps)
    learner_s = sum(row.get("time_old_logprob_s", 0.0) + row["time_train_s"] for row in steps)
    sampling_s = sum(row["time_rollout_s"] for row in steps)
    generators = config.generators if config.strategy == "async" else 1
    evals = [row["eval_reward"] for row in rows if "eval_reward" in row]
    samples = len(steps) * config.rollout_batch_size
    return {
        "loop_s": loop_s,
        "samples": samples,
        "samples_per_s": samples / loop_s,
        "learner_idle": 1 - learner_s / loop_s,
        "generator_idle": 1 - sampling_s / (loop_s * generators),
        "learner_s_per_update": learner_s / len(steps),
        "sampling_s": sampling_s,
        "lag_mean": statistics.mean(row.get("staleness_mean", row["version_lag"]) for row in steps),
        "lag_max": max(row["version_lag"] for row in steps),
        "partial_fraction": statistics.mean(row.get("partial_fraction", 0.0) for row in steps),
        "response_length_mean": statistics.mean(row["response_length_mean"] for row in steps),
        "truncated_fraction": statistics.mean(row["truncated_fraction"] for row in steps),
        "eval_first": evals[0],
        "eval_final": evals[-1],
    }


def projection(
    run: dict[str, float], generators: Sequence[int] = (1, 2, 4, 8), learner_speedups: Sequence[int] = (1, 2, 4)
) -> list[tuple[int, int, float, float]]:
    """(N, k, projected samples/s, learner idle) for N generators and a learner k times faster (a GPU, or
    --learner-processes), from a run's samples/s and idle fractions: the slower side sets the loop."""
    learner_busy, generator_busy = 1 - run["learner_idle"], 1 - run["generator_idle"]
    rows = []
    for k in learner_speedups:
        for n in generators:
            interval = max(learner_busy / k, generator_busy / n)  # of the measured loop
            rows.append((n, k, run["samples_per_s"] / interval, 1 - learner_busy / k / interval))
    return rows


def report(results: dict[str, dict[str, float]], header: str, output_dir: Path) -> dict:
    """Print the table and the projection, draw the plot; the summary's JSON."""
    print(f"\n{header}")
    print(
        "| run | loop wall (s) | samples/s | learner idle | generator idle | lag mean / max | partial responses "
        "| response tokens (mean) | held-out reward first -> last | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, r in results.items():
        print(
            f"| {label} | {r['loop_s']:.0f} | {r['samples_per_s']:.3f} | {r['learner_idle']:.2f} | "
            f"{r['generator_idle']:.2f} | {r['lag_mean']:.2f} / {r['lag_max']:g} | {r['partial_fraction']:.2f} | "
            f"{r['response_length_mean']:.0f} | {r['eval_first']:.3f} -> {r['eval_final']:.3f} | "
            f"{r['load_mean']:.1f} |"
        )
    summary: dict = {"header": header, "results": results, "projection": {}}
    for label, r in results.items():
        if label.startswith("async"):
            summary["projection"][label] = projection(r)
    reference = next((label for label in ("async eta=2", "async eta=1") if label in results), None)
    if reference is not None:
        print(
            f"\nprojection from {reference} (samples/s; learner idle):\n| generators | "
            + " | ".join(f"learner x{k}" for k in (1, 2, 4))
            + " |\n|---|---|---|---|"
        )
        rows = summary["projection"][reference]
        for n in (1, 2, 4, 8):
            cells = [f"{rate:.2f}; {idle:.2f}" for m, _, rate, idle in rows if m == n]
            print(f"| {n} | " + " | ".join(cells) + " |")
    runs = {label: read_rows(Path(r["output_dir"]) / "metrics.jsonl") for label, r in results.items()}
    plot = output_dir / "held_out_reward_vs_wall_time.png"
    line_figure(runs, ["eval_reward"], "held-out reward", plot, x="time_elapsed_s")
    print(f"plot: {plot}")
    return summary


def main(
    config: Path = typer.Option(Path("configs/keyword_async.toml"), help="The workload every run shares."),
    steps: int = typer.Option(8, help="GRPO steps (rollout batches) per run."),
    rollout_batch_size: int = typer.Option(16, help="Samples per rollout batch (--group-size each prompt)."),
    eval_examples: int = typer.Option(16, help="Held-out prompts, validated at step 0, midway and at the end."),
    only: list[str] = typer.Option([], help="Run only these labels (default: all)."),
    backend: str | None = typer.Option(None, help="Rollout backend of every run (default: --config's)."),
    tiny: bool = typer.Option(False, help="A tiny random model and short responses instead of --config's model."),
    num_cpus: int | None = typer.Option(None, help="CPUs the local Ray cluster may use (default: all)."),
    env: str | None = typer.Option(None, help="Play this environment's episodes (--env) instead of --config's task."),
    env_max_turns: int = typer.Option(3, help="With --env: turns per episode at most."),
    env_max_tokens: int = typer.Option(320, help="With --env: an episode's tokens at most, its prompt included."),
    output_dir: Path = typer.Option(Path("outputs/bench_async"), help="Runs, plot and summary.json."),
    report_only: bool = typer.Option(False, help="Print the table, projection and plot again from summary.json."),
    skip_done: bool = typer.Option(False, help="Keep the runs already measured in --output-dir (their bench.json)."),
) -> None:
    if report_only:
        summary = json.loads((output_dir / "summary.json").read_text())
        header = summary.get("header", f"{summary.get('steps')} steps, {summary.get('model')}")  # older summaries
        report(summary["results"], header, output_dir)
        return
    base = RayGRPOConfig(**read_config_file(config, RayGRPOConfig))
    base = replace(
        base,
        n_grpo_steps=steps,
        rollout_batch_size=rollout_batch_size,
        train_batch_size=rollout_batch_size,
        gradient_accumulation_steps=max(1, rollout_batch_size // 8),
        eval_every=max(1, steps // 2),
        checkpoint_every=steps,
        n_eval_examples=eval_examples,
        overwrite=True,
    )
    if backend is not None:
        base = replace(base, backend=backend)
    if env is not None:
        base = replace(base, env=env, env_max_turns=env_max_turns, env_max_tokens=env_max_tokens)
    if tiny:
        # vLLM's CPU attention has no kernel for the tiny model's head size
        base = replace(base, model=tiny_model(output_dir / "tiny-model"), sampling_max_tokens=24, backend="hf")
    labels = [label for label in RUNS if not only or label in only]
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    results: dict[str, dict[str, float]] = {}
    try:
        for label in labels:
            settings = {"max_staleness": 1, "partial_rollouts": True} | RUNS[label]
            run = replace(base, output_dir=output_dir / label.replace(" ", "_").replace(",", ""), **settings)
            done = run.output_dir / "bench.json"
            if skip_done and done.is_file():
                results[label] = json.loads(done.read_text())
                continue
            started = time.perf_counter()
            try:
                with LoadSampler() as load:
                    train_grpo_ray(run)
            except Exception as err:  # another session's memory use may get an actor killed: the next runs go on
                print(f"{label} failed: {type(err).__name__}: {err}"[:2000])
                continue
            results[label] = summarize(run) | {
                "wall_s": time.perf_counter() - started,
                "load_mean": statistics.mean(load.samples),
                "output_dir": str(run.output_dir),
            }
            done.write_text(json.dumps(results[label], indent=2))
    finally:
        ray.shutdown()

    header = (
        f"{steps} steps x {base.rollout_batch_size} samples ({base.n_prompts_per_rollout_batch} prompts x "
        f"{base.group_size}), up to {base.sampling_max_tokens} tokens"
        + ("" if env is None else f" a turn, --env {env} (up to {env_max_turns} turns, {env_max_tokens} tokens)")
        + f", {base.model}, backend {base.backend}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, {torch.cuda.device_count()} GPUs, Ray num_cpus {num_cpus}"
    )
    summary = report(results, header, output_dir)
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"summary: {output_dir / 'summary.json'}")


if __name__ == "__main__":
    typer.run(main)
