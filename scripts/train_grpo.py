"""Train a policy with GRPO.

    uv run scripts/train_grpo.py --loss-type grpo_clip --epochs-per-rollout-batch 2
    uv run scripts/train_grpo.py --config my_run.toml --learning-rate 2e-5     # flags override the file
    uv run scripts/train_grpo.py --resume outputs/grpo                          # continue a stopped run
    uv run scripts/train_grpo.py --config configs/cs336_leaderboard.toml        # 4 hours, then all 5,000 validated
    uv run scripts/train_grpo.py --config configs/grpo_handout_starter.toml --plan-memory 1x24   # fits one GPU?
    uv run scripts/train_grpo.py --model Qwen/Qwen2.5-7B --plan-memory 4x80 --plan-processes 4   # sharded over 4?
    uv run scripts/eval_zero_shot.py --model outputs/grpo/policy ...            # use what it trained
    uv run torchrun --nproc-per-node 2 scripts/train_grpo.py ...               # one policy sharded over 2 processes

Every field of alignment.grpo.config.GRPOConfig is a flag (`--n-grpo-steps`, `--no-use-std-normalization`,
...); defaults are the handouts' starter values. The run folder (--output-dir) gets settings.json,
metrics.jsonl, rollouts.jsonl, checkpoint/, plots/ and, at the end, policy/: the trained model as a standard
model folder that every script's --model accepts. Under torchrun the processes share one policy, sharded with
FSDP2 (alignment/distributed/sharding.py); rank 0 writes the run folder and prints. With --warm-start-sft-steps N,
N SFT steps on --dataset's worked solutions run first and GRPO starts from their policy (alignment/sft_run.py's
`warm_start`).
"""

import inspect
import os
from pathlib import Path

import typer

from alignment.config.cli import run_command, script_help
from alignment.envs.base import EnvironmentUnavailable
from alignment.experiments.plotting import describe_held_out, describe_time_per_step, plot_runs, read_rows
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo_run import train_grpo
from alignment.run.memory_plan import Machine, grpo_workload, model_shape
from alignment.run.memory_plan import report as memory_report
from alignment.run.setup import check_sharded
from alignment.sft_run import warm_start


def run(config: GRPOConfig, resume: bool, plan_memory: str | None = None, plan_processes: int = 1) -> None:
    if plan_memory is not None:
        raise typer.Exit(print_memory_plan(config, plan_memory, plan_processes))
    try:
        validate(config)
        config, warm_line = (config, None) if resume else warm_start(config)
        train_grpo(config, resume=resume)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    except EnvironmentUnavailable as err:  # an environment's service gone: no update was made from that batch
        typer.echo(f"stopped: {err}", err=True)
        raise typer.Exit(1) from None
    except FloatingPointError as err:  # diverged: diverged.json in the run folder says at which step
        typer.echo(f"diverged: {err} (recorded in {config.output_dir / 'diverged.json'})", err=True)
        raise typer.Exit(1) from None
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 reports for all
        if warm_line is not None:
            typer.echo(warm_line)
        report(config.output_dir)


def print_memory_plan(config: GRPOConfig, machine_text: str, processes: int = 1) -> int:
    """Print the run's memory plan on a machine of GPUSxGIB, its learner sharded over `processes` of the GPUs; 0 when
    it fits, 1 when not. Reads config.json only."""
    try:
        validate(config)
        machine = Machine.parse(machine_text)
        if processes < 1:
            raise ValueError(f"--plan-processes must be >= 1, got {processes}")
        if processes > 1:
            check_sharded(config)  # what torchrun would refuse
        shape = model_shape(config.model)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    try:
        result, text = memory_report(shape, grpo_workload(config, shape, processes=processes), machine)
    except ValueError as err:  # more processes than GPUs
        raise typer.BadParameter(f"--plan-processes {processes}: {err}") from None
    typer.echo(text)
    return 0 if result.fits else 1


def report(output_dir: Path) -> None:
    """Print how held-out reward moved over the whole run and the mean seconds per step of each phase, and write its
    plots."""
    metrics = output_dir / "metrics.jsonl"
    rows = read_rows(metrics)
    evals = [row for row in rows if "eval_reward" in row]
    if evals:
        typer.echo(describe_held_out(evals[0], evals[-1]))
    timing = describe_time_per_step(rows)
    if timing is not None:
        typer.echo(timing)
    for path in plot_runs([metrics], [output_dir.name], output_dir / "plots"):
        typer.echo(f"plot: {path}")
    typer.echo(f"trained policy: {output_dir / 'policy'}")


PLAN_MEMORY = inspect.Parameter(
    "plan_memory",
    inspect.Parameter.KEYWORD_ONLY,
    annotation=str | None,
    default=typer.Option(
        None,
        metavar="GPUSxGIB",
        help="Print the memory plan of these settings on a machine of GPUS GPUs of GIB GiB each "
        "(e.g. 1x24, 2x80) and exit: 0 if it fits, 1 if not, with the flags that would make it fit. Reads only the "
        "model's config.json; runs on any machine.",
    ),
)
PLAN_PROCESSES = inspect.Parameter(
    "plan_processes",
    inspect.Parameter.KEYWORD_ONLY,
    annotation=int,
    default=typer.Option(
        1,
        metavar="N",
        help="With --plan-memory: plan a learner sharded over N processes, one GPU each, as `torchrun "
        "--nproc-per-node N` runs it (weights, gradients, AdamW states and reference divided by N; rollouts by hf). "
        "A GPU run under torchrun plans for its own process count.",
    ),
)
app = run_command(
    GRPOConfig,
    run,
    script_help(__doc__, "scripts/train_grpo.py"),
    [PLAN_MEMORY, PLAN_PROCESSES],
)

if __name__ == "__main__":
    app()
