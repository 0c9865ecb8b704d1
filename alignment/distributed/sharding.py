"""The sharded learner: one policy over N processes with PyTorch's FSDP2 (`fully_shard`), NCCL on GPUs, gloo on CPUs.

`torchrun --nproc-per-node N scripts/train_grpo.py ...` starts N copies of a run. Each joins the process group
(`start_group`), loads the policy and shards it as it is built (`shard_policy`): every decoder layer, then the
root (embeddings, final norm, head). A rank keeps 1/N of every parameter, of its gradient and of its AdamW
moments; a layer's whole weights exist only while it computes (all-gathered before, freed after).

How a step splits (the GRPO and SFT learners): every rank holds the whole rollout batch (each samples and grades
its share of the prompts, and the results are gathered). Each optimizer step's microbatches go round-robin to the
ranks (`microbatch_turns`); a rank one short runs an empty copy (every row out of the loss: gradient 0), so that every
rank makes the same collective calls. The loss's batch-wide denominators (rows, response tokens, the constant)
are counted on the whole step's batch, which every rank has, so no count needs reducing: a rank's microbatch
losses are its share of the step's loss, and the reduce-scatter sums the gradients (divide factor 1) where
FSDP's default would average them.

Every model call is a collective (each layer all-gathers its weights), so every rank must make the same calls in
the same order. Hence the learner scores each microbatch with one decoder call (`root_forward`): prompt
sharing's packed-or-cached choice and --skip-zero-advantage's split depend on the data. The sampler runs with the
weights gathered once (`gathered`): its decoding loop makes no collective, so ranks may stop at different lengths.
"""

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor

T = TypeVar("T")


@dataclass(frozen=True)
class ShardGroup:
    """This process's place in the learner's process group."""

    rank: int
    size: int
    group: Any = None  # the torch ProcessGroup (None: the default one)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def gather(self, value: T) -> list[T]:
        """Every rank's `value` (any picklable object), in rank order, on every rank."""
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, value, group=self.group)
        return out

    def merged(self, *parts: Any) -> tuple[Any, ...]:
        """Each of `parts` (a list, or a dict of lists) joined over every rank in rank order, on every rank."""
        everyone = self.gather(parts)
        return tuple(
            {key: sum((theirs[i][key] for theirs in everyone), []) for key in part}
            if isinstance(part, dict)
            else sum((theirs[i] for theirs in everyone), [])
            for i, part in enumerate(parts)
        )

    def split_work(self, count: int, compute: Callable[[slice], list[T]]) -> list[T]:
        """`compute` of this rank's contiguous share of `count` items (`my_slice`; not called on an empty share),
        every rank's results joined in rank order, on every rank."""
        share = my_slice(count, self)
        mine = compute(share) if share.start < share.stop else []
        return [item for part in self.gather(mine) for item in part]

    def barrier(self) -> None:
        dist.barrier(group=self.group)


def launched() -> bool:
    """Whether this process is one of several started by torchrun (which sets WORLD_SIZE and RANK)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def start_group(device_type: str) -> ShardGroup:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPUs); on GPUs each process takes GPU LOCAL_RANK."""
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return ShardGroup(dist.get_rank(), dist.get_world_size())


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks a transformers model declares unsplittable (`_no_split_modules`: its decoder layers)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def shard_policy(
    model: nn.Module, device_type: str, group: dist.ProcessGroup | None = None, compute: torch.dtype | None = None
) -> nn.Module:
    """Shard a transformers model over every process of `group` (default: all of them): each decoder layer, then
    the root. The Ray learner group (alignment/ray/learner_group.py) passes its learners' own group. With `compute`,
    the shards stay in their dtype (float32: the master weights of a mixed --precision) and are gathered in
    `compute` for the forward and backward, their gradients reduced in float32 (FSDP2's MixedPrecisionPolicy)."""
    layers = decoder_layers(model)
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layers (_no_split_modules): it cannot be sharded")
    if group is None:
        mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    else:
        mesh = DeviceMesh.from_group(group, device_type)
    mixed = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32 if compute else None)
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=mixed)
    fully_shard(model, mesh=mesh, mp_policy=mixed)
    for module in fsdp_modules(model):
        # the losses carry the step-wide denominators: sum the ranks' gradients (SUM: gloo has no PREMUL_SUM)
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)
    return model


def sharded_copy(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """A copy of a sharded transformers model, sharded the same way (FSDP2 modules cannot be deep-copied): built
    from its config and filled shard by shard, each rank copying its own, with no communication. Its shards are in
    `dtype` (default: the model's own), cast from the model's."""
    from transformers import AutoModelForCausalLM

    parameter = next(model.parameters())
    copy = AutoModelForCausalLM.from_config(model.config, dtype=dtype or parameter.dtype)  # type: ignore[attr-defined]
    shard_policy(copy, parameter.device_mesh.device_type, parameter.device_mesh.get_group())  # type: ignore[attr-defined]
    theirs = dict(model.named_parameters()) | dict(model.named_buffers())
    with torch.no_grad():
        for name, mine in [*copy.named_parameters(), *copy.named_buffers()]:
            source = theirs[name]
            (mine.to_local() if isinstance(mine, DTensor) else mine).copy_(
                source.to_local() if isinstance(source, DTensor) else source
            )
    return copy


def fsdp_modules(model: nn.Module) -> list[FSDPModule]:
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def shard_group(model: nn.Module) -> ShardGroup | None:
    """The group a sharded model's parameters are spread over (from their device mesh), or None when unsharded."""
    parameter = next(model.parameters(), None)
    if not isinstance(parameter, DTensor):
        return None
    mesh = parameter.device_mesh
    return ShardGroup(mesh.get_local_rank(), mesh.size(), mesh.get_group())


def root_forward(model: nn.Module, compute: Callable[[], T]) -> T:
    """Run `compute` as the sharded root's forward call, so FSDP2 gathers the root's own parameters (embeddings, final
    norm, head) around it: code that calls `model.base_model` and the head separately needs them gathered."""
    model.forward = compute  # type: ignore[method-assign]  # the instance attribute shadows the class's forward
    try:
        return model()
    finally:
        del model.forward


@contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Every sharded weight gathered whole for the block (sampling), then sharded again. Inside, model calls make no
    collective: each rank may decode as many tokens as its own rows need."""
    modules = fsdp_modules(model)
    for module in modules:
        module.set_reshard_after_forward(False, recurse=False)
        module.unshard()
    try:
        yield
    finally:
        for module in modules:
            module.reshard()
            module.set_reshard_after_forward(True, recurse=False)


def full_tensors(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict with every sharded tensor gathered whole, on every rank (a collective: all ranks call it)."""
    return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in state_dict.items()}


def clip_grad_norm(parameters: list[nn.Parameter], max_norm: float) -> float:
    """Clip to `max_norm` and return the norm before clipping: over all shards when the gradients are sharded."""
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    return (norm.full_tensor() if isinstance(norm, DTensor) else norm).item()


def my_microbatches(count: int, group: ShardGroup | None) -> list[int | None]:
    """This rank's microbatches of an optimizer step's `count`, round-robin; None pads a rank one short, so that
    every rank runs ceil(count / size) of them."""
    if group is None:
        return list(range(count))
    rounds = -(-count // group.size)
    return [i if i < count else None for i in range(group.rank, rounds * group.size, group.size)]


def microbatch_turns(rows: int, size: int, group: ShardGroup | None) -> list[tuple[slice, bool]]:
    """This rank's turns over an optimizer step of `rows` rows in microbatches of `size`: (the rows it runs,
    whether they count). Every rank takes the same number of turns, so that all make the same collective calls; a
    rank one short runs microbatch 0 again as an empty turn (counts False), whose caller takes every row out of the
    loss: its gradient is exactly 0. Unsharded (`group` None), every microbatch in order, each counting."""
    turns = []
    for index in my_microbatches(-(-rows // size), group):
        start = (index or 0) * size
        turns.append((slice(start, start + size), index is not None))
    return turns


def my_slice(count: int, group: ShardGroup) -> slice:
    """This rank's contiguous share of `count` items (the first ranks take one more when they do not divide)."""
    base, extra = divmod(count, group.size)
    start = group.rank * base + min(group.rank, extra)
    return slice(start, start + base + (group.rank < extra))
