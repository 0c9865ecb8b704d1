"""The four Ray strategies on the same work: the keyword task with configs/keyword_demo.toml's settings.

    uv run python bench/ray_strategies.py                      # SmolLM2-135M-Instruct, 4 steps per strategy
    uv run python bench/ray_strategies.py --tiny --steps 2     # a tiny random model: checks that the bench runs
    uv run python bench/ray_strategies.py --tiny --nodes 3     # on a head and two worker nodes (one machine)

Prints, per strategy: mean seconds per step of each phase (after the first step, which pays one-time costs;
overlapped phases of the disaggregated strategies sum to more than the step's wall time), samples/s over the
whole loop, device-hours (GPU-hours, or CPU core-hours without GPUs) and the final validation reward; then the
weight-sync latency of each transport this machine can use, and the sync/async speedup: the colocated-sync
loop's wall time over each other strategy's, on the same number of samples. Runs, plots and summary.json go
to --output-dir.
"""

import json
import os
import platform
import statistics
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import torch
import typer
from transformers import LlamaConfig, LlamaForCausalLM

from alignment.config.cli import read_config_file
from alignment.experiments.plotting import plot_runs, read_rows
from alignment.models.loading import SMOLLM2, load_tokenizer
from alignment.ray.cluster import start_actors
from alignment.ray.config import STRATEGIES, RayGRPOConfig
from alignment.ray.driver import tasks, train_grpo_ray
from alignment.ray.env import ray
from alignment.ray.local_cluster import local_cluster
from alignment.ray.weight_sync import WeightSync

PHASES = {
    "rollout": ["rollout"],
    "grading": ["grading"],
    "train": ["old_logprob", "train"],
    "sync": ["weight_sync"],
    "step": ["step"],
}


def tiny_model(folder: Path) -> str:
    """A 2-layer random Llama over SmolLM2's tokenizer, saved where --model can load it."""
    tokenizer = load_tokenizer(SMOLLM2)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def summarize(config: RayGRPOConfig) -> dict[str, float]:
    rows = read_rows(config.output_dir / "metrics.jsonl")
    steps = {row["grpo_step"]: row for row in rows if "time_step_s" in row}  # the first row of each step
    later = [steps[s] for s in sorted(steps)][1:] or list(steps.values())
    summary = {
        name: statistics.mean(sum(r.get(f"time_{p}_s", 0.0) for p in parts) for r in later)
        for name, parts in PHASES.items()
    }
    loop_s = sum(row["time_step_s"] for row in steps.values())
    evals = [row["eval_reward"] for row in rows if "eval_reward" in row]
    return summary | {
        "loop_s": loop_s,
        "samples_per_s": len(steps) * config.rollout_batch_size / loop_s,
        "device_hours": max(row["device_hours"] for row in steps.values()),
        "eval_first": evals[0],
        "eval_final": evals[-1],
        "max_version_lag": max(row["version_lag"] for row in steps.values()),
    }


def sync_latencies(config: RayGRPOConfig, repeats: int) -> dict[str, float]:
    """Median seconds per learner -> generator sync, for each transport these actors can use."""
    task, validation = tasks(config, None, None)
    actors = start_actors(replace(config, strategy="disaggregated-one-behind"), task, validation)
    gpus = all(p.device == "cuda" for p in actors.placements) and len({p.gpu for p in actors.placements}) == 2
    latencies = {}
    try:
        for transport in ("object_store", "gloo") + (("nccl",) if gpus else ()):
            sync = WeightSync(transport, actors.learner, [actors.generator], actors.placements, config.ray_timeout_s)
            times = [sync.sync(version) for version in range(repeats + 1)][1:]  # the first sync sets up the transport
            sync.close()
            latencies[transport] = statistics.median(times)
    finally:
        actors.stop()
    return latencies


def main(
    config: Path = typer.Option(Path("configs/keyword_demo.toml"), help="Settings shared by every strategy."),
    steps: int = typer.Option(4, help="GRPO steps per strategy."),
    tiny: bool = typer.Option(False, help="A tiny random model and small batches instead of --config's model."),
    multistep_k: int = typer.Option(2, help="colocated-multistep: optimizer steps per rollout batch."),
    buffer_policy: str = typer.Option("uniform", help="replay-buffer: uniform, newest or fifo."),
    eval_examples: int = typer.Option(16, help="Validation prompts, at step 0 and at the end."),
    sync_repeats: int = typer.Option(5, help="Timed weight syncs per transport."),
    num_cpus: int | None = typer.Option(None, help="CPUs the local Ray cluster may use (default: all)."),
    nodes: int = typer.Option(
        1, help="Nodes of the local cluster: above 1, a head (the learner) and nodes-1 worker nodes (the generators)."
    ),
    output_dir: Path = typer.Option(Path("outputs/bench_ray"), help="Runs, plots and summary.json."),
) -> None:
    base = RayGRPOConfig(**read_config_file(config, RayGRPOConfig))
    base = replace(
        base,
        n_grpo_steps=steps,
        eval_every=steps,
        checkpoint_every=steps,
        n_eval_examples=eval_examples,
        overwrite=True,
        loss_type="grpo_clip",
    )
    if tiny:
        base = replace(
            base,
            model=tiny_model(output_dir / "tiny-model"),
            rollout_batch_size=8,
            group_size=4,
            train_batch_size=8,
            gradient_accumulation_steps=2,
            sampling_max_tokens=8,
            backend="hf",  # vLLM's CPU attention has no kernel for the tiny model's head size (16)
        )
    cluster = ExitStack()
    if nodes > 1:  # a raylet per node, as on a cluster of machines (alignment/ray/local_cluster.py)
        address = cluster.enter_context(local_cluster(workers=nodes - 1)).address
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    results: dict[str, dict[str, float]] = {}
    try:
        for strategy in STRATEGIES:
            run = replace(
                base,
                strategy=strategy,
                output_dir=output_dir / strategy,
                multistep_k=multistep_k if strategy == "colocated-multistep" else 1,
                buffer_capacity=2 * base.n_prompts_per_rollout_batch,
                buffer_policy=buffer_policy,
            )
            started = time.perf_counter()
            train_grpo_ray(run)
            results[strategy] = summarize(run) | {"wall_s": time.perf_counter() - started}
        sync = sync_latencies(base, sync_repeats)
    finally:
        ray.shutdown()
        cluster.close()

    print(
        f"\n{steps} steps x {base.rollout_batch_size} samples, {base.model}, {platform.machine()}, {os.cpu_count()} "
        "CPUs, "
        f"{torch.cuda.device_count()} GPUs; seconds per step are means over steps 2..{steps}"
    )
    print(
        "| strategy | rollout | grading | train | weight sync | step (wall) | samples/s | device-hours | eval first "
        "-> final | max lag |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for strategy, r in results.items():
        print(
            f"| {strategy} | {r['rollout']:.2f} | {r['grading']:.2f} | {r['train']:.2f} | {r['sync']:.3f} | "
            f"{r['step']:.2f} | "
            f"{r['samples_per_s']:.2f} | {r['device_hours']:.5f} | {r['eval_first']:.3f} -> {r['eval_final']:.3f} | "
            f"{r['max_version_lag']:g} |"
        )
    print("\n| transport | median sync latency (s) |\n|---|---|")
    for transport, seconds in sync.items():
        print(f"| {transport} | {seconds:.4f} |")
    sync_loop = results["colocated-sync"]["loop_s"]
    speedups = {s: sync_loop / r["loop_s"] for s, r in results.items() if s != "colocated-sync"}
    print("\nspeedup over colocated-sync, same samples: " + ", ".join(f"{s} {x:.2f}x" for s, x in speedups.items()))
    plots = plot_runs([output_dir / s / "metrics.jsonl" for s in results], list(results), output_dir / "plots")
    summary = {
        "steps": steps,
        "model": base.model,
        "results": results,
        "sync_latency_s": sync,
        "speedup_vs_colocated_sync": speedups,
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"summary: {output_dir / 'summary.json'}; {len(plots)} plots in {output_dir / 'plots'}")


if __name__ == "__main__":
    typer.run(main)
