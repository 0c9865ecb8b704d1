"""Settings of a GRPO run on Ray: every GRPOConfig field plus the strategy, buffer and weight-sync flags."""

from dataclasses import dataclass, replace

from alignment.grpo_config import GRPOConfig, validate
from alignment.replay_buffer import SAMPLING_POLICIES
from alignment.weight_sync import TRANSPORTS

STRATEGIES = ("colocated-sync", "colocated-multistep", "disaggregated-one-behind", "replay-buffer")
COLOCATED = ("colocated-sync", "colocated-multistep")


@dataclass
class RayGRPOConfig(GRPOConfig):
    strategy: str = "colocated-sync"
    multistep_k: int = 1  # colocated-multistep: optimizer steps per rollout batch
    buffer_capacity: int = 64  # replay-buffer: groups (one question's group_size rollouts) kept
    buffer_policy: str = "fifo"  # replay-buffer: fifo, uniform or newest
    weight_sync: str = "object_store"  # disaggregated: object_store, nccl (both actors on GPUs) or gloo
    ray_timeout_s: float = 600.0  # the longest any Ray call may take before the run stops with an error
    ray_address: str | None = None  # an existing cluster; default: start a local one

    @property
    def colocated(self) -> bool:
        return self.strategy in COLOCATED

    def learner_config(self) -> GRPOConfig:
        """What the learner's GRPOTrainer runs: k passes over each rollout batch when multistep."""
        return replace(self, epochs_per_rollout_batch=self.multistep_k) if self.strategy == "colocated-multistep" else self


# Ray settings that may change when resuming without changing what the run computes.
RESUMABLE_RAY_FIELDS = {"weight_sync": "object_store", "ray_timeout_s": 600.0, "ray_address": None}


def fingerprinted(config: RayGRPOConfig) -> RayGRPOConfig:
    """The config as the checkpoint compares it: transport, timeout and address reset to their defaults."""
    return replace(config, **RESUMABLE_RAY_FIELDS)


def _fail(message: str) -> None:
    raise ValueError(message)


def validate_ray(config: RayGRPOConfig) -> None:
    """GRPOConfig's checks, then the Ray flags; each failure names its flag."""
    validate(config)
    c = config
    if c.strategy not in STRATEGIES:
        _fail(f"--strategy {c.strategy!r} is not one of {', '.join(STRATEGIES)}")
    if c.multistep_k < 1:
        _fail(f"--multistep-k must be >= 1, got {c.multistep_k}")
    if c.multistep_k != 1 and c.strategy != "colocated-multistep":
        _fail(f"--multistep-k ({c.multistep_k}) applies only to --strategy colocated-multistep")
    if c.strategy == "colocated-multistep":
        if c.loss_type != "grpo_clip":
            _fail(f"--strategy colocated-multistep trains with GRPO-Clip on stored old log-probs: "
                  f"pass --loss-type grpo_clip (got {c.loss_type!r})")
        if c.epochs_per_rollout_batch != 1 or c.train_batch_size != c.rollout_batch_size:
            _fail("--strategy colocated-multistep takes its optimizer steps from --multistep-k: keep "
                  "--epochs-per-rollout-batch 1 and --train-batch-size equal to --rollout-batch-size")
    if c.buffer_policy not in SAMPLING_POLICIES:
        _fail(f"--buffer-policy {c.buffer_policy!r} is not one of {', '.join(SAMPLING_POLICIES)}")
    if c.strategy == "replay-buffer" and c.buffer_capacity < c.n_prompts_per_rollout_batch:
        _fail(f"--buffer-capacity ({c.buffer_capacity}) must hold at least one rollout batch "
              f"({c.n_prompts_per_rollout_batch} groups = --rollout-batch-size / --group-size)")
    if c.weight_sync not in TRANSPORTS:
        _fail(f"--weight-sync {c.weight_sync!r} is not one of {', '.join(TRANSPORTS)}")
    if c.colocated and c.weight_sync != "object_store":
        _fail(f"--weight-sync {c.weight_sync} needs two actors; --strategy {c.strategy} samples from the "
              "policy in place (leave --weight-sync at object_store)")
    if c.weight_sync != "object_store" and c.backend == "vllm":
        # vLLM's in-process engine holds torch.distributed's default group, which Ray's collective group needs
        _fail(f"--weight-sync {c.weight_sync} cannot reach a vLLM generator (its engine holds the process's "
              "torch.distributed group): use --weight-sync object_store")
    if not c.ray_timeout_s > 0:
        _fail(f"--ray-timeout-s must be > 0, got {c.ray_timeout_s}")
