"""Plot runs: one or more metrics.jsonl files (or wandb CSV exports) into PNGs, one figure per metric.

    uv run scripts/plot.py outputs/run_a/metrics.jsonl outputs/run_b/metrics.jsonl --label clip --label no-clip

Writes, to --output-dir: eval_reward_vs_step.png, eval_reward_vs_time.png, token_entropy.png, grad_norm.png,
response_length.png, kl.png, clip_fraction.png, train_reward.png, time_breakdown.png, time_per_step.png (mean
seconds per step of each phase), kl_and_validation.png, kl_sum_and_validation.png (UW's Eq. 8 beside validation
reward), and one phase_times_<label>.png per run. A figure whose metric no run has is skipped. The step axis is the
runs' own (GRPO step, SFT step or EI step, as each run folder's settings.json says; `step` for runs of different
kinds or a wandb export). Runs in folders named <arm>_seed<k> (as scripts/sweep.py writes them) are drawn per arm: the
mean over its seeds with a 95% band (mean +- 1.96 s / sqrt(n)), each seed faint beneath.
"""

from pathlib import Path

import typer

from alignment.experiments.plotting import plot_runs


def main(
    runs: list[Path] = typer.Argument(..., help="metrics.jsonl files or wandb CSV exports."),
    label: list[str] = typer.Option([], help="A label per run, in order (default: each file's folder name)."),
    output_dir: Path = typer.Option(Path("outputs/plots"), help="Where the PNGs go."),
) -> None:
    """Turn runs' metrics into PNG figures, several runs per figure."""
    try:
        written = plot_runs(runs, label, output_dir)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    for path in written:
        typer.echo(str(path))


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
app.command(context_settings={"max_content_width": 80})(main)

if __name__ == "__main__":
    app()
