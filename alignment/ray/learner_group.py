"""The learner of GRPO on Ray as N actors sharing one policy with FSDP2 (--learner-processes N), behind one
Learner's interface: the strategies (alignment/ray/driver.py) call `learn`, `weights`, `save`, `restore` and
`digest` on a LearnerGroup exactly as on a single Learner actor.

Starting the group. The actors are spawned light (no model), then Ray itself starts torch.distributed among
them: `ray.experimental.collective.create_collective_group(actors, backend="gloo")` has rank 0 publish an
address in Ray's key-value store and every actor join it with `init_process_group("gloo")`, ranks in the order
given, wherever Ray placed them (one node or several of a `--ray-address` cluster). Each rank then makes a group
of the learners' ranks (NCCL on GPUs, gloo on CPUs) and loads the policy sharded over it as it is built
(`Learner.build`, through grpo_run's `load_policy`: each decoder layer, then the root, as under torchrun).

Why the learners shard over a group of their own rather than over torch's default group: the gloo weight sync
(alignment/ray/weight_sync.py) is a Ray collective group too, and Ray's torch-gloo groups assume that torch's
default group is theirs. An actor whose default group already exists is given `new_group(ranks 0..k-1)` of it
(for learner 0 with k = 2: learners 0 and 1, never the generator), and Ray admits an actor to one group per
backend. So with --weight-sync gloo the learners and the generator form one world, learners first: Ray's
direct transport finds learner 0 and the generator in it, and the learners' group is its first N ranks. Over the
object store (or NCCL, whose Ray groups are cupy communicators of their own) the world is the learners alone.

Why not Ray Train's TorchConfig (`ray.train.torch`), which starts a torch process group the same way: its
backend sets up a Ray Train worker group, actors that Ray Train creates and runs a training function in, not
actors that a driver calls method by method; the direct weight-sync transports need actors created with
`enable_tensor_transport=True`; and its group would be torch's default one, the collision above.

A call fans out: `group.learn.remote(...)` runs `learn` on every rank with the same arguments (put in the object
store once) and returns rank 0's reference. Every rank holds the whole batch and trains on its share of each
optimizer step's microbatches (the GRPO learner gathers the metrics, so rank 0's rows are the step's); every rank
saves and restores its shards (alignment/run/checkpoint.py, rank 0 writes policy/) and gathers the whole weights for
a sync, rank 0's being the ones sent (`.options(tensor_transport=...)` applies to rank 0's call). A rank that
dies breaks rank 0's next collective, and the driver names the dead rank (alignment/ray/driver.py); a rank's
own error reaches the driver as rank 0's broken or hung collective (--ray-timeout-s), the error itself in Ray's
log. With one process the group is one plain Learner and no process group.
"""

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from ray.actor import ActorHandle
from ray.experimental.collective import create_collective_group, destroy_collective_group
from ray.experimental.collective.communicator import CommunicatorHandle

from alignment.data.task import Task
from alignment.ray.actors import Learner, spawn
from alignment.ray.config import RayGRPOConfig
from alignment.ray.env import ray


class LearnerRank(Learner):
    """One rank of a learner group: its policy is loaded by `join`, once the process group exists."""

    def __init__(self, config: RayGRPOConfig, task: Task, device: str, threads: int) -> None:
        torch.set_num_threads(threads)
        self.config, self.task, self.device = config, task, device

    def join(self, learners: int) -> None:
        """Load this rank's shards of the policy, sharded over the world's first `learners` ranks."""
        backend = "nccl" if torch.device(self.device).type == "cuda" else "gloo"
        # only the learners call it (the world may hold generators too): local synchronization
        self.build(dist.new_group(list(range(learners)), backend=backend, use_local_synchronization=True))


class _Call:
    """A Learner method called on every rank of a group: `.remote(*args)` returns rank 0's reference."""

    def __init__(self, ranks: Sequence[ActorHandle], method: str, options: dict[str, Any] | None = None) -> None:
        self.ranks, self.method, self.rank0_options = ranks, method, options or {}

    def options(self, **options: Any) -> "_Call":
        """Options for rank 0's call, the one whose result is used (e.g. tensor_transport for a weight sync)."""
        return _Call(self.ranks, self.method, options)

    def remote(self, *args: Any) -> ray.ObjectRef:
        if len(self.ranks) > 1:
            args = tuple(ray.put(a) for a in args)  # stored once, read by every rank
        first, *others = [getattr(rank, self.method) for rank in self.ranks]
        for method in others:
            method.remote(*args)
        return (first.options(**self.rank0_options) if self.rank0_options else first).remote(*args)


class LearnerGroup:
    """The learner's actors: one Learner, or N LearnerRanks sharing the policy; each method call goes to all."""

    def __init__(self, ranks: list[ActorHandle]) -> None:
        self.ranks = ranks
        self.world: CommunicatorHandle | None = None  # the Ray collective group that started torch.distributed (N > 1)

    @classmethod
    def spawn(
        cls,
        config: RayGRPOConfig,
        task: Task,
        device: str,
        cpus: float,
        gpus: float,
        threads: int,
        resources: dict[str, float] | None = None,
    ) -> "LearnerGroup":
        """config.learner_processes actors, each holding `cpus`, `gpus` and the custom node `resources`; call `start`
        once they answer."""
        kind = Learner if config.learner_processes == 1 else LearnerRank
        return cls(
            [
                spawn(kind, cpus, gpus, config, task, device, threads, resources=resources)
                for _ in range(config.learner_processes)
            ]
        )

    @property
    def names(self) -> dict[str, ActorHandle]:
        """The actors by name, for messages ("Learner", or "Learner 0" ... "Learner N-1")."""
        if len(self.ranks) == 1:
            return {"Learner": self.ranks[0]}
        return {f"Learner {rank}": handle for rank, handle in enumerate(self.ranks)}

    @property
    def main(self) -> ActorHandle:
        """Rank 0: the actor whose weights the generators receive."""
        return self.ranks[0]

    def start(self, peers: Sequence[ActorHandle], timeout_s: float) -> None:
        """Start torch.distributed among the ranks, then `peers` (the generators, when they sync over gloo: see the
        module docstring), and load the sharded policy; nothing to do for one learner."""
        if len(self.ranks) == 1:
            return
        self.world = create_collective_group([*self.ranks, *peers], backend="gloo")
        ray.get([rank.join.remote(len(self.ranks)) for rank in self.ranks], timeout=timeout_s)

    def close(self) -> None:
        """Release the process group (after the actors are done; dead actors are skipped)."""
        if self.world is not None:
            destroy_collective_group(self.world)
            self.world = None

    @property
    def learn(self) -> _Call:
        return _Call(self.ranks, "learn")

    @property
    def weights(self) -> _Call:
        return _Call(self.ranks, "weights")

    @property
    def save(self) -> _Call:
        return _Call(self.ranks, "save")

    @property
    def restore(self) -> _Call:
        return _Call(self.ranks, "restore")

    @property
    def digest(self) -> _Call:
        return _Call(self.ranks, "digest")

    @property
    def placement(self) -> _Call:
        return _Call(self.ranks, "placement")
