"""GRPO checkpoints: everything a resumed run needs to continue exactly, written atomically.

A checkpoint is a folder `checkpoint/` holding `state.pt` and a `COMPLETE` marker written last; it is built
as `checkpoint.partial/` and renamed into place, so a crash mid-save leaves the previous checkpoint intact.
"""

import shutil
from pathlib import Path
from typing import Any

import torch

from alignment.grpo_config import GRPOConfig

# Settings that may change between a run and its resumption without changing what it computes.
RESUMABLE_CHANGES = {
    "n_grpo_steps", "output_dir", "eval_every", "n_eval_examples", "eval_max_tokens", "checkpoint_every",
    "wandb_project", "wandb_mode", "gpu_memory_utilization", "backend", "policy_device", "rollout_device",
    "grader_workers", "overwrite",
}
_MARKER = "COMPLETE"


def fingerprint(config: GRPOConfig) -> dict[str, Any]:
    return {k: v for k, v in config.to_json().items() if k not in RESUMABLE_CHANGES}


def save_checkpoint(folder: Path, state: dict[str, Any], config: GRPOConfig) -> Path:
    target, staging = folder / "checkpoint", folder / "checkpoint.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    torch.save(state | {"config": fingerprint(config)}, staging / "state.pt")
    (staging / _MARKER).write_text(str(state["step"]))
    old = folder / "checkpoint.old"
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target


def complete_step(folder: Path) -> int | None:
    """The step of the complete checkpoint in run folder `folder`, or None when there is none."""
    target = folder / "checkpoint"
    if not (target / _MARKER).is_file() or not (target / "state.pt").is_file():
        return None
    return int((target / _MARKER).read_text())


def load_checkpoint(folder: Path, config: GRPOConfig) -> dict[str, Any]:
    """The saved state; raises ValueError if it is missing, incomplete, or from another configuration."""
    target = folder / "checkpoint"
    if complete_step(folder) is None:
        raise ValueError(f"--resume: no complete checkpoint in {folder} (expected {target}/state.pt and {_MARKER})")
    state = torch.load(target / "state.pt", map_location="cpu", weights_only=False)
    saved, current = state["config"], fingerprint(config)
    differ = sorted(k for k in saved.keys() | current.keys() if saved.get(k) != current.get(k))
    if differ:
        details = ", ".join(f"{k}: checkpoint {saved.get(k)!r} vs now {current.get(k)!r}" for k in differ)
        raise ValueError(f"--resume: the checkpoint in {folder} is from another configuration ({details})")
    return state
