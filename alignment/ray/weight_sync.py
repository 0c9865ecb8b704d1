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

A generator replaced mid-run (alignment/ray/supervisor.py) joins a group formed again (`replace_generators`). Ray's
own create and destroy do not do it alone: `destroy_collective_group` tolerates a dead member but releases only
Ray's subgroup, while a torch-gloo group keeps torch's default process group, whose world still holds the lost rank
(a later group in the same processes is carved out of that world, and the replacement, a fresh process, waits for a
rendezvous nobody answers); and `create_collective_group` starts each rank on the actor's default thread, which an
async generator's stream holds for the whole run. So the survivors drop the default group too, and every member
joins the new group on the thread Ray's transfers run on (`_ray_system`, ordered after the transfers queued
before it).
"""

import importlib.util
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from ray.actor import ActorHandle
from ray.exceptions import RayActorError
from ray.experimental import internal_kv
from ray.experimental.collective import create_collective_group, destroy_collective_group, get_collective_groups
from ray.experimental.collective.collective import RemoteCommunicatorManager
from ray.experimental.collective.communicator import CommunicatorHandle
from ray.util.collective.collective_group.torch_gloo_collective_group import get_master_address_metadata_key

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
            members = [self.sender, *generators]
            joined = get_collective_groups(members, backend=transport)  # a LearnerGroup's world, over gloo
            self.group, self.own_group = (
                (joined[0], False) if joined else (create_collective_group(members, backend=transport), True)
            )
        self.latencies: list[float] = []

    @property
    def sender(self) -> ActorHandle:
        return self.learner if isinstance(self.learner, ActorHandle) else self.learner.main

    def replace_generators(self, generators: Sequence[ActorHandle]) -> None:
        """The generators after one was lost (the survivors, and its replacement if any); over a direct transport the
        group is formed again over the learner and them, since the old one holds the lost actor. The new group is
        registered where Ray's own create_collective_group registers one (Ray's internals, as the lock pins them)."""
        self.generators = list(generators)
        if self.group is None:
            return
        if not self.own_group:  # validate_ray refuses restarts with a LearnerGroup's gloo world
            raise RuntimeError("a learner group's gloo world cannot take a replaced generator")
        try:
            destroy_collective_group(self.group)
        except (ValueError, RayActorError):  # Ray destroyed it after a failed transfer, or a member is gone
            pass
        members = [self.sender, *self.generators]
        on_transfer_thread = [m.__ray_call__.options(concurrency_group="_ray_system") for m in members]
        gloo = self.transport == "gloo"
        ray.get([call.remote(_leave, self.group.name, gloo) for call in on_transfer_thread], timeout=self.timeout_s)
        name = str(uuid.uuid4())
        try:
            ray.get(
                [
                    call.remote(_join, len(members), rank, self.transport, name)
                    for rank, call in enumerate(on_transfer_thread)
                ],
                timeout=self.timeout_s,
            )
        finally:
            if gloo:
                internal_kv._internal_kv_del(get_master_address_metadata_key(name))
        self.group = CommunicatorHandle(members, name, self.transport)
        RemoteCommunicatorManager.get().add_remote_communicator(self.group)

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


def _leave(actor: Any, name: str, gloo: bool) -> None:
    """In a member of a group that lost one: release the group, and under gloo torch's default process group (Ray's
    torch-gloo groups start it, and its world holds the lost rank)."""
    from ray.util import collective

    if collective.is_group_initialized(name):
        collective.destroy_collective_group(name)
    if gloo and dist.is_initialized():
        dist.destroy_process_group()


def _join(actor: Any, world: int, rank: int, backend: str, name: str) -> None:
    from ray.util import collective

    collective.init_collective_group(world, rank, backend, group_name=name)
