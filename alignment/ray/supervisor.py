"""Keeping a run's actors alive: a generator or the scorer that dies, or hangs, is replaced mid-run.

The driver's strategies wait on their actors through `Driver.get`; when a wait fails (an actor's process or node is
gone: Ray raises at once for a killed process, within its node health check, about 15 s by default, for a removed
node; an actor silent past --ray-timeout-s is hung, treated as dead and killed), the strategy hands the error to
`Supervisor.recover`, which

- finds what was lost (a probe of every actor; on a timeout, the actors the wait was on that do not answer),
- replaces each lost generator (with the learner's current weights, and their version; over --weight-sync gloo or
  nccl in a collective group formed again, alignment/ray/weight_sync.py) and the scorer, while the run's
  replacements stay within --actor-restarts (every kind counted together),
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

    def recover(self, err: Exception, waited_on: Sequence[str], doing: str, reissued: Sequence[int] = ()) -> list[str]:
        """Replace what `err` lost and log it; the names replaced. Re-raises `err` when nothing was lost (the task's
        own error), when a learner was, or past --actor-restarts."""
        if self.restarts >= self.config.actor_restarts:  # nothing left to replace with: at once, as without restarts
            raise err
        started = time.perf_counter()
        lost = self.lost(err, waited_on)
        replaceable = set(self.actors.generators) - set(self.actors.learner_names) | {"Scorer"}
        if not lost or not set(lost) <= replaceable or self.restarts + len(lost) > self.config.actor_restarts:
            raise err
        for name in lost:
            self.restarts += 1
            self.replace(name)
        self.events.log(
            "replaced",
            actors=lost,
            while_=doing,
            error=type(err).__name__,
            replace_s=time.perf_counter() - started,
            groups_reissued=list(reissued),
            restarts=self.restarts,
            nodes=describe_nodes({name: self.actors.nodes[name] for name in lost}),
        )
        return lost

    def replace(self, name: str) -> None:
        """Start a fresh actor under `name` and put it where the old one was; a generator gets the learner's current
        weights before any work."""
        a = self.actors
        if name == "Scorer":
            handle = spawn(Scorer, 0, 0, *a.scorer_args, node=scorer_node())
            a.scorer = handle
        else:
            assert a.respawn is not None
            handle = a.respawn(name)
            a.generators[name] = handle
            if a.generator is a.names[name]:
                a.generator = handle
            if self.sync is not None:  # over gloo or nccl: a collective group formed again, with the replacement
                self.sync.replace_generators(list(a.generators.values()))
        a.names[name] = handle
        timeout = self.config.ray_timeout_s
        ray.get(handle.ping.remote(), timeout=timeout)
        a.nodes[name] = ray.get(handle.node.remote(), timeout=timeout)
        if name != "Scorer" and self.sync is not None and self.config.strategy != "async":
            weights = self.sync.weights()  # queued after the learner's calls so far, as is the version asked next
            main = a.learner.main if isinstance(a.learner, LearnerGroup) else a.learner
            version = ray.get(main.version.remote(), timeout=timeout)
            ray.get(handle.load_weights.remote(weights, version), timeout=timeout)
