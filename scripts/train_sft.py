"""Supervised fine-tuning on prompt/response examples (CS336 A5 §4), evaluated on held-out questions.

    uv run scripts/train_sft.py --config configs/sft_gsm8k_demo.toml                  # the CPU demo
    uv run scripts/train_sft.py --n-examples 512 --filter-correct    # the handout's data/MATH/sft.jsonl, 512 at random
    uv run scripts/train_sft.py --resume outputs/sft                                  # continue a stopped run
    uv run torchrun --nproc-per-node 2 scripts/train_sft.py --config ...              # one policy sharded over 2
    processes

Every field of alignment.supervised.config.SFTConfig is a flag. By default it trains on the handout's MATH reasoning
traces (data/MATH/sft.jsonl) and validates on MATH/validation.jsonl beside them; --dataset's format (prompt/response
traces or GSM8K question/answer records) is read from its first record. Writes metrics.jsonl (training rows and
evaluation summaries), rollouts.jsonl (every held-out generation with rewards and entropy), checkpoint/, policy/ (an HF
folder: --model of a later run or of scripts/expert_iteration.py) and plots/ to --output-dir. Under torchrun the
processes share one policy, sharded with FSDP2 (alignment/distributed/sharding.py); rank 0 writes the run folder
and prints.
"""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from alignment.config.cli import run_command, script_help
from alignment.experiments.plotting import plot_sft_run, read_rows
from alignment.sft_run import train_sft
from alignment.supervised.config import SFTConfig, SFTTrainingSettings


def report(output_dir: Path) -> None:
    """Print how held-out rewards moved, and write the plots."""
    evals = [row for row in read_rows(output_dir / "metrics.jsonl") if "eval_reward" in row]
    if evals:
        first, last = evals[0], evals[-1]
        for key in ("eval_format_reward", "eval_answer_reward", "eval_token_entropy"):
            typer.echo(
                f"{key}: {first[key]:.3f} at step {first['grpo_step']} -> {last[key]:.3f} at step {last['grpo_step']}"
            )
    for path in plot_sft_run(output_dir):
        typer.echo(f"plot: {path}")


def make_app(config_cls: type[SFTTrainingSettings], train: Callable[..., Any], summary: str) -> typer.Typer:
    """--config, --resume and one flag per field of `config_cls`; runs train(config, resume=...), then report()."""

    def run(config: SFTTrainingSettings, resume: bool) -> None:
        try:
            train(config, resume=resume)
        except (ValueError, FileNotFoundError) as err:
            raise typer.BadParameter(str(err)) from None
        if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0 reports for all
            report(config.output_dir)

    return run_command(config_cls, run, summary)


SUMMARY = script_help(__doc__, "scripts/train_sft.py")
app = make_app(SFTConfig, train_sft, SUMMARY)

if __name__ == "__main__":
    app()
