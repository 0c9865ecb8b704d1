"""The sharded learner's checkpoint tensors: torch.distributed.checkpoint (DCP) for the shards, plus the whole policy.

Inside the checkpoint folder alignment/run/checkpoint.py builds (state.json and COMPLETE are its own):

    policy/             the policy as a standard model folder, gathered from the shards and written by rank 0
    sharded/            DCP: every rank writes its shards of the weights and the AdamW moments (tensors only;
                        the optimizer's param groups go to state.json)
    rng.safetensors     rank 0's torch RNG state (every rank seeds and draws alike)

Loading re-shards: DCP reads the slices each tensor has on the ranks there are now, so a run saved by 2
processes resumes on 1 or 4. DCP keeps its index (`.metadata`) as a pickle and its shards as torch files; the
index is read here with an unpickler that admits only DCP's metadata classes and torch's dtypes, and the shards
with DCP's own torch.load(weights_only=True), so a checkpoint from someone else still cannot run code.
"""

import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from transformers import PreTrainedTokenizerBase

from alignment.distributed.sharding import ShardGroup, shard_group

SHARDS, RNG_FILE = "sharded", "rng.safetensors"
_RNG = "rng.torch"
_TORCH_VALUES = (torch.dtype, torch.layout, torch.memory_format)
_HARMLESS = {("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("collections", "OrderedDict")}


class _MetadataUnpickler(pickle.Unpickler):
    """Only DCP's metadata dataclasses, torch.Size, torch's dtypes, layouts and memory formats, and paths."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("torch.distributed.checkpoint.") or (module, name) == ("torch", "Size"):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), _TORCH_VALUES):
            return getattr(torch, name)
        if (module, name) in _HARMLESS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint's index")


class _SafeReader(FileSystemReader):
    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        rank = kwargs.get("rank")
        with open(Path(self.path) / (".metadata" if rank is None else f"__{rank}.metadata"), "rb") as file:
            metadata = _MetadataUnpickler(file).load()
        if getattr(metadata, "storage_meta", None) is None:  # then as FileSystemReader.read_metadata goes on
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def save_shards(
    staging: Path,
    policy: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    group: ShardGroup,
) -> dict[str, Any]:
    """Write the shards (every rank), the whole policy and the RNG (rank 0); returns the optimizer's JSON part."""
    whole = get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if group.main:  # the gathered state dict lives on rank 0 only
        # a tied head is the embedding under a second name: stored once, as save_pretrained does for a live model
        stored = {name for name, _ in policy.named_parameters()} | {name for name, _ in policy.named_buffers()}
        whole = {name: tensor for name, tensor in whole.items() if name in stored}
        policy.save_pretrained(staging / "policy", state_dict=whole)  # type: ignore[operator]
        tokenizer.save_pretrained(staging / "policy")
        save_file({_RNG: torch.get_rng_state()}, staging / RNG_FILE)
    del whole
    weights, optimizer_state = get_state_dict(policy, optimizer)
    dcp.save(
        {"model": weights, "optimizer": optimizer_state["state"]},
        checkpoint_id=staging / SHARDS,
        process_group=group.group,
    )
    return {"param_groups": optimizer_state["param_groups"]}


def load_shards(target: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Read the shards this rank now holds (re-sharded to the current process count) and the RNG state."""
    weights, optimizer_state = get_state_dict(policy, optimizer)  # templates: where each shard goes
    state = {"model": weights, "optimizer": optimizer_state["state"]}
    group = shard_group(policy)  # its own group: under Ray the process group may hold more processes than the learners
    dcp.load(state, storage_reader=_SafeReader(target / SHARDS), process_group=None if group is None else group.group)
    set_state_dict(
        policy,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict={"state": state["optimizer"], "param_groups": saved["param_groups"]},
    )
    torch.set_rng_state(load_file(target / RNG_FILE)[_RNG])
