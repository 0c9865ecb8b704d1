"""Keeping a run's actors alive: a generator or the scorer that dies, or hangs, is replaced mid-run.

The driver's strategies wait on their actors through `Driver.get`; when a wait fails (an actor's process or node is
gone: Ray raises at once for a killed process, within its node health check, about 15 s by default, for a removed
node; an actor silent past --ray-timeout-s is hung, treated as dead and killed), the strategy hands the error to
`Supervisor.recover`, which

- finds what was lost (a probe of every actor; on a timeout, the actors the wait was on that do not answer),
- replaces each lost generator (with the learner's current weights, and their version; over --weight-sync gloo or
  nccl in a collective group formed again, alignment/ray/weight_sync.py) and the scorer, while the run's
  replacements stay within --actor-restarts (every kind counted together),
- under the async strategy, drops a lost generator it cannot replace (past the bound, or no room on the cluster)
  while another generator lives, the survivors taking its work,
- logs the event to events.jsonl: which actors, when, the seconds lost, the groups the strategy hands out again,
- and otherwise re-raises the error: the driver then stops the run as before, naming the actor, checkpointing what
  it can and saying how to resume.

The strategy then re-issues the lost work whole: a batch's every group (the same prompts, on the replacement), never
a part of one, and never a failed generation scored as a reward. What the gradient sees is what an uninterrupted run
would have trained on, sampled by weights at most as stale as the strategy allows (a replacement holds the learner's
newest weights).
"""

import time
from collections.abc import Sequence

from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError, RayTaskError

from alignment.ray.actors import spawn
from alignment.ray.cluster import PROBE_TIMEOUT_S, Actors, dead_actors, describe_nodes, scorer_node
from alignment.ray.config import RayGRPOConfig
from alignment.ray.env import ray
from alignment.ray.learner_group import LearnerGroup
from alignment.ray.run_events import RunEvents
from alignment.ray.scorer import Scorer
from alignment.ray.weight_sync import WeightSync

# what a wait on a lost actor raises (ObjectLostError: a result that lived in a removed node's object store)
FAILURES = (RayActorError, GetTimeoutError, RayTaskError, ObjectLostError)


class Supervisor:
    def __init__(
        self, config: RayGRPOConfig, actors: Actors, sync: WeightSync | None, events: RunEvents, restarts: int = 0
    ) -> None:
        self.config, self.actors, self.sync, self.events = config, actors, sync, events
        self.restarts = restarts  # replacements so far, of every kind (a restarted learner's included)

    def lost(self, err: Exception, waited_on: Sequence[str]) -> list[str]:
        """The actors gone after `err`: those whose probe fails and, when the wait timed out, those it waited on that
        do not answer a probe either (hung: killed, so that a late answer cannot reach the run)."""
        dead = dead_actors(self.actors)
        if isinstance(err, GetTimeoutError):
            for name in waited_on:
                handle = self.actors.names.get(name)
                if name in dead or handle is None:
                    continue
                try:
                    ray.get(handle.ping.remote(), timeout=PROBE_TIMEOUT_S)
                except FAILURES:
                    ray.kill(handle, no_restart=True)
                    dead.append(name)
        return dead

    def recover(
        self,
        err: Exception,
        waited_on: Sequence[str],
        doing: str,
        reissued: Sequence[int] = (),
        can_drop: bool = False,
    ) -> list[str]:
        """Replace what `err` lost and log it; the names replaced. Re-raises `err` when nothing was lost (the task's
        own error), when a learner was, or past --actor-restarts, or when the cluster has no room for a replacement.

        `can_drop` (the async strategy): a lost generator that cannot be replaced (past --actor-restarts, or no room)
        is dropped instead while another generator lives, the run going on with the survivors (a `dropped` event)."""
        bound = self.config.actor_restarts
        if self.restarts >= bound and not can_drop:  # nothing left to replace with: at once, as without restarts
            raise err
        started = time.perf_counter()
        lost = self.lost(err, waited_on)
        replaceable = set(self.actors.generators) - set(self.actors.learner_names) | {"Scorer"}
        if not lost or not set(lost) <= replaceable:
            raise err
        survivors = [name for name in self.actors.generators if name not in lost]
        if not (can_drop and survivors) and self.restarts + len(lost) > bound:
            raise err
        replaced, dropped, why = [], [], ""
        for name in lost:
            if self.restarts < bound:
                try:
                    self.replace(name, wait=not (can_drop and survivors))
                    self.restarts += 1
                    replaced.append(name)
                    continue
                except NoRoom as no_room:
                    why = str(no_room)
            else:
                why = f"past --actor-restarts {bound}"
            if not (can_drop and survivors and name != "Scorer"):
                raise err
            dropped.append(name)
        if dropped:
            self.drop(dropped)
        common = {"while_": doing, "error": type(err).__name__, "groups_reissued": list(reissued)}
        if replaced:
            self.events.log(
                "replaced",
                actors=replaced,
                **common,
                replace_s=time.perf_counter() - started,
                restarts=self.restarts,
                nodes=describe_nodes({name: self.actors.nodes[name] for name in replaced}),
            )
        if dropped:
            self.events.log(
                "dropped",
                actors=dropped,
                **common,
                reason=why,
                generators_left=list(self.actors.generators),
                seconds=time.perf_counter() - started,
            )
        return replaced

    def replace(self, name: str, wait: bool = True) -> None:
        """Start a fresh actor under `name` and put it where the old one was; a generator gets the learner's current
        weights before any work. Raises NoRoom when it does not start within --ray-timeout-s (a node may join
        meanwhile) or, without `wait` (survivors can go on without it), when the cluster has no room for it now."""
        a, timeout = self.actors, self.config.ray_timeout_s
        if name == "Scorer":
            handle = spawn(Scorer, 0, 0, *a.scorer_args, node=scorer_node())
        else:
            assert a.respawn is not None
            if not wait and not room(a.generator_demand):
                raise NoRoom(f"no room on the cluster for a generator ({describe_demand(a.generator_demand)})")
            handle = a.respawn(name)
        try:
            ray.get(handle.ping.remote(), timeout=timeout)
        except GetTimeoutError:  # not placed (or not loaded) in time
            ray.kill(handle, no_restart=True)
            raise NoRoom(f"the replacement did not start within --ray-timeout-s={timeout:g} s") from None
        if name == "Scorer":
            a.scorer = handle
        else:
            a.generators[name] = handle
            if a.generator is a.names[name]:
                a.generator = handle
            if self.sync is not None:  # over gloo or nccl: a collective group formed again, with the replacement
                self.sync.replace_generators(list(a.generators.values()))
        a.names[name] = handle
        a.nodes[name] = ray.get(handle.node.remote(), timeout=timeout)
        if name != "Scorer" and self.sync is not None and self.config.strategy != "async":
            weights = self.sync.weights()  # queued after the learner's calls so far, as is the version asked next
            main = a.learner.main if isinstance(a.learner, LearnerGroup) else a.learner
            version = ray.get(main.version.remote(), timeout=timeout)
            ray.get(handle.load_weights.remote(weights, version), timeout=timeout)

    def drop(self, names: Sequence[str]) -> None:
        """Go on without these lost generators: the weights go to the survivors only (over gloo or nccl in a group
        formed again without them)."""
        a = self.actors
        for name in names:
            del a.generators[name], a.names[name]
            a.nodes.pop(name, None)
        if a.generator not in a.generators.values():
            a.generator = next(iter(a.generators.values()))
        if self.sync is not None:
            self.sync.replace_generators(list(a.generators.values()))


class NoRoom(RuntimeError):
    """The cluster cannot take a replacement actor now."""


ROOM_WAIT_S = 5.0  # a lost actor's resources reach the cluster's free count a moment after its death is seen


def room(demand: dict[str, float]) -> bool:
    """Whether the cluster's free resources hold one more actor of `demand` (summed over the nodes: an actor that
    still finds no node is given up after --ray-timeout-s)."""
    deadline = time.perf_counter() + ROOM_WAIT_S
    while True:
        free = ray.available_resources()
        if all(free.get(key, 0.0) >= amount - 1e-9 for key, amount in demand.items() if amount):
            return True
        if time.perf_counter() > deadline:
            return False
        time.sleep(0.5)


def describe_demand(demand: dict[str, float]) -> str:
    return ", ".join(f"{amount:g} {key}" for key, amount in demand.items() if amount)
