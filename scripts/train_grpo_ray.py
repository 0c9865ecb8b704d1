"""Train a policy with GRPO on Ray, scheduling generation and learning with one of six strategies.

    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy colocated-sync
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy colocated-multistep --multistep-k 4
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy colocated-k-batches \
        --multistep-k 4 --checkpoint-every 8
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy disaggregated-one-behind
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy replay-buffer --buffer-policy uniform
    uv run scripts/train_grpo_ray.py --config configs/keyword_demo.toml --strategy replay-buffer --learner-processes 2
    uv run scripts/train_grpo_ray.py --config configs/keyword_async.toml              # async, --max-staleness 2
    uv run scripts/train_grpo_ray.py --resume outputs/keyword_async                   # continue a stopped run

Every flag of scripts/train_grpo.py is here too, plus the Ray ones (--strategy, --multistep-k, --buffer-capacity,
--buffer-policy, --weight-sync, --ray-timeout-s, --ray-address, --learner-processes, --actor-restarts: lost generators
and scorers replaced mid-run) and the async strategy's (--max-staleness, --partial-rollouts, --inflight-kv,
--off-policy-objective, --generators).
Writes metrics.jsonl (with per-phase seconds, samples/s, device-hours, version lag and staleness), rollouts.jsonl,
checkpoint/ and plots to --output-dir, and prints the mean seconds per GRPO step of each phase; a run that diverges
(NaN, or a loss past --divergence-loss-bound) leaves diverged.json there.
"""

import typer

from alignment.config.cli import run_command, script_help
from alignment.envs.base import EnvironmentUnavailable
from alignment.ray.cluster import ActorFailure
from alignment.ray.config import RayGRPOConfig
from alignment.ray.driver import train_grpo_ray
from scripts.train_grpo import report


def run(config: RayGRPOConfig, resume: bool) -> None:
    try:
        train_grpo_ray(config, resume=resume)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    except ActorFailure as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from None
    except EnvironmentUnavailable as err:  # the driver's own, or a generator's (raised there, so wrapped by Ray)
        typer.echo(f"stopped: {getattr(err, 'cause', err)}", err=True)
        raise typer.Exit(1) from None
    except FloatingPointError as err:  # diverged (raised in the learner, so wrapped by Ray): see diverged.json
        cause = getattr(err, "cause", err)
        typer.echo(f"diverged: {cause} (recorded in {config.output_dir / 'diverged.json'})", err=True)
        raise typer.Exit(1) from None
    report(config.output_dir)


SUMMARY = script_help(__doc__, "scripts/train_grpo_ray.py")
app = run_command(RayGRPOConfig, run, SUMMARY)

if __name__ == "__main__":
    app()
