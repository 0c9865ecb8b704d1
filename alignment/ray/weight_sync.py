"""Pushing the learner's weights to the generators, behind one timed call, over one of three transports.

- object_store: the learner returns a CPU copy of its state dict; Ray stores it once and every generator reads
  it (works everywhere; costs a device-to-host copy and a serialization).
- nccl: Ray Direct Transport. The learner returns its GPU tensors with `tensor_transport="nccl"`; Ray keeps
  them on the learner and sends them GPU-to-GPU to each generator over an NCCL collective group. Only when
  every actor holds its own GPU (Ray's NCCL groups also need the `cupy` package).
- gloo: the same direct path over CPU tensors with gloo, so the direct-transport code runs without GPUs.

The learner actor must offer `weights(on_cpu: bool) -> dict[str, Tensor]` and each generator
`load_weights(state_dict, version) -> float` (and, for `offer`, the async strategy's non-blocking
`offer_weights(state_dict, version)` in its "control" concurrency group); all actors must be created with
`enable_tensor_transport=True`.
A learner of several processes (alignment/ray/learner_group.py's LearnerGroup) gathers its shards for each sync and
sends from its rank 0; over gloo, its process group already spans the generators, and the sync uses that group.
"""

import importlib.util
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ray.actor import ActorHandle
from ray.experimental.collective import create_collective_group, destroy_collective_group, get_collective_groups

from alignment.ray.env import ray

TRANSPORTS = ("object_store", "nccl", "gloo")


@dataclass(frozen=True)
class Placement:
    """Where an actor's tensors live: `cpu`, or a GPU named by node and GPU id."""

    name: str  # the actor, for messages
    device: str  # "cpu" or "cuda"
    gpu: str | None = None  # f"{node id}/{gpu id}" when on a GPU


def check_transport(transport: str, placements: Sequence[Placement]) -> None:
    """Refuse a transport the actors cannot use, saying why and what would work."""
    if transport not in TRANSPORTS:
        raise ValueError(f"--weight-sync {transport!r} is not one of {', '.join(TRANSPORTS)}")
    if transport != "nccl":
        return
    off_gpu = [p.name for p in placements if p.device != "cuda"]
    if off_gpu:
        raise ValueError(
            f"--weight-sync nccl needs every actor on a GPU, but {', '.join(off_gpu)} run on the CPU; "
            "use --weight-sync object_store (or gloo)"
        )
    gpus = [p.gpu for p in placements]
    if len(set(gpus)) < len(gpus):
        raise ValueError(
            f"--weight-sync nccl needs one GPU per actor, but they share {sorted(gpus)}; use --weight-sync object_store"
        )
    if importlib.util.find_spec("cupy") is None:
        raise ValueError(
            f"--weight-sync nccl needs Ray's NCCL collectives, which need cupy (`uv pip install {cupy_package()}`, "
            "the build for torch's CUDA); or use --weight-sync object_store"
        )


def cupy_package() -> str:
    """The cupy wheel for the CUDA that torch was built with: cupy-cuda13x for torch's CUDA 13.0."""
    if torch.version.cuda is None:  # a CPU build of torch: no CUDA to match
        return "cupy-cudaNNx, NN your CUDA's major version"
    return f"cupy-cuda{torch.version.cuda.split('.')[0]}x"


class WeightSync:
    """`sync(version)` sends the learner's current weights to every generator and returns the seconds it took."""

    def __init__(
        self,
        transport: str,
        learner: Any,
        generators: Sequence[ActorHandle],
        placements: Sequence[Placement],
        timeout_s: float,
    ) -> None:
        """`learner`: a Learner actor or a LearnerGroup."""
        check_transport(transport, placements)
        self.transport, self.learner, self.generators, self.timeout_s = transport, learner, list(generators), timeout_s
        self.group, self.own_group = None, False
        if transport != "object_store":
            members = [learner if isinstance(learner, ActorHandle) else learner.main, *generators]
            joined = get_collective_groups(members, backend=transport)  # a LearnerGroup's world, over gloo
            self.group, self.own_group = (
                (joined[0], False) if joined else (create_collective_group(members, backend=transport), True)
            )
        self.latencies: list[float] = []

    def weights(self) -> ray.ObjectRef:
        """A reference to the learner's weights as they are once its queued calls are done."""
        if self.group is None:
            return self.learner.weights.remote(True)
        # a reference only: tensors go learner -> generator when each task that takes them needs them
        return self.learner.weights.options(tensor_transport=self.transport).remote(False)

    def sync(self, version: int) -> float:
        start = time.perf_counter()
        weights = self.weights()
        ray.get([g.load_weights.remote(weights, version) for g in self.generators], timeout=self.timeout_s)
        self.latencies.append(time.perf_counter() - start)
        return self.latencies[-1]

    def offer(self, version: int, generators: Sequence[ActorHandle] | None = None) -> ray.ObjectRef:
        """Offer the learner's weights as `version` to the generators (default: all) without waiting: each loads
        them between two decode steps. Returns the weights' reference (keep it to offer them again)."""
        weights = self.weights()
        self.offer_ref(weights, version, generators)
        return weights

    def offer_ref(
        self, weights: ray.ObjectRef, version: int, generators: Sequence[ActorHandle] | None = None
    ) -> list[ray.ObjectRef]:
        return [
            g.offer_weights.options(concurrency_group="control").remote(weights, version)
            for g in (self.generators if generators is None else generators)
        ]

    def close(self) -> None:
        """Release the collective group it made (call after the actors are done; dead actors are skipped)."""
        if self.group is not None and self.own_group:
            try:
                destroy_collective_group(self.group)
            except ValueError:  # Ray destroyed it already, after a transfer to an actor that died
                pass
        self.group = None
