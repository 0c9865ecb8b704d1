"""The colocated worker's weight sync: the learner's weights copied into the generator's own copy of the model.

    uv run python bench/colocated_sync.py

UW CSE599-O A3 v2 §3.1.1 has the colocated worker keep "a second copy of the model just for generation": the Ray
ColocatedWorker (alignment/ray/actors.py) holds SmolLM2-135M-Instruct twice in float32 on the CPU, the learner's
policy and a generation copy, and `sync_engine` loads the learner's state dict into the copy. Built in this
process (the actor's class without Ray). Reported per backend: bytes per sync, the median of `--repeats` syncs
after one warm-up, and that the copy then matches the learner bit for bit.
"""

import statistics

import torch
import typer

from alignment.data.keywords import keyword_tasks, load_keywords
from alignment.ray.actors import ColocatedWorker
from alignment.ray.config import RayGRPOConfig


def main(repeats: int = typer.Option(5, help="syncs timed per backend")) -> None:
    task, _ = keyword_tasks("{question}", load_keywords(), 8, 1, 1, 0)
    print("| backend | bytes per sync | seconds per sync (median) | copy == learner after |\n|---|---|---|---|")
    for backend in ("transformer_lm", "hf"):
        config = RayGRPOConfig(model="smollm2-135m", task="keywords", backend=backend, kl_reference=False)
        worker = ColocatedWorker(config, task, task, "cpu", torch.get_num_threads())
        unique = {t.data_ptr(): t for t in worker.learner.policy.state_dict().values()}  # tied embeddings once
        size = sum(t.numel() * t.element_size() for t in unique.values())
        with torch.no_grad():  # an update's worth of change, so that each sync copies new values
            for parameter in worker.learner.policy.parameters():
                parameter.add_(1e-3)
        seconds = [worker.sync_engine() for _ in range(repeats + 1)][1:]
        same = worker.generator_digest() == worker.digest()
        print(f"| {backend} | {size / 2**20:.0f} MiB | {statistics.median(seconds):.3f} s | {same} |")
        del worker


if __name__ == "__main__":
    typer.run(main)
