"""Train a policy with GRPO on Ray, scheduling generation and learning with one of four strategies.

    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy colocated-sync --output-dir outputs/sync
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy colocated-multistep --multistep-k 4
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy disaggregated-one-behind
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy replay-buffer --buffer-policy uniform
    uv run scripts/train_grpo_ray.py --resume outputs/sync --strategy colocated-sync ...   # the same settings again

Every flag of scripts/train_grpo.py is here too, plus the Ray ones (--strategy, --multistep-k, --buffer-capacity,
--buffer-policy, --weight-sync, --ray-timeout-s, --ray-address). Writes metrics.jsonl (with per-phase seconds,
samples/s, device-hours, version lag and staleness), rollouts.jsonl, checkpoint/ and plots to --output-dir.
"""

import inspect
from dataclasses import fields
from pathlib import Path
from typing import Any

import typer

from alignment.ray_cluster import ActorFailure
from alignment.ray_config import RayGRPOConfig
from alignment.ray_strategies import train_grpo_ray
from scripts.train_grpo import HELP, command_parameters, report, settings

RAY_HELP = HELP | {
    "strategy": "colocated-sync, colocated-multistep, disaggregated-one-behind or replay-buffer.",
    "multistep_k": "colocated-multistep: GRPO-Clip optimizer steps per rollout batch (e.g. 1, 2, 4, 8).",
    "buffer_capacity": "replay-buffer: groups (one question's --group-size rollouts) the buffer keeps.",
    "buffer_policy": "replay-buffer: fifo (oldest, used once), uniform (random, kept) or newest (latest, kept).",
    "weight_sync": "Learner -> generator transport: object_store, nccl (each actor on its own GPU) or gloo (CPU).",
    "ray_timeout_s": "Longest wait for any Ray call; past it the run stops with an error and a checkpoint.",
    "ray_address": "Address of a running Ray cluster (default: start a local one).",
}
RAY_FIELDS = {f.name for f in fields(RayGRPOConfig)}


def main(ctx: typer.Context, config: Path | None = None, resume: Path | None = None, **flags: Any) -> None:
    run = RayGRPOConfig(**settings(ctx, config, resume, flags, RAY_FIELDS))
    try:
        train_grpo_ray(run, resume=resume is not None)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    except ActorFailure as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from None
    report(run.output_dir)


main.__signature__ = inspect.Signature(command_parameters(RayGRPOConfig, RAY_HELP))  # type: ignore[attr-defined]
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command(help="Train a policy with GRPO on Ray (see the module docstring).")(main)

if __name__ == "__main__":
    app()
