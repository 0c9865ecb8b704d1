"""Setting up a training run, shared by GRPO (alignment/grpo_run.py), GRPO on Ray, SFT and expert iteration:
devices and dtype, the torchrun process group, the policy (sharded when launched), the rollout engine and grader
over it, the GPU memory check, and two small loop helpers (the seeded question order a checkpoint resumes, the phase
timer). The run's tasks come from alignment/tasks/building.py.

Settings arrive as the scripts' dataclasses (alignment/run/training_settings.py and its subclasses); a function
reads only the fields it names.
"""

import contextlib
import os
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from alignment.data.task import Task
from alignment.distributed.sharding import ShardGroup, launched, shard_policy, start_group
from alignment.grading.parallel import ParallelGrader
from alignment.kernels.support import use_kernels
from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.models.loading import load_model_and_tokenizer, load_tokenizer
from alignment.models.packed_rows import use_packed_rows
from alignment.prompts import format_prompt
from alignment.rollout.backends import make_rollout_engine, resolve_backend
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import RolloutEngine
from alignment.rollout.lm_engine import TransformerLMRolloutEngine
from alignment.rollout.sharded import ShardedGrader, ShardedRollouts
from alignment.run.cpu_allocator import retain_freed_memory
from alignment.run.memory_plan import (
    ASSUMED_PROMPT_TOKENS,
    OWN_GPU_SHARE,
    GiB,
    Machine,
    ModelShape,
    Workload,
    grpo_workload,
    model_shape,
    report,
)
from alignment.run.precision import MODES, compute_dtype, resolve_precision, use_tf32
from alignment.run.training_settings import TrainingSettings


class PromptOrder:
    """A fresh seeded permutation of the questions each pass; `position` is all that resuming needs."""

    def __init__(self, size: int, seed: int, position: int = 0) -> None:
        self.size, self.seed, self.position = size, seed, position

    def take(self, count: int) -> list[int]:
        picked = []
        for _ in range(count):
            epoch, offset = divmod(self.position, self.size)
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + epoch))
            picked.append(int(order[offset]))
            self.position += 1
        return picked


class PhaseTimer:
    """Seconds spent per named phase: `with timer("rollout"): ...`, summed over repeated entries."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start


def devices(config: TrainingSettings) -> tuple[str, str]:
    """(policy, rollout): two GPUs when there are two, one shared GPU, or the CPU; under torchrun, GPU LOCAL_RANK."""
    gpus = torch.cuda.device_count()
    if launched():
        device = config.policy_device or (f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if gpus else "cpu")
        return device, device
    policy = config.policy_device or ("cuda:0" if gpus else "cpu")
    rollout = config.rollout_device or ("cuda:1" if gpus >= 2 and policy == "cuda:0" else policy)
    return policy, rollout


def model_dtype(config: TrainingSettings, device: str) -> torch.dtype:
    """The dtype --precision computes in (by default bfloat16 on a GPU, float32 on the CPU): the policy's weights as
    its forward uses them, and the rollout engine's (alignment/run/precision.py)."""
    return compute_dtype(config.precision, device)


def check_sharded(config: Any) -> None:
    """What a learner sharded over torchrun's processes (GRPO, SFT, expert iteration) cannot do yet, refused before
    any model loads."""
    if config.backend not in ("auto", "hf"):
        raise ValueError(
            f"--backend {config.backend} under torchrun: the sharded learner samples with --backend hf, "
            "each rank its share of the prompts (vLLM's in-process engine would join the learner's process "
            "group); run without torchrun to sample with vLLM, or use scripts/train_grpo_ray.py, whose "
            "vLLM generators run beside a sharded learner"
        )
    if config.lora_rank > 0:
        raise ValueError(
            "--lora-rank > 0 under torchrun: LoRA runs in one process (its adapters are small enough "
            "not to need sharding); use --lora-rank 0 or run without torchrun"
        )
    if getattr(config, "reuse_rollout_forward", "off") == "on":
        raise ValueError("--reuse-rollout-forward on needs one process (torchrun shards the policy)")
    if getattr(config, "time_budget", None) is not None:
        raise ValueError("--time-budget needs one process: under torchrun each would stop by its own clock")
    if config.precision == "fp16-mixed":
        raise ValueError(
            "--precision fp16-mixed under torchrun: its loss scaler would skip steps on one process's shards "
            "alone; use --precision bf16-mixed, or run without torchrun"
        )


@contextlib.contextmanager
def learner_group(config: Any) -> Iterator[ShardGroup | None]:
    """Under torchrun: the checks above, this process in the group (None otherwise), stdout silenced on ranks other
    than 0 (their progress bars are off), and the group left at the end unless the caller had joined it (a group
    cannot be joined again once left: runs one after the other in one launch share the caller's)."""
    if not launched():
        yield None
        return
    check_sharded(config)
    joined = not torch.distributed.is_initialized()
    group = start_group(torch.device(devices(config)[0]).type)
    try:
        with contextlib.ExitStack() as stack:
            if not group.main:
                stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
            yield group
    finally:
        if joined:
            torch.distributed.destroy_process_group()


def load_policy(
    config: Any,
    device: str,
    dtype: torch.dtype,
    shard: bool = False,
    group: torch.distributed.ProcessGroup | None = None,
):
    """(policy, tokenizer): our own TransformerLM for --backend transformer_lm, else a transformers model (with LoRA
    adapters when --lora-rank > 0), its weights in `dtype`; with `shard`, sharded as it is built over every process
    of `group` (default: all of them; alignment/distributed/sharding.py), where a mixed --precision keeps float32
    shards (its master weights), which FSDP2 gathers in `dtype` (alignment/run/precision.py).

    A policy on the CPU first switches the process to glibc settings that keep freed memory for reuse
    (alignment/run/cpu_allocator.py): a third off the CPU train phase on a VM slow to fault pages in. --tf32 (on by
    default) sets CUDA's float32 matrix products to TensorFloat-32 for the process (alignment/run/precision.py);
    --kernels and --packed-rows set the process's Triton kernels (alignment/kernels/support.py) and row packing.
    """
    if torch.device(device).type == "cpu":
        retain_freed_memory()
    if getattr(config, "torch_threads", None) is not None:
        torch.set_num_threads(config.torch_threads)
    use_tf32(getattr(config, "tf32", False))
    use_kernels(getattr(config, "kernels", "auto"))  # the learner's head kernels and the in-process samplers' draw
    use_packed_rows(getattr(config, "packed_rows", True))
    if resolve_backend(config.backend) == "transformer_lm":
        return load_transformer_lm(config.model, device, dtype)
    # sharded: the whole model only ever in CPU memory; fully_shard moves each rank's shards to its device
    policy, tokenizer = load_model_and_tokenizer(config.model, device, dtype, lora=config, place=not shard)
    if shard:
        mixed = MODES[resolve_precision(config.precision, device)].master
        # a mixed precision's float32 shards are its master, started from the weights as loaded (as unsharded)
        policy = shard_policy(
            policy.float() if mixed else policy, torch.device(device).type, group, dtype if mixed else None
        )
    if getattr(config, "gradient_checkpointing", False):
        policy.gradient_checkpointing_enable()
    return policy, tokenizer


def build_engine(
    config: Any,
    policy,
    tokenizer,
    rollout_device: str,
    policy_device: str,
    vllm_share: float | None = None,
    group: ShardGroup | None = None,
) -> RolloutEngine:
    """An in-process backend on the policy's own device samples from the policy object itself: no weight copies.

    vLLM on the policy's own GPU takes `vllm_share` of it (the memory plan's) and sleeps while the policy trains.
    A sharded policy's ranks each sample their share of the prompts with the hf backend (alignment/rollout/sharded.py).
    """
    decode = {"decode": config.decode, "sync_every": config.decode_sync_every}  # the in-process engines' decode path
    # the policy trains between rollouts on the same device: the static decode path's slots are freed after each call
    colocated = decode | {"keep_decode_state": False}
    if group is not None:
        return ShardedRollouts(HFRolloutEngine(policy, tokenizer, progress=group.main, **colocated), group)  # type: ignore[return-value]
    backend = resolve_backend(config.backend)
    if backend == "transformer_lm" and rollout_device == policy_device:
        return TransformerLMRolloutEngine(policy, tokenizer, **colocated)
    if backend == "hf" and rollout_device == policy_device:
        return HFRolloutEngine(policy, tokenizer, **colocated)
    shared_gpu = rollout_device == policy_device and torch.device(policy_device).type == "cuda"
    share = vllm_share or config.gpu_memory_utilization or OWN_GPU_SHARE
    return make_rollout_engine(
        config.model,
        backend,
        rollout_device,
        model_dtype(config, policy_device),
        gpu_memory_utilization=share,
        seed=config.seed,
        sleep=shared_gpu,
        **decode,
    )


def make_grader(task: Task, workers: int | None, group: ShardGroup | None = None) -> ParallelGrader:
    """The task's reward function in `workers` processes; under torchrun each rank grades its share of a call."""
    grader = ParallelGrader(task.reward_fn, workers)
    return grader if group is None else ShardedGrader(grader, group)  # type: ignore[return-value]


def check_gpu_memory(
    config: Any, task: Task | None, policy_device: str, rollout_device: str, processes: int = 1
) -> float | None:
    """Print the GRPO run's memory plan for its GPUs and return vLLM's share; ValueError naming the flags that would
    make it fit when it does not. Reads config.json and the tokenizer only: no model has loaded yet. Under
    torchrun, `processes` GPUs each hold a shard of the learner."""
    tokenizer = load_tokenizer(config.model)
    prompt_tokens = (
        ASSUMED_PROMPT_TOKENS
        if task is None
        else max(  # keyword tasks are built after the model loads
            len(tokenizer(format_prompt(task.template, q))["input_ids"]) for q in task.questions
        )
    )
    gpus = processes if processes > 1 else 1 if torch.device(rollout_device) == torch.device(policy_device) else 2
    machine = Machine(gpus, torch.cuda.get_device_properties(torch.device(policy_device)).total_memory / GiB)
    shape = model_shape(config.model)
    return check_memory_plan(config, shape, grpo_workload(config, shape, prompt_tokens, processes), machine)


def check_memory_plan(config: Any, shape: ModelShape, work: Workload, machine: Machine) -> float | None:
    """Print the plan and return vLLM's share; when it does not fit, a ValueError naming the flags that would make it
    fit, or with --ignore-memory-plan a warning and the run goes on."""
    result, text = report(shape, work, machine)
    print(text)
    if not result.fits:
        if not getattr(config, "ignore_memory_plan", False):
            raise ValueError(text.splitlines()[-1] + " (--ignore-memory-plan starts it anyway)")
        warnings.warn(
            f"the memory plan says this run does not fit ({text.splitlines()[-1]}); starting anyway "
            "(--ignore-memory-plan)",
            stacklevel=2,
        )
    return result.vllm_share
