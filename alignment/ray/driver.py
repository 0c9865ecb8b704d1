"""The driver of GRPO on Ray: one process that schedules the actors' generate -> grade -> learn -> sync work.

Strategies (--strategy):
- colocated-sync: one ColocatedWorker generates, the Scorer grades, the worker takes one update and hands
  the new policy to its engine; strictly on-policy (version lag 0).
- colocated-multistep: the same, with k = --multistep-k GRPO-Clip optimizer steps per rollout batch against
  old log-probs scored once before the first of them (UW CSE599-O A3 v1's Variant B).
- colocated-k-batches: rounds of k = --multistep-k rollout batches, all sampled by the round's policy version v,
  their old log-probs scored by v before any update, then one GRPO-Clip optimizer step on each batch in turn
  (v -> v + k) and one hand-over of the weights to the engine (A3 v2 problem 7's Variant B). One GRPO step is one
  batch and one optimizer step; the i-th batch of a round is trained i - 1 versions after its sampler.
- disaggregated-one-behind: a Generator and a Learner. While the learner trains on batch t (policy version
  t -> t+1), the generator samples batch t+1 with version t; then the weights are synced. Every batch is
  trained on by a learner at most one version ahead of its sampler; this is checked on every batch.
- replay-buffer: the same pipeline, but scored groups go into a bounded ReplayBuffer and the learner trains
  on groups sampled from it; how stale they are is logged.
- async: generators stream groups without stopping, the learner trains whenever enough are graded, no token
  more than --max-staleness versions behind (alignment/ray/async_driver.py, an AsyncDriver of this Driver).

The learner may be several actors sharing the policy with FSDP2 (--learner-processes, disaggregated strategies):
alignment/ray/learner_group.py puts them behind one Learner's interface, so that nothing here changes with it.

Every Ray get has a timeout (--ray-timeout-s). A generator or the scorer that dies, or stays silent past it, is
replaced and its batch launched again whole, up to --actor-restarts times in all (alignment/ray/supervisor.py); past
that, or when the learner dies, the run stops with an ActorFailure naming the actor, after checkpointing the last
completed step when the learner is still alive (--resume continues).
"""

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError, RayTaskError
from tqdm.auto import tqdm

from alignment.config.settings import write_run_settings
from alignment.data.task import Task
from alignment.envs.loading import environment_tasks
from alignment.grpo.sampler import rollout_stats, validation_sampling
from alignment.models.loading import check_model_source, load_tokenizer
from alignment.prompts import chat_renderer
from alignment.ray.actors import Generated, Learned, sampled_tokens, token_checksum
from alignment.ray.async_driver import AsyncLoop
from alignment.ray.cluster import ActorFailure, Actors, connect, dead_actors, describe_nodes, start_actors
from alignment.ray.config import RayGRPOConfig, validate_ray
from alignment.ray.env import ray
from alignment.ray.replay_buffer import Group, ReplayBuffer, staleness
from alignment.ray.run_events import RunEvents
from alignment.ray.scorer import Scored
from alignment.ray.supervisor import FAILURES, Supervisor
from alignment.ray.weight_sync import WeightSync
from alignment.rollout.interface import Rollout
from alignment.run.checkpoint import complete_step, export_policy
from alignment.run.metrics_log import MetricsLog
from alignment.run.setup import PromptOrder
from alignment.run.training_settings import check_output_dir
from alignment.tasks.building import needs_chat_template, run_tasks
from alignment.utils.atomic import check_writable_dir
from alignment.utils.console import library_log_level
from alignment.utils.faults import fault_point


@dataclass
class Batch:
    """A rollout batch in flight: its questions and references to its rollouts and their grades."""

    questions: list[int]
    generated: ray.ObjectRef  # -> Generated
    scored: ray.ObjectRef  # -> Scored


@dataclass
class Training:
    """What one learner update is handed: groups of rollouts, prompt-major, with their scores."""

    questions: list[int]
    rollouts: list[Rollout]
    scores: list[dict[str, float]]

    @classmethod
    def from_groups(cls, groups: list[Group]) -> "Training":
        # a sampled group's rollouts answer prompt i of this update, whatever batch they came from
        rollouts = [replace(r, prompt_index=i) for i, g in enumerate(groups) for r in g.rollouts]
        return cls([g.question for g in groups], rollouts, [s for g in groups for s in g.scores])


def tasks(config: RayGRPOConfig, task: Task | None, validation: Task | None) -> tuple[Task, Task]:
    if task is not None and validation is not None:
        return task, validation
    if config.env is not None:
        return environment_tasks(config.env, config)
    if not needs_chat_template(config):
        return run_tasks(config)
    run_tasks(config)  # the data and rewards checked before the tokenizer loads
    return run_tasks(config, chat_renderer(load_tokenizer(config.model)), check=False)  # the tokenizer alone: no model


class Driver:
    """Runs the strategy's loop over the actors; logs, validates and checkpoints like the single-process loop."""

    def __init__(
        self, config: RayGRPOConfig, actors: Actors, n_questions: int, resume: bool, restarts: int = 0
    ) -> None:
        self.config, self.actors, self.n_questions = config, actors, n_questions
        self.learner_name, self.generator_name = (
            ("ColocatedWorker",) * 2 if config.colocated else ("Learner", "Generator")
        )
        self.doing = "starting"
        self.step, elapsed = 0, 0.0
        self.buffer = (
            ReplayBuffer(config.buffer_capacity, config.buffer_policy, config.seed)
            if config.strategy == "replay-buffer"
            else None
        )
        self.sync = (
            None
            if config.colocated
            else WeightSync(
                config.weight_sync,
                actors.learner,
                list(actors.generators.values()),
                actors.placements,
                config.ray_timeout_s,
            )
        )
        self.prefetched: Batch | None = None
        self.round: list[tuple[Generated, Scored, Training, Any]] = []  # colocated-k-batches: the round's batches left
        self.unlogged: list[dict] = []  # rows of an update that finished but whose step is not yet logged
        self.restored: dict | None = None  # the driver's state in the checkpoint resumed from
        self.logged: list[dict] = []  # this driver's metrics rows so far
        if resume:
            try:
                state = self.get(
                    actors.learner.restore.remote(config.output_dir), f"{self.learner_name}: load the checkpoint"
                )
            except RayTaskError as err:  # a missing or foreign checkpoint: the learner's own ValueError
                raise err.cause from None
            self.restored, self.step, elapsed = state, state["step"], state["elapsed_s"]
            if self.buffer is not None:
                self.buffer.load_state_dict(state["buffer"])
            if self.sync is not None:
                self.get_sync(self.step)
        self.started = time.perf_counter() - elapsed
        self.log = MetricsLog(config.output_dir, config.to_json(), config.wandb_project, config.wandb_mode, self.step)
        self.events = RunEvents(config.output_dir, fresh=not resume)
        for actor, node in describe_nodes(actors.nodes).items():
            self.events.log("placed", actor=actor, step=self.step, **node)
        self.supervisor = Supervisor(config, actors, self.sync, self.events, restarts)
        self.streaming = AsyncLoop(self, self.restored) if config.strategy == "async" else None

    def get(self, refs, doing: str):
        self.doing = doing
        return ray.get(refs, timeout=self.config.ray_timeout_s)

    def get_sync(self, version: int) -> float:
        assert self.sync is not None
        self.doing = f"Learner -> Generator: sync weights to version {version} ({self.config.weight_sync})"
        return self.sync.sync(version)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def launch(self, step: int) -> Batch:
        """Ask the generator for step `step`'s rollouts and the scorer to grade them as soon as they exist."""
        n = self.config.n_prompts_per_rollout_batch
        questions = PromptOrder(self.n_questions, self.config.seed, position=step * n).take(n)
        generated, texts = self.actors.generator.generate.options(num_returns=2).remote(questions, step)
        return Batch(questions, generated, self.actors.scorer.grade.remote(questions, texts))

    def run(self, on_step: Callable[[int, Actors], None] | None = None) -> list[dict]:
        c, rows = self.config, self.logged
        try:
            eval_reward = self.validate() if self.step == 0 else float("nan")
            with tqdm(total=c.n_grpo_steps, initial=self.step, desc="GRPO", unit="step") as bar:
                while self.step < c.n_grpo_steps:
                    step_rows = self.next_step()
                    rows += step_rows
                    if self.step % c.eval_every == 0 or self.step == c.n_grpo_steps:
                        eval_reward = self.validate()
                    if self.step % c.checkpoint_every == 0 or self.step == c.n_grpo_steps:
                        self.checkpoint()
                    last = step_rows[-1]
                    bar.set_postfix(
                        reward=f"{last['train_reward']:.2f}",
                        eval=f"{eval_reward:.2f}",
                        step=f"{last['time_step_s']:.1f}s",
                        lag=last["version_lag"],
                    )
                    bar.update(1)
                    fault_point("ray_step")
                    if on_step is not None:
                        on_step(self.step, self.actors)
            self.drain()
            export_policy(c.output_dir)
        except (RayActorError, GetTimeoutError, ObjectLostError) as err:
            raise self.failure(err) from err
        except RayTaskError as err:
            if not dead_actors(self.actors):  # the task's own error; the log records it if it is a divergence
                self.log.close(err)
                raise
            raise self.failure(err) from err  # a learner rank whose collective lost a rank that died
        finally:
            self.log.close()
        return rows

    def next_step(self) -> list[dict]:
        """Run the strategy until the learner's next update is logged; its rows."""
        if self.streaming is not None:
            return self.streaming.next_step()
        if self.config.strategy == "colocated-k-batches":
            return self.k_batches_step()
        return self.colocated_step() if self.config.colocated else self.pipelined_step()

    def drain(self) -> None:
        """Finish work still under way after the last step (only async leaves any: every other call is waited for)."""
        if self.streaming is not None:
            self.streaming.drain()

    def colocated_step(self) -> list[dict]:
        start, worker = time.perf_counter(), self.actors.learner
        batch, generated, scored = self.collect(self.launch(self.step), self.step)
        training = Training(batch.questions, generated.rollouts, scored.scores)
        learned = self.learn(
            self.get(self.learn_call(training), f"ColocatedWorker: learn on batch {self.step}"), training
        )
        sync_s = self.get(worker.sync_engine.remote(), "ColocatedWorker: hand the policy to its engine")
        return self.commit(self.rows(generated, scored, training, learned, sync_s, start, {}), training)

    def k_batches_step(self) -> list[dict]:
        """One batch of a colocated-k-batches round: at the round's start its k batches are sampled and graded, and
        their old log-probs scored, all by the current version; each call then trains on the next batch."""
        start, worker = time.perf_counter(), self.actors.learner
        scoring_s = 0.0
        if not self.round:
            steps = range(self.step, min(self.step + self.config.multistep_k, self.config.n_grpo_steps))
            batches = [self.launch(step) for step in steps]  # the worker runs them in order, before any update
            got = [
                self.get([b.generated, b.scored], f"ColocatedWorker/Scorer: batch {s}") for b, s in zip(batches, steps)
            ]
            trainings = [Training(b.questions, g.rollouts, sc.scores) for b, (g, sc) in zip(batches, got)]
            old, version, scoring_s = self.get(
                worker.old_log_probs_of.remote([(t.questions, t.rollouts, t.scores) for t in trainings]),
                f"ColocatedWorker: old log-probs of batches {steps[0]}..{steps[-1]}",
            )
            self.round = [(g, sc, t, (lp, version)) for (g, sc), t, lp in zip(got, trainings, old)]
        generated, scored, training, (old_log_probs, scored_by) = self.round.pop(0)
        learning = worker.learn.remote(training.questions, training.rollouts, training.scores, old_log_probs)
        learned = self.learn(self.get(learning, f"ColocatedWorker: learn on batch {self.step}"), training)
        learned.seconds["old_logprob"] = learned.seconds.get("old_logprob", 0.0) + scoring_s  # the round's scoring
        sync_s = 0.0
        if not self.round:  # the round's last batch: the engine gets version v + k
            sync_s = self.get(worker.sync_engine.remote(), "ColocatedWorker: hand the policy to its engine")
        extra = {"old_logprob_version": scored_by}
        return self.commit(self.rows(generated, scored, training, learned, sync_s, start, extra), training)

    def pipelined_step(self) -> list[dict]:
        start = time.perf_counter()
        batch, generated, scored = self.collect(self.prefetched or self.launch(self.step), self.step)
        extra: dict[str, float] = {}
        if self.buffer is None:
            training = Training(batch.questions, generated.rollouts, scored.scores)
        else:
            g = self.config.group_size
            self.buffer.add(
                [
                    Group(
                        q,
                        generated.rollouts[i * g : (i + 1) * g],
                        scored.scores[i * g : (i + 1) * g],
                        generated.version,
                    )
                    for i, q in enumerate(batch.questions)
                ]
            )
            picked = self.buffer.sample(self.config.n_prompts_per_rollout_batch)
            training = Training.from_groups(picked)
            extra = staleness(picked, self.step) | {
                "buffer_size": len(self.buffer),
                "buffer_evicted": self.buffer.evicted,
            }
        learning = self.learn_call(training)
        # batch t+1 is sampled by the current weights while the learner trains on batch t
        self.prefetched = self.launch(self.step + 1) if self.step + 1 < self.config.n_grpo_steps else None
        learned = self.learn(self.get(learning, f"Learner: learn on batch {self.step}"), training)
        self.unlogged = self.rows(generated, scored, training, learned, float("nan"), start, extra)
        if self.prefetched is not None:  # the weights may change only once that batch is sampled
            self.prefetched = self.sampled(self.prefetched, self.step + 1)
        sync_s = self.supervised(lambda: self.get_sync(learned.version), [self.generator_name])
        return self.commit(self.rows(generated, scored, training, learned, sync_s, start, extra), training)

    def collect(self, batch: Batch, step: int) -> tuple[Batch, Generated, Scored]:
        """Batch `step`'s rollouts and grades. A batch lost with its generator or the scorer (dead, or silent past
        --ray-timeout-s) is launched again whole, on their replacements (alignment/ray/supervisor.py)."""
        while True:
            try:
                generated, scored = self.get(
                    [batch.generated, batch.scored], f"{self.generator_name}/Scorer: batch {step}"
                )
                return batch, generated, scored
            except FAILURES as err:
                self.supervisor.recover(err, [self.generator_name, "Scorer"], self.doing, batch.questions)
                batch = self.launch(step)

    def sampled(self, batch: Batch, step: int) -> Batch:
        """`batch` once its rollouts exist (launched again whole if its generator was lost)."""
        while True:
            try:
                self.get(batch.generated, f"{self.generator_name}: batch {step}")
                return batch
            except FAILURES as err:
                self.supervisor.recover(err, [self.generator_name], self.doing, batch.questions)
                batch = self.launch(step)

    def supervised(self, call: Callable[[], Any], waited_on: list[str]) -> Any:
        """`call()`, made again after the supervisor replaced the actors it waited on."""
        while True:
            try:
                return call()
            except FAILURES as err:
                self.supervisor.recover(err, waited_on, self.doing)

    def learn_call(self, training: Training) -> ray.ObjectRef:
        return self.actors.learner.learn.remote(training.questions, training.rollouts, training.scores)

    def learn(self, learned: Learned, training: Training) -> Learned:
        """Check the update against what was sent: the next version, on exactly these tokens."""
        sent = token_checksum(sampled_tokens(r) for r in training.rollouts)
        if learned.checksum != sent or learned.version != self.step + 1:
            raise RuntimeError(
                f"the learner trained on tokens with checksum {learned.checksum} to version "
                f"{learned.version}; expected checksum {sent} and version {self.step + 1}"
            )
        return learned

    def rows(
        self,
        generated: Generated,
        scored: Scored,
        training: Training,
        learned: Learned,
        sync_s: float,
        start: float,
        extra: dict[str, float],
    ) -> list[dict]:
        c, wall = self.config, time.perf_counter() - start
        lag = self.step - generated.version
        bound = c.max_version_lag
        if lag > bound:  # the one-behind guarantee (and on-policy for colocated): never silently exceeded
            raise RuntimeError(
                f"batch {self.step} was sampled by policy version {generated.version}, {lag} behind the "
                f"learner's {self.step}; --strategy {c.strategy} allows at most {bound}"
            )
        shared = (
            rollout_stats(training.rollouts, training.scores, c.sampling_max_tokens)
            | extra
            | {
                "time_rollout_s": generated.seconds,
                "time_grading_s": scored.seconds,
                **{f"time_{k}_s": v for k, v in learned.seconds.items()},
                "time_weight_sync_s": sync_s,
                "time_step_s": wall,
                "samples_per_s": len(training.rollouts) / wall,
                "version_lag": lag,
                "weights_version": learned.version,
                "tokens_checksum_sent": token_checksum(sampled_tokens(r) for r in training.rollouts),
                "tokens_checksum_trained": learned.checksum,
                "time_elapsed_s": self.elapsed(),
                "device_hours": self.elapsed() * self.actors.devices / 3600,
            }
        )
        return [{"grpo_step": learned.version} | shared | row for row in learned.rows]

    def commit(self, rows: list[dict], training: Training | None = None) -> list[dict]:
        """Log a completed update's rows (and, in rollouts.jsonl, the groups it trained on with their sizes); the
        run is now at their step."""
        for row in rows:
            self.log.log(row)
        self.step = rows[0]["grpo_step"]
        self.unlogged = []
        if training is not None:
            sizes = Counter(r.prompt_index for r in training.rollouts)
            groups = [{"question": q, "samples": sizes[i]} for i, q in enumerate(training.questions)]
            self.log.log_rollouts(self.step, "trained", groups)
        return rows

    def validate(self) -> float:
        if self.streaming is not None and self.streaming.started:  # queued between two of a generator's units
            return self.streaming.validate()
        if self.round:  # mid-round: the engine still samples with the round's version (vLLM holds its own copy)
            self.get(self.actors.learner.sync_engine.remote(), "ColocatedWorker: hand the policy to its engine")
        summary, examples = self.supervised(
            lambda: self.get(
                self.actors.generator.validate.remote(validation_sampling(self.config)),
                f"{self.generator_name}: validation at step {self.step}",
            ),
            [self.generator_name],
        )
        self.log.log({"grpo_step": self.step} | summary | {"time_elapsed_s": self.elapsed()})
        self.log.log_rollouts(self.step, "eval", examples)
        return summary["eval_reward"]

    def driver_state(self) -> dict:
        """What a checkpoint keeps of the driver (JSON values)."""
        state = {"elapsed_s": self.elapsed(), "buffer": None if self.buffer is None else self.buffer.state_dict()}
        return state if self.streaming is None else state | {"async": self.streaming.state_dict()}

    def checkpoint(self) -> int:
        state = self.driver_state()
        return self.get(
            self.actors.learner.save.remote(self.config.output_dir, state),
            f"{self.learner_name}: checkpoint step {self.step}",
        )

    def failure(self, err: Exception) -> ActorFailure:
        """Name what failed, save the last completed step if the learner can, and say how to continue."""
        doing, dead = self.doing, dead_actors(self.actors)
        if isinstance(err, GetTimeoutError) and not dead:  # a learner silent past --ray-timeout-s is hung: lost
            dead = self.supervisor.lost(err, self.actors.learner_names)
        if self.streaming is not None and not set(self.actors.learner_names) & set(dead):
            self.streaming.settle()
        what = (
            f"actor {', '.join(dead)} died"
            if dead
            else f"no answer within --ray-timeout-s={self.config.ray_timeout_s:g} s"
        )
        folder, saved = self.config.output_dir, None
        if not set(self.actors.learner_names) & set(dead):
            try:
                if self.unlogged:  # the update finished; only its weight sync did not
                    self.commit(self.unlogged)
                saved = self.checkpoint()
            except (RayActorError, GetTimeoutError):
                pass
        step = saved if saved is not None else complete_step(folder)
        if saved is not None:
            where = f"checkpoint of step {saved} saved in {folder}"
        else:
            where = (
                f"the last checkpoint is step {step} in {folder}" if step is not None else "no checkpoint was written"
            )
        hint = f"; continue with --resume {folder}" if step is not None else ""
        return ActorFailure(
            f"GRPO on Ray stopped: {what} while {doing} ({type(err).__name__}); {where}{hint}",
            dead,
            self.supervisor.restarts,
        )


def train_grpo_ray(
    config: RayGRPOConfig,
    task: Task | None = None,
    validation: Task | None = None,
    resume: bool = False,
    on_step: Callable[[int, Actors], None] | None = None,
) -> list[dict]:
    """Run (or resume) GRPO with --strategy on Ray; returns this invocation's metrics rows.

    Uses the Ray cluster this process is connected to, or starts a local one (and stops it afterwards).
    `on_step(step, actors)` runs after each completed step.
    """
    validate_ray(config)
    check_output_dir(config, resume)
    if resume and complete_step(config.output_dir) is None:  # before minutes of actor start-up
        raise ValueError(f"--resume: no complete checkpoint in {config.output_dir}")
    check_writable_dir(config.output_dir)  # before any actor starts, resumed runs too
    if not resume:
        write_run_settings(config)
    task, validation = tasks(config, task, validation)
    check_model_source(config.model)  # a model the hub cannot give: one line now, not from a failed actor
    own_cluster = not ray.is_initialized()
    if own_cluster:
        connect(config.ray_address, library_log_level())
    try:
        rows: list[dict] = []
        restarts = 0
        while True:
            actors = start_actors(config, task, validation)
            driver = None
            try:
                driver = Driver(config, actors, len(task.questions), resume, restarts)
                write_run_settings(config)  # a resumed run: the resumable settings it changed
                return rows + driver.run(on_step)
            except ActorFailure as failure:
                step = restartable(config, failure)
                if step is None:
                    raise
                # the learner is gone: every actor starts again from its last checkpoint, as --resume would
                rows += [row for row in driver.logged if row["grpo_step"] <= step] if driver is not None else []
                restarts, resume = failure.restarts + 1, True
                RunEvents(config.output_dir).log(
                    "restarted", lost=failure.lost, from_step=step, restarts=restarts, error=str(failure)
                )
            finally:
                actors.stop()
                if driver is not None and driver.sync is not None:
                    driver.sync.close()
    finally:
        if own_cluster:
            ray.shutdown()


def restartable(config: RayGRPOConfig, failure: ActorFailure) -> int | None:
    """The checkpoint step to start every actor again from, when the learner (or the colocated worker) was lost, the
    run may still replace an actor (--actor-restarts) and a checkpoint exists; else None."""
    learner_lost = any(name.startswith(("Learner", "ColocatedWorker")) for name in failure.lost)
    if not learner_lost or failure.restarts >= config.actor_restarts:
        return None
    return complete_step(config.output_dir)
