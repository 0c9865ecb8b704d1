"""Expert iteration (CS336 A5 §5): sample G answers to Db questions, keep the correct ones, SFT on them, repeat.

    uv run scripts/expert_iteration.py --config configs/ei_gsm8k_demo.toml          # 2 steps after the SFT demo
    uv run scripts/expert_iteration.py --model outputs/sft/policy --dataset math --questions-per-step 1024
    uv run scripts/expert_iteration.py --resume outputs/expert_iteration             # continue a stopped run

Every field of alignment.sft_config.EIConfig is a flag; --model takes any HF folder, including the policy/ folder
written by scripts/train_sft.py. Writes metrics.jsonl (one row per EI step: kept fraction, loss, entropy; and
the held-out summaries), rollouts.jsonl, checkpoint/, policy/ and plots/ to --output-dir.
"""

import inspect
from pathlib import Path
from typing import Any

import typer

from alignment.expert_iteration import expert_iteration
from alignment.sft_config import EIConfig, help_texts
from scripts.train_grpo import command_parameters, settings
from scripts.train_sft import report

FIELDS = set(help_texts(EIConfig))


def main(ctx: typer.Context, config: Path | None = None, resume: Path | None = None, **flags: Any) -> None:
    run = EIConfig(**settings(ctx, config, resume, flags, FIELDS))
    try:
        expert_iteration(run, resume=resume is not None)
    except (ValueError, FileNotFoundError) as err:
        raise typer.BadParameter(str(err)) from None
    report(run.output_dir)


main.__signature__ = inspect.Signature(command_parameters(EIConfig, help_texts(EIConfig)))  # type: ignore[attr-defined]
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command(help="Expert iteration with held-out evaluation (see the module docstring).")(main)

if __name__ == "__main__":
    app()
