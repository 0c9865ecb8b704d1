"""The actors of GRPO on Ray: plain classes that `spawn` makes remote, each wrapping library code.

- Generator: a rollout engine and the version of the weights it samples with; under --strategy async it streams
  groups as they finish (`stream`) while other threads hand it weights and work (`offer_weights`, `submit`,
  `stop_stream`: the "control" concurrency group), the engine loading the weights between decode steps.
- Scorer (alignment.ray.scorer, a light process): grades the generated texts.
- Learner: a GRPOLearner (alignment/grpo/learner.py: batches, rewards, old/reference log-probs, optimizer
  steps) and checkpoints; or several sharing the policy with FSDP2 (alignment/ray/learner_group.py).
- ColocatedWorker: a Generator and a Learner on one device. As UW CSE599-O A3 v2 §3.1.1 asks ("a second copy of
  the model just for generation"), the generator samples from its own copy of the weights (hf, transformer_lm: the
  model loaded again, as a Generator actor loads it; vLLM: the engine's), and each sync copies the learner's
  weights into it, timed.
"""

import hashlib
import random
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from alignment.data.task import Task
from alignment.distributed.sharding import full_tensors
from alignment.envs.base import EnvironmentUnavailable
from alignment.evaluation import evaluate_task
from alignment.grading.parallel import ParallelGrader
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import rollout_sampling
from alignment.models.loading import load_tokenizer
from alignment.models.lora import sync_state_dict
from alignment.models.policy_folder import cast_floating, push_weights
from alignment.prompts import format_prompt
from alignment.ray.config import RayGRPOConfig
from alignment.ray.env import ray
from alignment.ray.episode_stream import EpisodeUnit, FinishedEpisodes, TurnEngine, stream_episodes
from alignment.ray.scorer import Scored
from alignment.ray.weight_sync import Placement
from alignment.rollout.backends import make_rollout_engine, resolve_backend
from alignment.rollout.interface import Rollout, RolloutEngine, SamplingConfig
from alignment.rollout.streaming import Barrier, FinishedGroup, StreamFeed, Unit
from alignment.run.checkpoint import load_checkpoint, save_checkpoint
from alignment.run.cpu_allocator import RETAIN_FREED_MEMORY_ENV
from alignment.run.memory_plan import OWN_GPU_SHARE
from alignment.run.setup import PhaseTimer, build_engine, load_policy, model_dtype
from alignment.utils.console import quiet_libraries
from alignment.utils.faults import fault_point


@dataclass
class Generated:
    rollouts: list[Rollout]  # group_size per question, prompt-major
    version: int  # policy version of the weights that sampled them
    seconds: float


@dataclass
class Learned:
    rows: list[dict[str, float]]  # one per optimizer step
    checksum: int  # token_checksum of the response tokens the optimizer steps saw
    version: int  # the learner's policy version after this update
    seconds: dict[str, float]  # old_logprob and train phases


@dataclass(frozen=True)
class Work:
    """Groups for a streaming generator: tickets (positions in the prompt order) of rollout batch `unit`, whose
    sampling seed they share, asking `questions`; not started on weights older than version `floor`."""

    unit: int
    tickets: tuple[int, ...]
    questions: tuple[int, ...]
    floor: int

    def places(self, batch_size: int) -> tuple[int, ...]:
        """The tickets' places in their rollout batch of `batch_size` groups, which seed them: parts of one batch
        never share random numbers."""
        return tuple(t - self.unit * batch_size for t in self.tickets)


@dataclass(frozen=True)
class Validate(Barrier):
    """A validation run by a streaming generator between two units, on weights of at least version `floor`."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class Clock:
    """A streaming generator's time so far: sampling is what is left of `elapsed_s` after waiting and validating."""

    elapsed_s: float
    idle_s: float  # waiting for work or for the weights a unit needs
    validation_s: float
    load_s: float  # loading weights (inside sampling time when in flight)
    loads: int

    @property
    def sampling_s(self) -> float:
        return self.elapsed_s - self.idle_s - self.validation_s


@dataclass
class Streamed:
    """One finished group: ticket `ticket`'s group_size rollouts, with per-token versions and behaviour log-probs;
    with --env, episodes and the scores their environment gave them."""

    ticket: int
    rollouts: list[Rollout]
    clock: Clock
    scores: list[dict[str, float]] | None = None


@dataclass
class Validated:
    version: int  # of the weights validated
    summary: dict[str, float]
    examples: list[dict[str, Any]]
    clock: Clock


def token_checksum(token_lists: Iterable[Sequence[int]]) -> int:
    """CRC32 of the token ids in order, for checking that what was sent is what was trained on."""
    crc = 0
    for tokens in token_lists:
        crc = zlib.crc32(np.asarray(tokens, dtype=np.int64).tobytes(), crc)
    return crc


def sampled_tokens(rollout: Rollout) -> list[int]:
    """The tokens of a rollout the sampler drew (an episode's observations left out): those the learner trains on."""
    if rollout.sampled_mask is None:
        return rollout.token_ids
    return [t for t, sampled in zip(rollout.token_ids, rollout.sampled_mask) if sampled]


def weights_digest(model: torch.nn.Module) -> str:
    """SHA-256 of every parameter and buffer, bit for bit, in state-dict order (a sharded model's gathered whole: a
    collective, every rank calls it)."""
    digest = hashlib.sha256()
    for name, tensor in full_tensors(model.state_dict()).items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class _Actor:
    name = "actor"

    def ping(self) -> str:
        return self.name

    def node(self) -> str:
        """The id of the Ray node this actor runs on."""
        return ray.get_runtime_context().get_node_id()

    def placement(self) -> Placement:
        gpus = ray.get_gpu_ids()
        if gpus and torch.cuda.is_available():
            return Placement(self.name, "cuda", f"{ray.get_runtime_context().get_node_id()}/{gpus[0]}")
        return Placement(self.name, "cpu")


class Generator(_Actor):
    name = "Generator"

    def __init__(
        self, config: RayGRPOConfig, task: Task, validation: Task, device: str, threads: int, name: str = "Generator"
    ) -> None:
        quiet_libraries()  # this actor's process: as the driver's --verbose says (through the environment)
        torch.set_num_threads(threads)
        self.name, self.threads = name, threads
        dtype = model_dtype(config, device)
        if resolve_backend(config.backend) == "vllm":  # type: ignore[arg-type]
            share = config.gpu_memory_utilization or OWN_GPU_SHARE  # a generator actor has its GPU to itself
            engine = make_rollout_engine(config.model, "vllm", device, dtype, share, config.seed, lora=config)
            self._attach(config, task, validation, None, engine)  # vLLM keeps its own copy of the weights
        else:  # hf or transformer_lm: an in-process engine over this actor's own copy of the policy
            model, tokenizer = load_policy(config, device, dtype)
            self._attach(config, task, validation, model.eval(), build_engine(config, model, tokenizer, device, device))

    def _attach(
        self, config: RayGRPOConfig, task: Task, validation: Task, model: torch.nn.Module | None, engine: RolloutEngine
    ) -> None:
        if hasattr(engine, "progress"):
            engine.progress = False  # the driver shows progress; bars from actors would interleave with it
        self.config, self.task, self.validation, self.model, self.engine = config, task, validation, model, engine
        self.feed = StreamFeed()  # its version is that of the weights the engine holds
        self.eval_grader = ParallelGrader(validation.reward_fn, 1)
        # --env: this generator plays the environment's episodes, which come scored by it
        self.episodes = self.turns = None
        if config.env is not None:
            tokenizer = load_tokenizer(config.model)
            self.episodes = EpisodeSampler(config, engine, task, tokenizer)
            # --strategy async: the same episodes played through an engine that loads weights between turns
            load = lambda state_dict, version: engine.load_policy_weights(state_dict)  # noqa: E731
            self.turns = TurnEngine(engine, self.feed, load, config.partial_rollouts)
            self.streamed_episodes = EpisodeSampler(config, self.turns, task, tokenizer)

    @property
    def weights_version(self) -> int:
        return self.feed.version

    def generate(self, questions: Sequence[int], step: int) -> tuple[Generated, list[tuple[int, str]] | Scored]:
        """The rollouts, and (prompt index, text) pairs for the scorer (call with num_returns=2); with --env the
        episodes and their scores, which the scorer passes on."""
        start = time.perf_counter()
        if self.model is not None:
            self.model.eval()  # a colocated learner leaves it in train mode
        if self.episodes is not None:
            episodes, scores = self.episodes.scored_episodes(questions, step)
            failed = next((e for e in episodes if e.failed), None)
            if failed is not None:  # the Ray strategies drop no group yet: stop rather than train on a partial one
                raise EnvironmentUnavailable(f"an environment failed an episode: {failed.info['env_error']}")
            seconds = time.perf_counter() - start
            return Generated(list(episodes), self.weights_version, seconds), Scored(scores, 0.0)
        prompts = [format_prompt(self.task.template, self.task.questions[q]) for q in questions]
        rollouts = self.engine.generate(prompts, self.config.group_size, rollout_sampling(self.config, step))
        generated = Generated(rollouts, self.weights_version, time.perf_counter() - start)
        return generated, [(r.prompt_index, r.text) for r in rollouts]

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> float:
        start = time.perf_counter()
        self.engine.load_policy_weights(state_dict)
        self.feed.version = version
        return time.perf_counter() - start

    # --- streaming (--strategy async); the control methods run on the actor's "control" thread
    def offer_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Weights for the engine to load between two decode steps (or between units without partial rollouts)."""
        self.feed.offer(state_dict, version)

    def submit(self, work: Sequence[Work | Validate]) -> None:
        size = self.config.n_prompts_per_rollout_batch
        if self.episodes is not None:
            self.feed.submit(
                [
                    item
                    if isinstance(item, Validate)
                    else EpisodeUnit(item.tickets, item.questions, item.unit, item.places(size), item.floor)
                    for item in work
                ]  # type: ignore[misc]
            )
            return
        self.feed.submit(
            [
                item
                if isinstance(item, Validate)
                else Unit(
                    item.tickets,
                    tuple(format_prompt(self.task.template, self.task.questions[q]) for q in item.questions),
                    self.config.group_size,
                    rollout_sampling(self.config, item.unit),  # the seed of rollout batch `unit`, as generate uses
                    item.floor,
                    item.places(size),
                )
                for item in work
            ]
        )

    def stop_stream(self) -> None:
        self.feed.stop()

    def stream(self) -> Iterator[Streamed | Validated]:
        """Sample submitted work until stopped, yielding each group as it finishes (call with
        num_returns="streaming")."""
        torch.set_num_threads(self.threads)  # OpenMP's team is per thread: this task's thread gets the actor's share
        if self.model is not None:
            self.model.eval()
        started, validation_s = time.perf_counter(), 0.0

        def clock() -> Clock:
            feed = self.feed
            return Clock(time.perf_counter() - started, feed.idle_s, validation_s, feed.load_s, feed.loads)

        c = self.config
        if self.turns is not None:
            items = stream_episodes(self.feed, self.turns, self.streamed_episodes.scored_groups)
        else:
            items = self.engine.stream(self.feed, c.partial_rollouts, c.inflight_kv)  # type: ignore[attr-defined]
        for item in items:
            if isinstance(item, FinishedEpisodes):
                fault_point("async_stream")
                yield Streamed(item.key, list(item.episodes), clock(), item.scores)
            elif isinstance(item, FinishedGroup):
                fault_point("async_stream")
                yield Streamed(item.key, item.rollouts, clock())
            elif isinstance(item, Validate):
                start = time.perf_counter()
                summary, examples = self.validate(item.sampling)
                validation_s += time.perf_counter() - start
                yield Validated(self.feed.version, summary, examples, clock())

    def validate(self, sampling: SamplingConfig) -> tuple[dict[str, float], list[dict[str, Any]]]:
        if self.model is not None:
            self.model.eval()
        if self.episodes is not None:
            return self.episodes.evaluate(self.validation, sampling)
        return evaluate_task(self.engine, self.validation, self.eval_grader, sampling)

    def digest(self) -> str:
        if self.model is None:
            raise ValueError("weights digests need the hf backend (vLLM keeps its weights to itself)")
        return weights_digest(self.model)


class Learner(_Actor):
    name = "Learner"

    def __init__(self, config: RayGRPOConfig, task: Task, device: str, threads: int) -> None:
        torch.set_num_threads(threads)
        self.config, self.task, self.device = config, task, device
        self.build()

    def build(self, group: dist.ProcessGroup | None = None) -> None:
        """Load the policy, sharded over `group` when given (a rank of alignment/ray/learner_group.py), and its
        learner."""
        config, device = self.config, self.device
        quiet_libraries()  # this actor's process: as the driver's --verbose says (through the environment)
        random.seed(config.seed)
        torch.manual_seed(config.seed)
        policy, tokenizer = load_policy(
            config, device, model_dtype(config, device), shard=group is not None, group=group
        )
        self.learner = GRPOLearner(
            config.learner_config(), policy, tokenizer, self.task, objective=config.learner_objective()
        )

    def learn(
        self,
        questions: Sequence[int],
        rollouts: Sequence[Rollout],
        scores: Sequence[dict[str, float]],
        old_log_probs: torch.Tensor | None = None,
    ) -> Learned:
        """One GRPO update on these groups (prompt-major, group_size rollouts per question); `old_log_probs`, when
        given, are the batch's from `old_log_probs_of` (scored by an earlier version) and are trained against."""
        timer = PhaseTimer()
        batch = self.learner.make_batch(questions, rollouts, scores)
        batch.old_log_probs = old_log_probs
        checksum = token_checksum(batch.labels[i][batch.response_mask[i]].tolist() for i in range(len(batch)))
        rows = self.learner.update(batch, timer)
        return Learned(rows, checksum, self.learner.step, timer.seconds)

    def old_log_probs_of(
        self, batches: Sequence[tuple[Sequence[int], Sequence[Rollout], Sequence[dict[str, float]]]]
    ) -> tuple[list[torch.Tensor], int, float]:
        """Each batch's (questions, rollouts, scores) log-probs under the policy as it is now, its version, and the
        seconds it took: colocated-k-batches scores a round's batches before the round's first update."""
        start = time.perf_counter()
        scored = [self.learner.old_log_probs(self.learner.make_batch(*batch)) for batch in batches]
        return scored, self.learner.step, time.perf_counter() - start

    def weights(self, on_cpu: bool) -> dict[str, torch.Tensor]:
        """The weights a generator loads (under LoRA the adapters only: generators hold the same frozen base). A sharded
        learner's ranks all gather them whole (a collective); rank 0 returns them, the others nothing."""
        whole = full_tensors(sync_state_dict(self.learner.policy))
        if self.learner.shards is not None and not self.learner.shards.main:
            return {}
        # in the generators' dtype: a sharded learner's mixed precision keeps float32 shards
        whole = cast_floating(whole, model_dtype(self.config, self.device))
        return {k: v.detach().cpu() if on_cpu else v.detach() for k, v in whole.items()}

    def digest(self) -> str:
        return weights_digest(self.learner.policy)

    def version(self) -> int:
        """The policy version: the updates taken so far."""
        return self.learner.step

    def save(self, folder: Path, driver_state: dict[str, Any]) -> int:
        """Checkpoint the policy, optimizer and RNGs with the driver's state; returns the step saved."""
        learner = self.learner
        save_checkpoint(
            folder,
            self.config,
            learner.policy,
            learner.tokenizer,
            learner.optimizer,
            driver_state | {"step": learner.step},
        )
        return learner.step

    def restore(self, folder: Path) -> dict[str, Any]:
        """Load a checkpoint; returns the driver's part of it (step, elapsed time, replay buffer)."""
        state = load_checkpoint(folder, self.config, self.learner.policy, self.learner.optimizer)
        self.learner.step = state["step"]
        return state


class ColocatedWorker(Generator, Learner):
    name = "ColocatedWorker"

    def __init__(self, config: RayGRPOConfig, task: Task, validation: Task, device: str, threads: int) -> None:
        Learner.__init__(self, config, task, device, threads)
        policy, tokenizer = self.learner.policy, self.learner.tokenizer
        if resolve_backend(config.backend) == "vllm":  # type: ignore[arg-type]
            # vLLM loads its own copy of the weights (on a GPU it sleeps while the policy trains)
            self._attach(config, task, validation, None, build_engine(config, policy, tokenizer, device, device))
        else:  # the generation copy, loaded as a Generator actor loads its own: never the tensors the optimizer steps
            generator = load_policy(config, device, model_dtype(config, device))[0].eval().requires_grad_(False)
            engine = build_engine(config, generator, tokenizer, device, device)
            self._attach(config, task, validation, generator, engine)
            self.sync_engine()  # version 0 (under LoRA the learner's freshly drawn adapters)

    def sync_engine(self) -> float:
        """Copy the learner's weights into the generation copy (under LoRA its adapters), or hand vLLM the weights
        as a standard model's (push_weights); the seconds it took."""
        start, policy = time.perf_counter(), self.learner.policy
        if self.model is not None:
            self.engine.load_policy_weights(sync_state_dict(policy))
        else:
            push_weights(self.engine, policy)
        self.feed.version = self.learner.step
        return time.perf_counter() - start

    digest = Learner.digest  # the learner's weights; the generation copy's is generator_digest
    generator_digest = Generator.digest

    def restore(self, folder: Path) -> dict[str, Any]:
        state = Learner.restore(self, folder)
        self.sync_engine()
        return state


def spawn(
    cls: type,
    cpus: float,
    gpus: float,
    *args: Any,
    control: bool = False,
    resources: dict[str, float] | None = None,
    node: tuple[str, bool] | None = None,
) -> Any:
    """A remote instance of `cls` holding these resources (and the custom node `resources` that place it on a node
    offering them); never restarted by Ray (a death ends the run, or the async driver replaces it). `control`: a
    "control" concurrency group of one thread beside the default one, for calls that must run while a long call (a
    stream) does. `node`: (the id of a node to run on, whether only there: else anywhere, when it cannot).

    An actor holding no GPU keeps its freed memory as a script's CPU run does (alignment/run/cpu_allocator.py), set
    when its process starts: calling mallopt later, among Ray's and gloo's threads, breaks glibc's rules."""
    groups = {"concurrency_groups": {"control": 1}} if control else {}
    remote = ray.remote(enable_tensor_transport=True, max_restarts=0, **groups)(cls)
    env: dict[str, Any] = {} if gpus else {"runtime_env": {"env_vars": RETAIN_FREED_MEMORY_ENV}}
    if node is not None:
        env["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node[0], soft=not node[1])
    return remote.options(num_cpus=cpus, num_gpus=gpus, resources=resources or {}, **env).remote(*args)
