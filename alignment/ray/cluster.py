"""Starting, probing and stopping the actors of a GRPO run on Ray.

Resources: with GPUs, each model actor holds one (a shared GPU is split in halves when there is only one; a
learner of several processes needs a GPU for each and one for each generator); on CPUs, the colocated worker
takes every core, and the generators and the learner half each (split among the learner's processes and among
the async strategy's --generators), with torch limited to that many threads so they do not fight over cores. The
scorer reserves no core (grading is light and its worker processes are its own). `devices` (GPUs, or CPU cores)
is what device-hours multiply by.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ray.actor import ActorHandle
from ray.exceptions import GetTimeoutError, RayActorError

from alignment.data.task import Task
from alignment.ray.actors import ColocatedWorker, Generator, spawn
from alignment.ray.config import RayGRPOConfig
from alignment.ray.env import ray
from alignment.ray.learner_group import LearnerGroup
from alignment.ray.scorer import Scorer
from alignment.ray.weight_sync import Placement

PROBE_TIMEOUT_S = 10.0  # a live actor busy with a long call answers later: it is reported as not answering


class ActorFailure(RuntimeError):
    """An actor died or stopped answering; the message names it and says where the last checkpoint is."""


@dataclass
class Actors:
    generator: ActorHandle  # the ColocatedWorker when colocated
    learner: ActorHandle | LearnerGroup  # the same handle when colocated
    scorer: ActorHandle
    devices: float  # GPUs held, or CPU cores on a CPU-only cluster
    names: dict[str, ActorHandle] = field(default_factory=dict)
    placements: list[Placement] = field(default_factory=list)
    learner_names: list[str] = field(default_factory=list)  # the actors holding the policy being trained
    generators: dict[str, ActorHandle] = field(default_factory=dict)  # by name; the ColocatedWorker when colocated
    respawn: Callable[[str], ActorHandle] | None = None  # a fresh generator of that name (async: replacing a dead one)

    def stop(self) -> None:
        for handle in self.names.values():
            ray.kill(handle)
        if isinstance(self.learner, LearnerGroup):
            self.learner.close()


def start_actors(config: RayGRPOConfig, task: Task, validation: Task) -> Actors:
    """Create the strategy's actors and wait (at most --ray-timeout-s) until their models are loaded."""
    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    cores = max(1, min(int(resources.get("CPU", 1)), os.cpu_count() or 1))
    if (
        config.weight_sync == "nccl" and gpus < 2
    ):  # refused before any model loads; check_transport re-checks placements
        raise ValueError(
            f"--weight-sync nccl needs the generator and the learner on GPUs of their own; this cluster "
            f"has {gpus} GPU(s): use --weight-sync object_store (or gloo)"
        )
    n = config.learner_processes
    n_generators = config.generators if config.strategy == "async" else 1
    if gpus and (n > 1 or n_generators > 1) and gpus < n + n_generators:  # NCCL runs one rank per GPU
        raise ValueError(
            f"--learner-processes {n} and {n_generators} generator(s) need a GPU each ({n + n_generators}); this "
            f"cluster has {gpus}"
        )
    scorer = spawn(Scorer, 0, 0, task, config.grader_workers)
    if config.colocated:
        cpus, gpu_share = (1, 1) if gpus else (cores, 0)
        worker = spawn(
            ColocatedWorker, cpus, gpu_share, config, task, validation, "cuda" if gpus else "cpu", max(1, int(cpus))
        )
        actors = Actors(
            worker,
            worker,
            scorer,
            1 if gpus else cores,
            {"ColocatedWorker": worker, "Scorer": scorer},
            learner_names=["ColocatedWorker"],
            generators={"ColocatedWorker": worker},
        )
    else:
        cpus, gpu_share = (1, 1 if gpus >= 2 else 0.5) if gpus else (cores / 2, 0)
        device = "cuda" if gpus else "cpu"
        generator_cpus = cpus if gpus else cpus / n_generators

        def respawn(name: str) -> ActorHandle:
            args = (config, task, validation, device, max(1, int(generator_cpus)), name)
            return spawn(Generator, generator_cpus, gpu_share, *args, control=config.strategy == "async")

        names = ["Generator"] if n_generators == 1 else [f"Generator {i}" for i in range(n_generators)]
        generators = {name: respawn(name) for name in names}
        learner_cpus = cpus if gpus else cpus / n
        learner = LearnerGroup.spawn(config, task, device, learner_cpus, gpu_share, max(1, int(learner_cpus)))
        actors = Actors(
            generators[names[0]],
            learner,
            scorer,
            min(gpus, n + n_generators) if gpus else cores,
            {**generators, **learner.names, "Scorer": scorer},
            learner_names=list(learner.names),
            generators=generators,
            respawn=respawn,
        )
    try:
        ray.get([h.ping.remote() for h in actors.names.values()], timeout=config.ray_timeout_s)
        if isinstance(actors.learner, LearnerGroup):  # over gloo, the weight sync's group is the learners' world too
            actors.learner.start(
                list(actors.generators.values()) if config.weight_sync == "gloo" else [], config.ray_timeout_s
            )
        models = [actors.learner] if config.colocated else [actors.learner, *actors.generators.values()]
        actors.placements = ray.get([h.placement.remote() for h in models], timeout=config.ray_timeout_s)
    except GetTimeoutError:
        actors.stop()
        raise ActorFailure(
            f"the actors ({', '.join(actors.names)}) did not start within --ray-timeout-s="
            f"{config.ray_timeout_s:g} s; the cluster has {resources.get('CPU', 0):g} CPUs and "
            f"{gpus} GPUs (is another run holding them?)"
        ) from None
    except RayActorError as err:
        actors.stop()
        raise ActorFailure(f"an actor failed to start: {err}") from None
    return actors


def dead_actors(actors: Actors) -> list[str]:
    """Names of the actors that are gone (a ping raises instead of answering or timing out)."""
    pings = {name: handle.ping.remote() for name, handle in actors.names.items()}
    dead = []
    for name, ref in pings.items():
        try:
            ray.get(ref, timeout=PROBE_TIMEOUT_S)
        except RayActorError:
            dead.append(name)
        except GetTimeoutError:
            pass
    return dead
