"""Run checkpoints: everything a resumed run needs to continue exactly, written atomically, read without pickle.

    checkpoint/
      policy/                  the policy as a standard model folder (alignment/models/policy_folder.py); for a LoRA
                               policy only its adapter, in peft's format
      optimizer.safetensors    the optimizer's tensors ("<param index>.<name>": AdamW's states and, in a mixed
                               precision, the float32 master weights, "<index>.master") and the torch RNG state
                               ("rng.torch")
      state.json               format and version, the settings it was made with, the optimizer's param groups and
                               scalars (fp16-mixed's loss scaler too), the Python RNG, the loop's own state (step, ...)
                               and every file's size
      COMPLETE                 the step, written last

A policy sharded over processes (alignment/distributed/sharding.py) keeps the same policy/, state.json and COMPLETE, and
its shards in torch.distributed.checkpoint's format instead of optimizer.safetensors
(alignment/distributed/sharded_checkpoint.py); state.json records the process count. It is built as
`checkpoint.partial/` and renamed into place, so a crash or a full disk mid-save leaves the previous checkpoint intact.
Loading reads tensors with safetensors and everything else as JSON: a checkpoint from someone else cannot run code.
`export_policy` copies the policy to the run folder's `policy/`; a LoRA policy's adapter goes to `policy/adapter/`, and
`policy/` itself is the base model with the adapter merged in.
"""

import json
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import PreTrainedTokenizerBase

from alignment.config.settings import as_saved, upgraded, with_defaults
from alignment.distributed.sharded_checkpoint import load_shards, save_shards
from alignment.distributed.sharding import ShardGroup, shard_group
from alignment.models.policy_folder import is_adapter_folder, load_policy_weights, save_merged_folder, save_policy
from alignment.run.precision import PolicyOptimizer
from alignment.utils.atomic import atomic_write_json, replace_dir
from alignment.utils.faults import fault_point

FORMAT, FORMAT_VERSION = "alignment.checkpoint", 2
POLICY, TENSORS, STATE, MARKER = "policy", "optimizer.safetensors", "state.json", "COMPLETE"
_RNG = "rng.torch"
Optimizer = torch.optim.Optimizer | PolicyOptimizer


def torch_optimizer(optimizer: Optimizer) -> torch.optim.Optimizer:
    """The torch optimizer itself (a PolicyOptimizer's AdamW): what DCP saves a sharded policy's state from."""
    return optimizer.optimizer if isinstance(optimizer, PolicyOptimizer) else optimizer


def fingerprint(config: Any) -> dict[str, Any]:
    """The settings that decide what a run computes: all but those a resumed run may change."""
    return {k: v for k, v in config.to_json().items() if k not in type(config).RESUMABLE}


def _optimizer_parts(optimizer: Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, JSON) that together hold optimizer.state_dict(); its entries besides "state" (the loss scaler's,
    alignment/run/precision.py) go to the JSON as they are."""
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().contiguous()
            else:
                scalars[f"{index}.{name}"] = value
    return tensors, {k: v for k, v in state.items() if k != "state"} | {"scalars": scalars}


def _optimizer_state(tensors: dict[str, torch.Tensor], saved: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in [*tensors.items(), *saved["scalars"].items()]:
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    return {k: v for k, v in saved.items() if k != "scalars"} | {"state": dict(sorted(state.items()))}


def save_checkpoint(
    folder: Path,
    config: Any,
    policy: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: Optimizer,
    state: dict[str, Any],
) -> Path:
    """Checkpoint into `folder`/checkpoint; `state` is the loop's JSON state and must hold "step". A sharded policy's
    ranks all call it; rank 0 does the folder's bookkeeping."""
    target, staging = folder / "checkpoint", folder / "checkpoint.partial"
    group = shard_group(policy)
    if group is None or group.main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    if group is None:
        save_policy(policy, tokenizer, staging / POLICY)
        tensors, optimizer_json = _optimizer_parts(optimizer)
        save_file(tensors | {_RNG: torch.get_rng_state()}, staging / TENSORS)
    else:
        group.barrier()  # the staging folder exists
        optimizer_json = save_shards(staging, policy, tokenizer, torch_optimizer(optimizer), group)
    fault_point("checkpoint_write")
    if group is None or group.main:
        _finish(folder, staging, config, optimizer_json, state, group)
    if group is not None:
        group.barrier()  # no rank goes on before the checkpoint is in place
    return target


def _finish(
    folder: Path,
    staging: Path,
    config: Any,
    optimizer_json: dict[str, Any],
    state: dict[str, Any],
    group: ShardGroup | None,
) -> None:
    """state.json, then the completion marker, then the swap into place."""
    target = folder / "checkpoint"
    files = {str(p.relative_to(staging)): p.stat().st_size for p in sorted(staging.rglob("*")) if p.is_file()}
    atomic_write_json(
        staging / STATE,
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "config": fingerprint(config),
            "optimizer": optimizer_json,
            "python_rng": random.getstate(),
            "loop": state,
            "files": files,
            "processes": None if group is None else group.size,
        },
    )
    (staging / MARKER).write_text(str(state["step"]))
    old = folder / "checkpoint.old"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    fault_point("checkpoint_swap")
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _recover(folder: Path) -> None:
    """A save killed between its two renames leaves no checkpoint/: the finished staging folder (its marker is
    written last) or else the previous checkpoint takes its place."""
    target = folder / "checkpoint"
    if target.exists():
        return
    for candidate in (folder / "checkpoint.partial", folder / "checkpoint.old"):
        if (candidate / MARKER).is_file():
            candidate.rename(target)
            return


def complete_step(folder: Path) -> int | None:
    """The step of the complete checkpoint in run folder `folder`, or None when there is none."""
    _recover(folder)
    target = folder / "checkpoint"
    if not (target / MARKER).is_file() or not (target / STATE).is_file():
        return None
    return int((target / MARKER).read_text())


def _read_state(target: Path) -> dict[str, Any]:
    path = target / STATE
    try:
        saved = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"--resume: {path} is not valid JSON ({err})") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or saved.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"--resume: {path} is not an {FORMAT} version {FORMAT_VERSION} file")
    for name, size in saved["files"].items():
        actual = (target / name).stat().st_size if (target / name).is_file() else None
        if actual != size:
            raise ValueError(f"--resume: {target / name} is damaged: {actual} bytes where {size} were written")
    return saved


def load_checkpoint(folder: Path, config: Any, policy: torch.nn.Module, optimizer: Optimizer) -> dict[str, Any]:
    """Restore policy, optimizer and RNGs from `folder`/checkpoint and return the loop's state.

    Raises ValueError when the checkpoint is missing, incomplete, damaged, of an older format, or was made
    with other settings (naming each setting that differs)."""
    target = folder / "checkpoint"
    if (target / "state.pt").is_file():
        raise ValueError(
            f"--resume: {target} was written by an older version of alignment as a pickle (state.pt), "
            "which this version never loads; start the run again"
        )
    group = shard_group(policy)
    if group is not None and not group.main:
        group.barrier()  # rank 0 first: it may move a checkpoint a killed save left aside into place (_recover)
    step = complete_step(folder)
    if group is not None and group.main:
        group.barrier()
    if step is None:
        raise ValueError(f"--resume: no complete checkpoint in {folder} (expected {target}/{STATE} and {MARKER})")
    saved = _read_state(target)
    current = fingerprint(config)
    # settings renamed or added since the checkpoint was written read as they do in its settings.json
    made_with = {
        k: v
        for k, v in with_defaults(type(config), as_saved(type(config), upgraded(type(config), saved["config"]))).items()
        if k not in type(config).RESUMABLE
    }
    differ = sorted(k for k in made_with.keys() | current.keys() if made_with.get(k) != current.get(k))
    if differ:
        details = ", ".join(f"{k}: checkpoint {made_with.get(k)!r} vs now {current.get(k)!r}" for k in differ)
        raise ValueError(
            f"--resume: the checkpoint in {folder} is from another configuration ({details}); "
            f"if {folder / 'settings.json'} was edited, restore it"
        )
    processes = saved.get("processes")
    if (group is None) != (processes is None):
        made = "one unsharded process" if processes is None else f"a learner sharded over {processes} processes"
        now = "one unsharded process" if group is None else f"a learner sharded over {group.size} processes"
        fix = "resume it without torchrun" if processes is None else "resume it under torchrun (any --nproc-per-node)"
        raise ValueError(f"--resume: the checkpoint in {folder} was written by {made}, and this is {now}; {fix}")
    if group is not None:
        load_shards(
            target, policy, torch_optimizer(optimizer), saved["optimizer"]
        )  # re-sharded to this run's process count
    else:
        try:
            tensors = load_file(target / TENSORS)
        except (SafetensorError, OSError) as err:
            raise ValueError(f"--resume: {target / TENSORS}: not a readable safetensors file ({err})") from None
        load_policy_weights(policy, target / POLICY)
        torch.set_rng_state(tensors.pop(_RNG))
        optimizer.load_state_dict(_optimizer_state(tensors, saved["optimizer"]))
    version, state, gauss = saved["python_rng"]
    random.setstate((version, tuple(state), gauss))
    return saved["loop"]


def export_policy(folder: Path) -> Path:
    """Copy the checkpoint's policy to `folder`/policy (replacing an older one only once the copy is whole); a
    LoRA adapter is merged into its base there and kept beside it in policy/adapter/."""
    target, staging, source = folder / POLICY, folder / f"{POLICY}.partial", folder / "checkpoint" / POLICY
    shutil.rmtree(staging, ignore_errors=True)
    if is_adapter_folder(source):
        save_merged_folder(source, staging)
        shutil.copytree(source, staging / "adapter")
    else:
        shutil.copytree(source, staging)
    return replace_dir(staging, target)
