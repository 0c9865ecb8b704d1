"""Starting, probing and stopping the actors of a GRPO run on Ray.

Resources: with GPUs, each model actor holds one (a shared GPU is split in halves when there is only one; a
learner of several processes needs a GPU for each and one for each generator); on CPUs, the colocated worker
takes every core, and the generators and the learner half each (split among the learner's processes and among
the async strategy's --generators), with torch limited to that many threads so they do not fight over cores. The
scorer reserves no core (grading is light and its worker processes are its own). `devices` (GPUs, or CPU cores)
is what device-hours multiply by.

Nodes: a cluster whose nodes offer the custom resources `generator` and `learner` (`ray start --resources
'{"generator": 1}'`) places each generator on a unit of `generator` (one per unit: generators spread over the nodes
offering it) and the learner's processes (or the colocated worker) on a node offering `learner`; each actor's CPUs
are capped by what such a node has. A cluster offering neither places the actors where Ray finds room.
"""

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from ray.actor import ActorHandle
from ray.exceptions import AuthenticationError, GetTimeoutError, RayActorError

from alignment.data.task import Task
from alignment.ray.actors import ColocatedWorker, Generator, spawn
from alignment.ray.config import RayGRPOConfig
from alignment.ray.env import ray
from alignment.ray.learner_group import LearnerGroup
from alignment.ray.scorer import Scorer
from alignment.ray.weight_sync import Placement

GENERATOR_RESOURCE, LEARNER_RESOURCE = "generator", "learner"
PROBE_TIMEOUT_S = 10.0  # a live actor busy with a long call answers later: it is reported as not answering


class ActorFailure(RuntimeError):
    """An actor died or stopped answering; the message names it and says where the last checkpoint is. `lost`: the
    actors gone (dead, or hung past --ray-timeout-s); `restarts`: the run's replacements so far."""

    def __init__(self, message: str, lost: list[str] | None = None, restarts: int = 0) -> None:
        super().__init__(message)
        self.lost, self.restarts = lost or [], restarts


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
    nodes: dict[str, str] = field(default_factory=dict)  # actor name -> the id of the node it runs on
    scorer_args: tuple = ()  # what a replacement Scorer is started with
    generator_demand: dict[str, float] = field(default_factory=dict)  # the resources one generator holds

    def stop(self) -> None:
        for handle in self.names.values():
            ray.kill(handle)
        if isinstance(self.learner, LearnerGroup):
            self.learner.close()


def connect(address: str | None, logging_level: int) -> None:
    """Join the cluster at `address` (--ray-address), or start a local one when None. An address where no head
    answers, or a cluster that refuses this process's token, fails in one line naming the flag."""
    if address is not None and address != "auto" and "://" not in address:
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
                pass
        except (OSError, ValueError) as err:
            raise ValueError(
                f"--ray-address {address}: no Ray head answers there ({err}); give the head's HOST:PORT "
                "(`ray start --head` prints it), or leave --ray-address out to start a local cluster"
            ) from None
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging_level)
    except (AuthenticationError, ConnectionError) as err:
        ray.shutdown()
        causes = []
        cause: BaseException | None = err
        while cause is not None:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        if any(isinstance(c, AuthenticationError) or "InvalidAuthToken" in str(c) for c in causes):
            raise ValueError(
                f"--ray-address {address}: the cluster refused this process's authentication token; give it the "
                "cluster's token (`ray get-auth-token` on the head) in RAY_AUTH_TOKEN, a file named by "
                "RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token"
            ) from None
        first = str(causes[-1]).strip().splitlines()[0] if str(causes[-1]).strip() else type(causes[-1]).__name__
        raise ValueError(f"--ray-address {address}: could not join the cluster ({first})") from None


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
    generator_units, learner_units = resources.get(GENERATOR_RESOURCE), resources.get(LEARNER_RESOURCE)
    if generator_units is not None and not config.colocated and generator_units < n_generators:
        raise ValueError(
            f"{n_generators} generator(s) need a unit of the cluster's `{GENERATOR_RESOURCE}` resource each; its nodes "
            f"offer {generator_units:g} (start more with `ray start --resources '{{\"{GENERATOR_RESOURCE}\": 1}}'`)"
        )
    on_learner_node = {} if learner_units is None else {LEARNER_RESOURCE: 1}
    scorer_args = (task, config.grader_workers)
    scorer = spawn(Scorer, 0, 0, *scorer_args, node=scorer_node())
    if config.colocated:
        cpus, gpu_share = (1, 1) if gpus else (min(cores, node_share(LEARNER_RESOURCE)), 0)
        worker = spawn(
            ColocatedWorker,
            cpus,
            gpu_share,
            config,
            task,
            validation,
            "cuda" if gpus else "cpu",
            max(1, int(cpus)),
            resources=on_learner_node,
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
        generator_cpus = cpus if gpus else min(cpus / n_generators, node_share(GENERATOR_RESOURCE))
        on_generator_node = {} if generator_units is None else {GENERATOR_RESOURCE: 1}

        def respawn(name: str) -> ActorHandle:
            args = (config, task, validation, device, max(1, int(generator_cpus)), name)
            return spawn(
                Generator,
                generator_cpus,
                gpu_share,
                *args,
                control=config.strategy == "async",
                resources=on_generator_node,
            )

        names = ["Generator"] if n_generators == 1 else [f"Generator {i}" for i in range(n_generators)]
        generators = {name: respawn(name) for name in names}
        learner_cpus = cpus if gpus else min(cpus, node_share(LEARNER_RESOURCE)) / n
        on_learner_node = {} if learner_units is None else {LEARNER_RESOURCE: 1 / n}
        learner = LearnerGroup.spawn(
            config, task, device, learner_cpus, gpu_share, max(1, int(learner_cpus)), on_learner_node
        )
        actors = Actors(
            generators[names[0]],
            learner,
            scorer,
            min(gpus, n + n_generators) if gpus else cores,
            {**generators, **learner.names, "Scorer": scorer},
            learner_names=list(learner.names),
            generators=generators,
            respawn=respawn,
            generator_demand={"CPU": generator_cpus, "GPU": gpu_share, **on_generator_node},
        )
    actors.scorer_args = scorer_args
    try:
        ray.get([h.ping.remote() for h in actors.names.values()], timeout=config.ray_timeout_s)
        if isinstance(actors.learner, LearnerGroup):  # over gloo, the weight sync's group is the learners' world too
            actors.learner.start(
                list(actors.generators.values()) if config.weight_sync == "gloo" else [], config.ray_timeout_s
            )
        actors.nodes = dict(
            zip(actors.names, ray.get([h.node.remote() for h in actors.names.values()], timeout=config.ray_timeout_s))
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


def node_share(resource: str) -> float:
    """The CPUs one unit of `resource` comes with on the nodes offering it (the least, over them), or no limit when no
    node offers it."""
    shares = [
        node["Resources"].get("CPU", 0) / node["Resources"][resource]
        for node in ray.nodes()
        if node["Alive"] and node["Resources"].get(resource)
    ]
    return min(shares) if shares else float("inf")


def describe_nodes(nodes: dict[str, str]) -> dict[str, dict]:
    """Each actor's node: its id, address and the resources it offers (for the run's log)."""
    known = {node["NodeID"]: node for node in ray.nodes()}
    described = {}
    for actor, node_id in nodes.items():
        node = known.get(node_id, {})
        described[actor] = {
            "node_id": node_id,
            "address": f"{node.get('NodeManagerAddress', '?')}:{node.get('NodeManagerPort', '?')}",
            "resources": {
                k: v for k, v in node.get("Resources", {}).items() if not k.startswith("node:") and "memory" not in k
            },
        }
    return described


def scorer_node() -> tuple[str, bool]:
    """Where the scorer runs: on the learner's node, only there (the run cannot outlive it anyway, while a
    generator's node may go mid-run), else on the driver's when it can."""
    for node in ray.nodes():
        if node["Alive"] and node["Resources"].get(LEARNER_RESOURCE):
            return node["NodeID"], True
    return ray.get_runtime_context().get_node_id(), False
