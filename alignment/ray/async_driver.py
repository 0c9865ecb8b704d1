"""The async strategy (--strategy async --max-staleness ETA): generators never stop, the learner never trains a token
more than ETA policy versions older than itself.

Tickets. Group t (t = 0, 1, ...) asks question t of the seeded prompt order, as step t // B of the synchronous
strategies would (B = --rollout-batch-size / --group-size); the groups of one rollout batch share its sampling
seed and are sampled together. A run of N steps trains exactly groups 0 .. N·B - 1, each once, as colocated-sync
does; only when, and on which weights, differ (with --env, less the groups dropped, below, and as many more).

Streaming. Each generator (alignment/ray/actors.py) runs one long `stream` call: it samples the groups handed to it
and yields each as soon as its group_size responses are done; the scorer grades it at once; it waits, ready, in
the driver's table. With --partial-rollouts, weights the learner publishes reach the generators while they sample
and are loaded between two decode steps, so a response may hold tokens of several versions; each token records
its version and behaviour log-prob (alignment/rollout/streaming.py), and the learner's objective weighs and clips
each against the right policy (--off-policy-objective, alignment/grpo/objective.py).

Episodes (--env). A generator plays a unit's multi-turn episodes turn by turn, loading offered weights between two
turns (alignment/ray/episode_stream.py), and streams each group, scored by its environment (no scorer call), as
soon as that group's episodes have all ended, the unit's other groups playing on. An episode's versions are one per
sampled token, so the rules below apply to episodes unchanged: an episode's age is the learner's version minus the
oldest version any of its turns was sampled with. The table tracks each ticket, not each unit: a lost generator's
groups already streamed stay (trained once), and only its unfinished ones are handed out again, whole.

Failed episodes (--env). A group with an episode its environment failed (an error, a missed --env-step-timeout-s)
is dropped whole, as the one-process loop drops it (alignment/grpo/episode_sampler.py): never trained, counted in
`train_env_groups_dropped` of the next update's rows, and replaced by the next ticket of the prompt order (the
total grows by one), so every batch is still full and the prompt order is kept, the dropped question skipped as
the one-process loop skips it. Not the same ticket again: a question its environment fails would fail again. As
many groups dropped in a row as a rollout batch holds (B, none intact among them) stop the run with
EnvironmentUnavailable, one line naming --env and the last error: the evidence on which the one-process loop stops
(a step whose every group failed).

Staleness. A group's age at the learner's version v is v minus the oldest version among its tokens. Two rules keep
every trained group within ETA:
- admission (AReaL's): at most (ETA + 1)·B groups are handed out and not yet trained; a group handed out at
  version v may not start on weights older than v (its floor). With ETA = 0 that is exactly one rollout batch per
  version, sampled by that version: the synchronous on-policy update.
- the batch (earliest deadline first): a group is due by version start + ETA (floor + ETA while unfinished). The
  learner takes the B graded groups due first, unless leaving the rest would make some later version unable to
  take every group due by then (more than B per version); then it waits for the older groups (learner idle).
  Ages are checked on every batch (a RuntimeError past ETA) and logged per step: `staleness_mean`/`_max` and
  `stale_groups` (groups older than the learner), `token_lag_mean`, `version_span_max` (versions within one
  response), `partial_fraction`.

Faults. A generator that dies is replaced (--actor-restarts, alignment/ray/supervisor.py) and its unfinished groups
handed out again on the current weights; one that cannot be replaced (past the allowance, or no room on the cluster)
is dropped while another generator lives, the survivors taking its groups; with none left the run stops naming it,
with a checkpoint. A lost scorer's replacement grades again every group whose grading was under way. A checkpoint
keeps the groups trained (never handed out again), the graded groups waiting (kept on resume unless the bound,
possibly lowered, would be broken: those are dropped, counted in `resume_dropped`, and sampled again) and the
position reached; groups in flight at the crash are sampled again on the checkpoint's weights.
"""

import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from alignment.envs.base import EnvironmentUnavailable
from alignment.envs.episode import Episode
from alignment.grpo.sampler import rollout_stats, validation_sampling
from alignment.ray.actors import Clock, Learned, Streamed, Validate, Validated, Work, sampled_tokens, token_checksum
from alignment.ray.cluster import Actors
from alignment.ray.config import RayGRPOConfig
from alignment.ray.env import ray
from alignment.ray.supervisor import FAILURES
from alignment.ray.weight_sync import WeightSync
from alignment.rollout.interface import Rollout
from alignment.run.metrics_log import MetricsLog
from alignment.run.setup import PromptOrder


class DriverCore(Protocol):
    """What the async loop uses of alignment/ray/driver.py's Driver, which runs it."""

    config: RayGRPOConfig
    actors: Actors
    n_questions: int
    step: int  # the learner's version
    doing: str
    sync: WeightSync | None
    log: MetricsLog

    def get(self, refs: Any, doing: str) -> Any: ...

    def commit(self, rows: list[dict]) -> list[dict]: ...

    def elapsed(self) -> float: ...


@dataclass
class Ticket:
    """One question's group on its way from a generator to the learner."""

    number: int  # position in the prompt order
    question: int
    floor: int  # the oldest weights it may be started on: the learner's version when it was handed out
    generator: str | None = None
    rollouts: list[Rollout] | None = None  # once streamed, with per-token versions
    scores: list[dict[str, float]] | None = None  # once graded
    grading_s: float = 0.0

    @property
    def start(self) -> int | None:
        """The oldest policy version among its tokens, once streamed."""
        if self.rollouts is None:
            return None
        return min(min(r.versions or [self.floor]) for r in self.rollouts)

    def deadline(self, eta: int) -> int:
        """The last learner version that may train it."""
        start = self.start
        return (self.floor if start is None else start) + eta

    def record(self) -> dict[str, Any]:
        """The ticket as JSON values (a graded one, for a checkpoint)."""
        return {
            "number": self.number,
            "question": self.question,
            "floor": self.floor,
            "rollouts": [asdict(r) for r in self.rollouts or ()],
            "scores": self.scores,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Ticket":
        rollouts = [Episode(**r) if "turn_starts" in r else Rollout(**r) for r in record["rollouts"]]
        return cls(record["number"], record["question"], record["floor"], None, rollouts, record["scores"])


def pick_batch(tickets: Iterable[Ticket], version: int, size: int, eta: int) -> list[Ticket] | None:
    """The `size` graded tickets the learner at `version` trains now, or None when it must wait.

    Earliest deadline first: the graded tickets due first, if the others (graded or not) can still all be trained in
    time: for every later version u <= version + eta, at most (u - version)·size of them due by u."""
    outstanding = list(tickets)
    ready = sorted((t for t in outstanding if t.scores is not None), key=lambda t: (t.deadline(eta), t.number))
    if len(ready) < size:
        return None
    batch = ready[:size]
    taken = {t.number for t in batch}
    left = [t.deadline(eta) for t in outstanding if t.number not in taken]
    for u in range(version, version + eta + 1):
        if sum(d <= u for d in left) > (u - version) * size:
            return None
    return batch


def keep_on_resume(tickets: Sequence[Ticket], version: int, size: int, eta: int) -> tuple[list[Ticket], list[Ticket]]:
    """(kept, dropped): graded groups of a checkpoint that a learner resuming at `version` can still train within
    `eta` (possibly lower than when they were sampled); the oldest go first."""
    kept = sorted((t for t in tickets if version - t.start <= eta), key=lambda t: (t.start, t.number))
    dropped = [t for t in tickets if version - t.start > eta]
    for u in range(version, version + eta + 1):
        while sum(t.deadline(eta) <= u for t in kept) > (u - version + 1) * size:
            oldest = next(t for t in kept if t.deadline(eta) <= u)
            kept.remove(oldest)
            dropped.append(oldest)
    return kept, dropped


def episode_record(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """What the trained log keeps of a group of episodes: how each ended and the versions of its turns."""
    episodes = [r for r in rollouts if isinstance(r, Episode)]
    if not episodes:
        return {}
    return {
        "turns": [e.turns for e in episodes],
        "stopped_by": [e.stopped_by for e in episodes],
        "turn_versions": [turn_versions(e) for e in episodes],
    }


def turn_versions(episode: Episode) -> list[int]:
    """The version that sampled each turn of an episode whose `versions` are per sampled token."""
    mask = episode.sampled_mask or [1] * len(episode.token_ids)
    starts = [sum(mask[:start]) for start in episode.turn_starts]  # each turn's first sampled token's place
    return [episode.versions[i] for i in starts if i < len(episode.versions or ())]


@dataclass
class Learning:
    """An update under way: its groups (prompt-major in ticket order) and the checksum of their tokens."""

    ref: ray.ObjectRef
    batch: list[Ticket]
    checksum: int
    waited_s: float  # the learner's wait for this batch


class AsyncLoop:
    """The async strategy's part of the Driver: streams, the ticket table, admission, batches, weights, faults."""

    def __init__(self, driver: DriverCore, restored: dict[str, Any] | None) -> None:
        c = driver.config
        self.driver, self.config = driver, c
        self.eta, self.size = c.max_staleness, c.n_prompts_per_rollout_batch
        self.tickets: dict[int, Ticket] = {}  # handed out, not yet trained
        self.consumed: set[int] = set()
        self.env_dropped: set[int] = set()  # tickets whose group had an episode its environment failed
        self.env_dropped_unlogged = 0  # of those, dropped since the last update's rows
        self.env_failing = 0  # groups dropped in a row, none intact since
        self.redo: deque[int] = deque()  # tickets to hand out again (a dead generator's, a resumed run's)
        self.next_ticket = 0
        self.assigned: dict[str, set[int]] = {name: set() for name in driver.actors.generators}
        self.validations: dict[str, int] = {name: 0 for name in driver.actors.generators}
        self.streams: dict[str, Any] = {}  # generator name -> its ObjectRefGenerator
        self.gradings: dict[ray.ObjectRef, Ticket] = {}
        self.learning: Learning | None = None
        self.clocks: dict[str, Clock] = {}
        self.counted: dict[str, Clock] = {}  # the clocks at the last logged step
        self.resume_dropped = 0
        self.weights_ref: ray.ObjectRef | None = None
        self.last_eval = float("nan")
        self.started = False
        self.restored = restored

    @property
    def total(self) -> int:
        """Tickets the run hands out: those it trains and those dropped."""
        return self.config.n_grpo_steps * self.size + len(self.env_dropped)

    # --- the Driver's hooks
    def start(self) -> None:
        d = self.driver
        if self.restored is not None:
            self.load_state_dict(self.restored["async"], self.restored["step"])
        if d.step > 0 and self.config.actor_restarts > 0:
            self.weights_ref = d.sync.weights()  # what a replacement generator is offered
        for name, generator in d.actors.generators.items():
            self.streams[name] = generator.stream.options(num_returns="streaming").remote()
        now = time.perf_counter()
        self.loop_start = self.last_commit = self.learner_free = now
        self.learner_busy_s = 0.0
        self.started = True

    def next_step(self) -> list[dict]:
        """Stream, grade, hand out and train until the learner's next update is committed; its rows."""
        if not self.started:
            self.start()
        step_start = self.last_commit
        while True:
            self.admit()
            if self.learning is None:
                self.try_learn()
            if self.event() == "learned":
                return self.finish_update(step_start)

    def validate(self) -> float:
        """Queue a validation of the current weights on the first generator (it runs between two units); returns the
        latest held-out reward known."""
        name = next(iter(self.driver.actors.generators))
        self.submit(name, [Validate(self.driver.step, validation_sampling(self.config))])
        self.validations[name] += 1
        return self.last_eval

    def drain(self) -> None:
        """After the last step: wait for the validations still queued, then stop the streams."""
        while any(self.validations.values()):
            self.event()
        if self.tickets or self.redo or self.next_ticket != self.total:
            raise RuntimeError(f"the async run ended with groups untrained: {sorted(self.tickets)[:8]}")
        for generator in self.driver.actors.generators.values():
            generator.stop_stream.options(concurrency_group="control").remote()

    def settle(self) -> None:
        """Before a failure's checkpoint: commit an update the learner finished, so that the checkpoint's weights and
        its record of trained groups agree (when that fails, the record says which update was under way)."""
        if self.learning is not None:
            try:
                self.finish_update(self.last_commit)
            except (RayActorError, GetTimeoutError, RayTaskError):
                pass

    def state_dict(self) -> dict[str, Any]:
        """The async part of a checkpoint (JSON values)."""
        return {
            "step": self.driver.step,
            "learning": [] if self.learning is None else [t.number for t in self.learning.batch],
            "next_ticket": self.next_ticket,
            "consumed": sorted(self.consumed),
            "ready": [t.record() for t in self.tickets.values() if t.scores is not None],
            "resume_dropped": self.resume_dropped,
            "env_dropped": sorted(self.env_dropped),
        }

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        self.next_ticket, self.consumed = state["next_ticket"], set(state["consumed"])
        self.env_dropped = set(state.get("env_dropped", ()))  # none in a checkpoint from before groups were dropped
        if state["step"] == step - 1:  # the learner finished the update under way and saved it
            self.consumed |= set(state["learning"])
        graded = [Ticket.from_record(r) for r in state["ready"] if r["number"] not in self.consumed]
        kept, dropped = keep_on_resume(graded, step, self.size, self.eta)
        self.resume_dropped = state["resume_dropped"] + len(dropped)
        self.tickets = {t.number: t for t in kept}
        # in flight at the checkpoint, or dropped: sampled again, on the checkpoint's weights
        self.redo = deque(
            n
            for n in range(self.next_ticket)
            if n not in self.consumed and n not in self.tickets and n not in self.env_dropped
        )

    # --- handing out work
    def submit(self, name: str, work: list[Work | Validate]) -> None:
        self.driver.actors.generators[name].submit.options(concurrency_group="control").remote(work)

    def admit(self) -> None:
        """Hand out groups while fewer than (ETA + 1)·B are out and untrained; each generator gets whole runs of one
        rollout batch (which share a seed), the least loaded first."""
        d = self.driver
        room = (self.eta + 1) * self.size - len(self.tickets)
        numbers: list[int] = []
        while room > 0 and (self.redo or self.next_ticket < self.total):
            if self.redo:
                numbers.append(self.redo.popleft())
            else:
                numbers.append(self.next_ticket)
                self.next_ticket += 1
            room -= 1
        runs: dict[int, list[int]] = {}
        for number in numbers:
            runs.setdefault(number // self.size, []).append(number)
        for unit, run in sorted(runs.items()):
            name = min(self.assigned, key=lambda g: (len(self.assigned[g]), list(self.assigned).index(g)))
            questions = [self.question(n) for n in run]
            for n, q in zip(run, questions):
                self.tickets[n] = Ticket(n, q, d.step, name)
            self.assigned[name] |= set(run)
            self.submit(name, [Work(unit, tuple(run), tuple(questions), d.step)])

    def question(self, number: int) -> int:
        return PromptOrder(self.driver.n_questions, self.config.seed, position=number).take(1)[0]

    # --- events
    def event(self) -> str:
        """Wait for one thing to happen (a group streamed, graded, a validation, the update); handle it; its kind."""
        d, c = self.driver, self.config
        waitables: list[Any] = [*self.streams.values(), *self.gradings]
        if self.learning is not None:
            waitables.append(self.learning.ref)
        d.doing = (
            f"{', '.join(self.streams)}/Scorer/Learner: streaming groups for update {d.step + 1}"
            f" ({len(self.tickets)} out, {sum(t.scores is not None for t in self.tickets.values())} graded)"
        )
        ready, _ = ray.wait(waitables, num_returns=1, timeout=c.ray_timeout_s)
        if not ready:
            raise GetTimeoutError(f"nothing arrived within --ray-timeout-s={c.ray_timeout_s:g} s")
        item = ready[0]
        if self.learning is not None and item is self.learning.ref:
            return "learned"
        if item in self.gradings:
            ticket = self.gradings[item]
            try:
                scored = d.get(item, f"Scorer: grade group {ticket.number}")
            except FAILURES as err:
                self.replace_scorer(err)
                return "restarted"
            del self.gradings[item]
            ticket.scores, ticket.grading_s = scored.scores, scored.seconds
            return "graded"
        name = next(name for name, stream in self.streams.items() if stream is item)
        return self.received(name)

    def received(self, name: str) -> str:
        d = self.driver
        d.doing = f"{name}: streaming groups"
        try:
            streamed = d.get(next(self.streams[name]), f"{name}: streaming groups")
        except StopIteration:
            raise RuntimeError(f"{name} stopped streaming while the run needs groups") from None
        except RayActorError as err:
            self.replace_generator(name, err)
            return "restarted"
        self.clocks[name] = streamed.clock
        if isinstance(streamed, Validated):
            self.validations[name] -= 1
            self.last_eval = streamed.summary["eval_reward"]
            d.log.log({"grpo_step": streamed.version} | streamed.summary | {"time_elapsed_s": d.elapsed()})
            d.log.log_rollouts(streamed.version, "eval", streamed.examples)
            return "validated"
        assert isinstance(streamed, Streamed)
        ticket = self.tickets.get(streamed.ticket)
        if ticket is None or ticket.rollouts is not None or ticket.generator != name:
            raise RuntimeError(f"{name} streamed group {streamed.ticket}, which it was not sampling")
        ticket.rollouts, ticket.generator = streamed.rollouts, None
        self.assigned[name].discard(ticket.number)
        if streamed.scores is not None:  # episodes, scored by their environment
            failed = next((e for e in streamed.rollouts if isinstance(e, Episode) and e.failed), None)
            if failed is not None:
                self.drop(ticket, failed)
                return "dropped"
            self.env_failing = 0
            ticket.scores = streamed.scores
            return "graded"
        self.grade(ticket)
        return "streamed"

    def drop(self, ticket: Ticket, failed: Episode) -> None:
        """A group with an episode its environment failed: never trained, counted, and replaced by the next ticket
        (`total` grows by one); B in a row stop the run."""
        del self.tickets[ticket.number]
        self.env_dropped.add(ticket.number)
        self.env_dropped_unlogged += 1
        self.env_failing += 1
        if self.env_failing >= self.size:
            raise EnvironmentUnavailable(
                f"--env {self.config.env}: the last {self.env_failing} groups (a rollout batch's worth) each had an "
                f"episode its environment failed, none trained: {failed.info['env_error']}"
            )

    def grade(self, ticket: Ticket) -> None:
        texts = [(0, r.text) for r in ticket.rollouts]
        self.gradings[self.driver.actors.scorer.grade.remote([ticket.question], texts)] = ticket

    def replace_scorer(self, err: Exception) -> None:
        """A lost scorer: replaced by the Supervisor (within --actor-restarts, else the error stands), and every group
        whose grading was under way graded again by the replacement: never scored as zero, never dropped."""
        d = self.driver
        waiting = sorted(self.gradings.values(), key=lambda t: t.number)
        replaced = d.supervisor.recover(err, ["Scorer"], "Scorer: grading groups", [t.number for t in waiting])
        if replaced != ["Scorer"]:  # another actor died too: not this loop's to mend
            raise err
        self.gradings = {}
        for ticket in waiting:
            self.grade(ticket)

    def replace_generator(self, name: str, err: Exception) -> None:
        """A dead generator: replaced by the Supervisor (within --actor-restarts and while the cluster has room), or
        else dropped while another generator lives (the run goes on with the survivors); its unfinished groups are
        handed out again whole on the current weights. With none left the error stands and the Driver names the dead
        actor and checkpoints."""
        d = self.driver
        lost = sorted(self.assigned[name])
        replaced = d.supervisor.recover(err, [name], f"{name}: streaming groups", lost, can_drop=True)
        for gone in [g for g in self.streams if g not in d.actors.generators]:
            self.forget(gone)
        if replaced != [name]:
            if replaced:  # another actor was replaced too: not this loop's to mend
                raise err
            return
        for number in lost:
            del self.tickets[number]
        self.assigned[name] = set()
        self.redo.extendleft(reversed(lost))
        handle = d.actors.generators[name]
        if self.weights_ref is not None:
            d.sync.offer_ref(self.weights_ref, d.step, [handle])
        self.streams[name] = handle.stream.options(num_returns="streaming").remote()
        self.clocks.pop(name, None)
        self.counted.pop(name, None)
        pending, self.validations[name] = self.validations[name], 0
        for _ in range(pending):
            self.validate()

    def forget(self, name: str) -> None:
        """A generator dropped (lost, and not replaced): its unfinished groups and validations go to the survivors."""
        lost = sorted(self.assigned.pop(name))
        for number in lost:
            del self.tickets[number]
        self.redo.extendleft(reversed(lost))
        for table in (self.streams, self.clocks, self.counted):
            table.pop(name, None)
        for _ in range(self.validations.pop(name)):
            self.validate()

    # --- learning
    def try_learn(self) -> None:
        d = self.driver
        batch = pick_batch(self.tickets.values(), d.step, self.size, self.eta)
        if batch is None:
            return
        batch.sort(key=lambda t: t.number)
        rollouts = [replace(r, prompt_index=i) for i, t in enumerate(batch) for r in t.rollouts]
        scores = [s for t in batch for s in t.scores]
        ref = d.actors.learner.learn.remote([t.question for t in batch], rollouts, scores)
        waited = time.perf_counter() - self.learner_free
        self.learning = Learning(ref, batch, token_checksum(sampled_tokens(r) for r in rollouts), waited)

    def finish_update(self, step_start: float) -> list[dict]:
        d, learning = self.driver, self.learning
        learned: Learned = d.get(learning.ref, f"Learner: learn on update {d.step + 1}")
        if learned.checksum != learning.checksum or learned.version != d.step + 1:
            raise RuntimeError(
                f"the learner trained on tokens with checksum {learned.checksum} to version {learned.version}; "
                f"expected checksum {learning.checksum} and version {d.step + 1}"
            )
        self.learner_busy_s += sum(learned.seconds.values())
        rows = self.rows(learned, learning, step_start)
        for ticket in learning.batch:
            del self.tickets[ticket.number]
            self.consumed.add(ticket.number)
        self.learning = None
        d.commit(rows)
        d.log.log_rollouts(
            d.step,
            "trained",
            [
                {
                    "ticket": t.number,
                    "question": t.question,
                    "samples": len(t.rollouts),
                    "start_version": t.start,
                    "floor": t.floor,
                }
                | episode_record(t.rollouts)
                for t in learning.batch
            ],
        )
        self.weights_ref = d.sync.offer(d.step)  # loaded by each generator between two decode steps
        self.last_commit = self.learner_free = time.perf_counter()
        return rows

    def rows(self, learned: Learned, learning: Learning, step_start: float) -> list[dict]:
        """The update's metrics rows; raises if any group is older than --max-staleness."""
        d, c, v = self.driver, self.config, self.driver.step
        lags = [v - t.start for t in learning.batch]
        if max(lags) > self.eta:
            raise RuntimeError(
                f"update {v + 1} would train a group sampled {max(lags)} versions behind the learner's {v}; "
                f"--max-staleness is {self.eta}"
            )
        rollouts = [r for t in learning.batch for r in t.rollouts]
        versions = [r.versions or [] for r in rollouts]
        token_lags = [v - x for vs in versions for x in vs]
        now = time.perf_counter()

        def since_logged(field: str) -> float:  # summed over the generators since the last logged update
            return sum(
                getattr(clock, field) - (getattr(self.counted[g], field) if g in self.counted else 0)
                for g, clock in self.clocks.items()
            )

        sampling, loads, load_s = since_logged("sampling_s"), since_logged("loads"), since_logged("load_s")
        self.counted = dict(self.clocks)
        dropped, self.env_dropped_unlogged = self.env_dropped_unlogged, 0
        running = now - self.loop_start
        generators_busy = sum(clock.sampling_s for clock in self.clocks.values())
        wall = now - step_start
        shared = rollout_stats(rollouts, [s for t in learning.batch for s in t.scores], c.sampling_max_tokens) | {
            "time_rollout_s": sampling,
            "time_grading_s": sum(t.grading_s for t in learning.batch),
            **{f"time_{k}_s": seconds for k, seconds in learned.seconds.items()},
            "time_weight_sync_s": load_s / loads if loads else float("nan"),
            "time_learner_wait_s": learning.waited_s,
            "time_step_s": wall,
            "samples_per_s": len(rollouts) / wall,
            "version_lag": max(lags),
            "staleness_mean": sum(lags) / len(lags),
            "staleness_max": max(lags),
            "stale_groups": sum(lag > 0 for lag in lags),
            "token_lag_mean": sum(token_lags) / max(len(token_lags), 1),
            "version_span_max": max((max(vs) - min(vs) for vs in versions if vs), default=0),
            "partial_fraction": sum(len(set(vs)) > 1 for vs in versions) / len(versions),
            "groups_out": len(self.tickets),
            "resume_dropped": self.resume_dropped,
            "actor_restarts": d.supervisor.restarts,
            "learner_idle_fraction": 1 - self.learner_busy_s / running,
            "generator_idle_fraction": 1 - generators_busy / (running * len(d.actors.generators)),
            "weights_version": learned.version,
            "tokens_checksum_sent": learning.checksum,
            "tokens_checksum_trained": learned.checksum,
            "time_elapsed_s": d.elapsed(),
            "device_hours": d.elapsed() * d.actors.devices / 3600,
        }
        if c.env is not None:  # the one-process loop's name (alignment/grpo/episode_sampler.py)
            shared["train_env_groups_dropped"] = dropped
        return [{"grpo_step": learned.version} | shared | row for row in learned.rows]
