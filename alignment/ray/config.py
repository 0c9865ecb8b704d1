"""Settings of a GRPO run on Ray: every GRPOConfig field plus the strategy, buffer, weight-sync and learner-group
flags, and the async strategy's (staleness bound, partial rollouts, the objective of stale samples, generators)."""

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from alignment.config.settings import setting
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.objective import Objective, OffPolicyObjective
from alignment.ray.replay_buffer import SAMPLING_POLICIES
from alignment.ray.weight_sync import TRANSPORTS
from alignment.rollout.streaming import KVAfterLoad
from alignment.rollout_correction import SEQUENCE_LEVEL

STRATEGIES = (
    "colocated-sync",
    "colocated-multistep",
    "colocated-k-batches",
    "disaggregated-one-behind",
    "replay-buffer",
    "async",
)
COLOCATED = ("colocated-sync", "colocated-multistep", "colocated-k-batches")
K_STRATEGIES = ("colocated-multistep", "colocated-k-batches")  # the strategies --multistep-k applies to


Strategy = Literal[STRATEGIES]  # type: ignore[valid-type]
BufferPolicy = Literal[SAMPLING_POLICIES]  # type: ignore[valid-type]
Transport = Literal[TRANSPORTS]  # type: ignore[valid-type]


@dataclass
class RayGRPOConfig(GRPOConfig):
    strategy: Strategy = setting(
        "colocated-sync",
        "How generation and learning are scheduled (alignment/ray/driver.py; async: alignment/ray/async_driver.py).",
    )
    multistep_k: int = setting(
        1,
        "k (e.g. 1, 2, 4, 8). colocated-multistep (UW v1): k GRPO-Clip optimizer steps on each rollout batch. "
        "colocated-k-batches (UW v2 problem 7, Variant B): k rollout batches sampled by one policy version, their old "
        "log-probs scored by it, then one optimizer step on each.",
    )
    buffer_capacity: int = setting(64, "replay-buffer: groups (one question's --group-size rollouts) the buffer keeps.")
    buffer_policy: BufferPolicy = setting(
        "uniform",
        "replay-buffer: uniform (random groups, kept: each may train again until evicted, as UW A3 v1 problem 14's "
        "buffer reuses stale rollouts), newest (the latest, kept) or fifo (the oldest, each used once: with one "
        "batch added and one drawn a step, the same batches as disaggregated-one-behind).",
    )
    weight_sync: Transport = setting(
        "object_store", "Learner -> generator transport: nccl needs each actor on its own GPU; gloo runs on CPUs."
    )
    ray_timeout_s: float = setting(
        600.0, "Longest wait for any Ray call; past it the run stops with an error and a checkpoint."
    )
    ray_address: str | None = setting(None, "Address of a running Ray cluster (default: start a local one).")
    learner_processes: int = setting(
        1,
        "Learner actors sharing the policy with FSDP2 (alignment/ray/learner_group.py), on one node or several; "
        "disaggregated strategies only.",
    )

    max_staleness: int = setting(
        1,
        "async: the most policy versions any trained token may lag the learner (AReaL's eta); 0: the synchronous "
        "on-policy update.",
    )
    partial_rollouts: bool = setting(
        True,
        "async: load new weights between two decode steps (with --env: between two turns of an episode) and continue "
        "unfinished responses under them (each token records its version); off: responses (episodes) finish on the "
        "weights they started with.",
    )
    inflight_kv: KVAfterLoad = setting(
        "recompute",
        "async, partial rollouts: after an in-flight load, recompute the cached keys and values under the new "
        "weights (AReaL: exact samples of the new policy) or keep those of the old (PipelineRL).",
    )
    off_policy_objective: OffPolicyObjective = setting(
        "decoupled",
        "async: decoupled: clip against the learner's weights before the update and weight each token by "
        "pi_prox / pi_behav (--rollout-correction, capped at --tis-cap; uncapped without it); naive: clip against "
        "the behaviour log-probs, no weight (alignment/grpo/objective.py).",
    )
    generators: int = setting(1, "async: generator actors streaming groups side by side.")
    actor_restarts: int = setting(
        0,
        "Actors that may die (or hang past --ray-timeout-s) and be replaced mid-run, every kind counted together: a "
        "generator or the scorer is replaced (a generator over --weight-sync gloo or nccl joins a collective group "
        "formed again), a lost learner restarts every actor from the last checkpoint; past the bound the run stops "
        "naming the lost one (alignment/ray/supervisor.py).",
    )

    # The transport, timeouts and cluster may change too: they move the same tensors. Under async, so may the
    # generators and the staleness bound (buffered groups past a lower bound are dropped, counted and resampled).
    RESUMABLE: ClassVar[frozenset[str]] = GRPOConfig.RESUMABLE | {
        "weight_sync",
        "ray_timeout_s",
        "ray_address",
        "max_staleness",
        "generators",
        "actor_restarts",
    }
    # the restart bound was the async strategy's --generator-restarts; any count carries over
    LEGACY: ClassVar[dict[str, tuple[str, dict[Any, Any]]]] = GRPOConfig.LEGACY | {
        "generator_restarts": ("actor_restarts", {n: n for n in range(1000)})
    }

    @property
    def colocated(self) -> bool:
        return self.strategy in COLOCATED

    @property
    def max_version_lag(self) -> int:
        """How many versions a batch's sampler may be behind the learner that trains on it."""
        if self.strategy == "colocated-k-batches":
            return self.multistep_k - 1  # the i-th batch of a round is trained by version v + i - 1
        return 0 if self.colocated else 1

    def learner_config(self) -> GRPOConfig:
        """What the GRPO learner runs: k passes over each rollout batch when multistep."""
        return (
            replace(self, epochs_per_rollout_batch=self.multistep_k) if self.strategy == "colocated-multistep" else self
        )

    def learner_objective(self) -> Objective:
        """The learner's objective: async trains samples of older versions with --off-policy-objective."""
        return Objective.from_settings(
            self.learner_config(), self.off_policy_objective if self.strategy == "async" else None
        )


def _fail(message: str) -> None:
    raise ValueError(message)


def validate_ray(config: RayGRPOConfig) -> None:
    """GRPOConfig's checks, then the Ray flags; each failure names its flag."""
    validate(config)
    c = config
    if c.time_budget is not None:
        _fail("--time-budget is a setting of scripts/train_grpo.py; the Ray driver has no run clock (run it without)")
    if c.multistep_k < 1:
        _fail(f"--multistep-k must be >= 1, got {c.multistep_k}")
    if c.multistep_k != 1 and c.strategy not in K_STRATEGIES:
        _fail(f"--multistep-k ({c.multistep_k}) applies only to --strategy {' or '.join(K_STRATEGIES)}")
    if c.strategy == "colocated-k-batches":
        if not c.needs_old_log_probs:
            _fail(
                "--strategy colocated-k-batches trains each batch against old log-probs stored from the version that "
                f"sampled it: pass --loss-type grpo_clip (or another ratio loss; got {c.loss_type!r})"
            )
        if c.off_policy:
            _fail(
                "--strategy colocated-k-batches takes one optimizer step per rollout batch: keep "
                "--epochs-per-rollout-batch 1 and --train-batch-size equal to --rollout-batch-size"
            )
        if c.checkpoint_every % c.multistep_k:
            _fail(
                f"--checkpoint-every ({c.checkpoint_every}) must be a multiple of --multistep-k ({c.multistep_k}) "
                "with --strategy colocated-k-batches: checkpoints fall between rounds, so that --resume starts a round "
                "where an uninterrupted run would"
            )
    if c.strategy == "colocated-multistep":
        if c.loss_type != "grpo_clip":
            _fail(
                f"--strategy colocated-multistep trains with GRPO-Clip on stored old log-probs: "
                f"pass --loss-type grpo_clip (got {c.loss_type!r})"
            )
        if c.epochs_per_rollout_batch != 1 or c.train_batch_size != c.rollout_batch_size:
            _fail(
                "--strategy colocated-multistep takes its optimizer steps from --multistep-k: keep "
                "--epochs-per-rollout-batch 1 and --train-batch-size equal to --rollout-batch-size"
            )
    if c.dynamic_sampling:  # the driver draws step t's questions at a fixed position, ahead of the learner
        _fail(
            f"--dynamic-sampling is not available with --strategy {c.strategy}: the Ray driver draws a fixed "
            "--rollout-batch-size / --group-size questions per step; run it with scripts/train_grpo.py"
        )
    if c.strategy == "replay-buffer" and c.buffer_capacity < c.n_prompts_per_rollout_batch:
        _fail(
            f"--buffer-capacity ({c.buffer_capacity}) must hold at least one rollout batch "
            f"({c.n_prompts_per_rollout_batch} groups = --rollout-batch-size / --group-size)"
        )
    if c.colocated and c.weight_sync != "object_store":
        _fail(
            f"--weight-sync {c.weight_sync} needs two actors; --strategy {c.strategy} copies the weights into "
            "its generation copy within one actor (leave --weight-sync at object_store)"
        )
    if c.weight_sync != "object_store" and c.backend == "vllm":
        # vLLM's in-process engine holds torch.distributed's default group, which Ray's collective group needs
        _fail(
            f"--weight-sync {c.weight_sync} cannot reach a vLLM generator (its engine holds the process's "
            "torch.distributed group): use --weight-sync object_store"
        )
    if not c.ray_timeout_s > 0:
        _fail(f"--ray-timeout-s must be > 0, got {c.ray_timeout_s}")
    if c.actor_restarts < 0:
        _fail(f"--actor-restarts must be >= 0, got {c.actor_restarts}")
    if c.actor_restarts > 0 and c.weight_sync == "gloo" and c.learner_processes > 1:
        _fail(
            f"--actor-restarts with --weight-sync gloo and --learner-processes {c.learner_processes}: the learners' "
            "gloo world spans the generators and holds the policy's shards, so a replacement cannot join it without "
            "restarting every learner; use --weight-sync object_store, or --learner-processes 1"
        )
    if c.learner_processes < 1:
        _fail(f"--learner-processes must be >= 1, got {c.learner_processes}")
    if c.learner_processes > 1:
        n = c.learner_processes
        if c.colocated:
            _fail(
                f"--learner-processes {n} needs learner actors of their own: use --strategy disaggregated-one-behind "
                "or "
                f"replay-buffer (--strategy {c.strategy} trains and samples one policy in one process)"
            )
        if c.lora_rank > 0:
            _fail(
                f"--learner-processes {n} with --lora-rank {c.lora_rank}: LoRA trains in one process (its adapters "
                "are small enough not to need sharding); use --learner-processes 1"
            )
        if c.backend == "transformer_lm":
            _fail(
                f"--learner-processes {n} shards a transformers model; --backend transformer_lm trains our own "
                "TransformerLM in one process: use --learner-processes 1"
            )
        if c.precision == "fp16-mixed":
            _fail(
                f"--learner-processes {n} with --precision fp16-mixed: its loss scaler would skip steps on one "
                "learner's shards alone; use --precision bf16-mixed or --learner-processes 1"
            )
    validate_async(c)


ASYNC_FLAGS = (
    "max_staleness",
    "partial_rollouts",
    "inflight_kv",
    "off_policy_objective",
    "generators",
)


def validate_async(c: RayGRPOConfig) -> None:
    defaults = RayGRPOConfig()
    if c.strategy != "async":
        for name in ASYNC_FLAGS:
            if getattr(c, name) != getattr(defaults, name):
                _fail(f"--{name.replace('_', '-')} applies only to --strategy async")
        return
    if c.backend == "transformer_lm":
        _fail("--strategy async streams from --backend hf or vllm; our TransformerLM's sampler does not stream")
    for name, least in (("max_staleness", 0), ("generators", 1)):
        if getattr(c, name) < least:
            _fail(f"--{name.replace('_', '-')} must be >= {least}, got {getattr(c, name)}")
    if c.off_policy_objective == "decoupled":
        if not (c.sampling_temperature == 1 and c.sampling_top_p == 1):
            _fail(
                "--off-policy-objective decoupled weighs each token by pi_prox / pi_behav, which needs "
                "--sampling-temperature 1 and --sampling-top-p 1 (behaviour log-probs are those of the tempered "
                "distribution); or use --off-policy-objective naive"
            )
        if c.tis_cap is None and c.rollout_correction.endswith("mask"):
            _fail(f"--rollout-correction {c.rollout_correction} under the decoupled objective needs a bound: --tis-cap")
        if c.loss_type == "gspo" and c.rollout_correction not in SEQUENCE_LEVEL:
            _fail(
                f"--loss-type gspo weighs whole sequences: the decoupled objective's weight needs --rollout-correction "
                f"sequence_tis or sequence_mask (got {c.rollout_correction})"
            )
    elif c.tis_cap is not None:
        _fail("--off-policy-objective naive trains stale samples without weights: drop --tis-cap (or use decoupled)")
    if c.env is not None and c.inflight_kv != "recompute":
        _fail(
            f"--inflight-kv {c.inflight_kv} with --env: weights load between two turns of an episode, never within "
            "one, and each turn's prompt is computed under the weights that sample it; drop --inflight-kv"
        )
    if c.partial_rollouts and c.lora_rank > 0 and c.backend == "vllm":
        _fail(
            "--partial-rollouts with --lora-rank on --backend vllm: vLLM cannot swap the adapter that running requests "
            "use; use --no-partial-rollouts (responses finish on their adapter) or --backend hf"
        )
