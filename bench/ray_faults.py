"""What losing a node or the learner costs a GRPO run (the keyword task) on a three-node Ray cluster (one machine: a
head and two worker nodes, each its own raylet; alignment/ray/local_cluster.py).

    uv run python bench/ray_faults.py                 # a tiny random model, 4 steps per run
    uv run python bench/ray_faults.py --steps 6 --kill-after 3

For disaggregated-one-behind (over the object store, and over gloo: the replacement joins a collective group formed
again) and async (two generators): a run left alone, then the same run with the (first)
generator's node taken away after step --kill-after and a fresh node joined; for colocated-sync: the learner killed
after that step (every actor restarts from the checkpoint). Prints per run the wall time, the time lost against the
run left alone, the replacement's seconds and the groups handed out again (events.jsonl), and whether every trained
group was whole. Runs and summary.json go to --output-dir.
"""

import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import typer

from alignment.config.cli import read_config_file
from alignment.ray.cluster import ActorFailure
from alignment.ray.config import RayGRPOConfig
from alignment.ray.driver import train_grpo_ray
from alignment.ray.env import ray
from alignment.ray.local_cluster import local_cluster
from alignment.ray.run_events import RunEvents
from bench.ray_strategies import tiny_model


def whole_groups(folder: Path, group_size: int) -> bool:
    rows = [json.loads(line) for line in (folder / "rollouts.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["kind"] == "trained"]
    return bool(trained) and all(r["samples"] == group_size for r in trained)


def main(
    steps: int = typer.Option(4, help="GRPO steps per run."),
    kill_after: int = typer.Option(2, help="The step after which the node (or the learner) is lost."),
    output_dir: Path = typer.Option(Path("outputs/bench_ray_faults"), help="Runs and summary.json."),
) -> None:
    base = replace(
        RayGRPOConfig(**read_config_file(Path("configs/keyword_demo.toml"), RayGRPOConfig)),
        model=tiny_model(output_dir / "tiny-model"),
        n_grpo_steps=steps,
        rollout_batch_size=8,
        group_size=4,
        train_batch_size=8,
        gradient_accumulation_steps=2,
        sampling_max_tokens=8,
        n_eval_examples=4,
        eval_every=steps,
        checkpoint_every=1,
        backend="hf",
        overwrite=True,
        actor_restarts=1,
        ray_timeout_s=300.0,
    )
    runs = {
        "disaggregated-one-behind": {"strategy": "disaggregated-one-behind"},
        "disaggregated-one-behind, gloo": {"strategy": "disaggregated-one-behind", "weight_sync": "gloo"},
        "async": {"strategy": "async", "generators": 2, "max_staleness": 1},
        "colocated-sync": {"strategy": "colocated-sync"},
    }
    results: dict[str, dict] = {}
    stopped: dict[str, str] = {}
    with local_cluster(workers=2, head_cpus=1, worker_cpus=1) as cluster:
        for name, overrides in runs.items():
            walls = {}
            for kind in ("left alone", "lost"):
                folder = output_dir / name.replace(", ", "_") / kind.replace(" ", "_")
                config = replace(base, output_dir=folder, **overrides)
                config = replace(config, ray_address=cluster.address)

                def lose(step, actors, config=config, kind=kind):
                    if kind != "lost" or step != kill_after:
                        return
                    if config.colocated:
                        ray.kill(actors.learner)
                        return
                    generator = next(iter(actors.generators))
                    node = cluster.name_of(actors.nodes[generator])
                    cluster.remove(node)
                    cluster.add(f"{node} (replacement)")

                started = time.perf_counter()
                try:
                    train_grpo_ray(config, on_step=lose)
                except ActorFailure as failure:  # the table says so, and the other runs still go
                    stopped[name] = str(failure)
                walls[kind] = time.perf_counter() - started
                events = [e for e in RunEvents(config.output_dir).read() if e["event"] in ("replaced", "restarted")]
            results[name] = {
                "wall_left_alone_s": walls["left alone"],
                "wall_lost_s": walls["lost"],
                "time_lost_s": walls["lost"] - walls["left alone"],
                "events": [
                    {k: e.get(k) for k in ("event", "actors", "lost", "replace_s", "groups_reissued", "from_step")}
                    for e in events
                ],
                "whole_groups": whole_groups(config.output_dir, config.group_size),
                "stopped": stopped.get(name),
                "updates_per_step": Counter(
                    row["grpo_step"]
                    for row in map(json.loads, (config.output_dir / "metrics.jsonl").read_text().splitlines())
                    if "loss" in row
                ),
            }
    print(f"\n{steps} steps, lost after step {kill_after}, three nodes on one machine, tiny model")
    print(
        "| strategy | what is lost | wall, left alone (s) | wall, lost (s) | time lost (s) | replacement (s) "
        "| groups re-issued | whole groups |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        what = "learner (restart from checkpoint)" if name == "colocated-sync" else "generator's node"
        replace_s = ", ".join(f"{e['replace_s']:.1f}" for e in r["events"] if e.get("replace_s") is not None) or "-"
        reissued = sum(len(e["groups_reissued"] or ()) for e in r["events"])
        print(
            f"| {name} | {what} | {r['wall_left_alone_s']:.1f} | {r['wall_lost_s']:.1f} | {r['time_lost_s']:.1f} | "
            f"{replace_s} | {reissued} | {r['whole_groups']} |" + (f" stopped: {r['stopped']}" if r["stopped"] else "")
        )
    (output_dir / "summary.json").write_text(json.dumps(results, indent=2, default=str))
    print(f"summary: {output_dir / 'summary.json'}")


if __name__ == "__main__":
    typer.run(main)
