"""Zero-shot evaluation of a model on MATH / GSM8K, or on any --task's validation rows, with serialized generations.

    uv run scripts/eval_zero_shot.py --dataset data/gsm8k/test.jsonl --model smollm2-135m --limit 16
    uv run scripts/eval_zero_shot.py --task data/tasks/dates.py:task --model smollm2-135m --limit 16

With a --task other than math the summary holds its mean reward, each reward function's mean (reward_<name>) and,
for a task with categories, the mean reward per category (reward@<category>).

Writes OUTPUT_DIR/generations.jsonl (one line per example) and OUTPUT_DIR/summary.json, each atomically.
"""

import json
import textwrap
from dataclasses import dataclass

import typer

from alignment.config import cli
from alignment.config.settings import setting, to_json
from alignment.evaluation import GradedRollout, category, evaluate_vllm, task_summary
from alignment.prompts import format_prompt
from alignment.run import generation
from alignment.tasks.evaluating import task_records
from alignment.tasks.settings import TaskSettings
from alignment.utils.atomic import atomic_write_json, atomic_write_jsonl


@dataclass
class EvalConfig(generation.GenerationConfig, TaskSettings):
    show_examples: int = setting(
        2,
        "Responses printed per category (format1_answer1, format1_answer0, format0_answer0) after the summary, "
        "shortened; generations.jsonl holds every one. The handouts' problem (b) reads at least 10 of each.",
    )


def show_examples(records: list[GradedRollout], per_category: int) -> None:
    for name in ("format1_answer1", "format1_answer0", "format0_answer0"):
        for r in [r for r in records if category(r) == name][:per_category]:
            response = textwrap.shorten(r.response.replace("\n", " "), 240)
            typer.echo(f"[{name}] truth={r.ground_truth!r} response={response!r}")


def run(config: EvalConfig) -> dict:
    if config.task != "math":
        return run_task(config)
    setup = generation.set_up(config)
    records, summary = evaluate_vllm(
        setup.engine,
        setup.reward_fn,
        [format_prompt(setup.template, e.question) for e in setup.examples],
        setup.sampling,
        [e.answer for e in setup.examples],
        output_path=setup.output_dir / "generations.jsonl",
        grader_workers=config.grader_workers,
    )
    summary |= {"backend": setup.backend, "config": to_json(config)}
    atomic_write_json(setup.output_dir / "summary.json", summary)  # last: its presence means the run finished
    shown = (
        "num_examples",
        "counts",
        "accuracy",
        "format_rate",
        "mean_response_tokens",
        "generated_tokens_per_s",
        "timings_s",
    )
    typer.echo(json.dumps({k: summary[k] for k in shown}, indent=2))
    show_examples(records, config.show_examples)
    return summary


def run_task(config: EvalConfig) -> dict:
    """One response per validation row of --task, graded by its rewards; summary.json per reward and category."""
    task, records, timings, output_dir = task_records(config)
    atomic_write_jsonl(output_dir / "generations.jsonl", (r.to_json() for r in records))
    summary = task_summary(records, timings, task.categories) | {"config": to_json(config)}
    atomic_write_json(output_dir / "summary.json", summary)  # last: its presence means the run finished
    typer.echo(json.dumps({k: v for k, v in summary.items() if k != "config"}, indent=2))
    return summary


app = cli.config_command(
    EvalConfig,
    run,
    "Generate one response per example, grade it, and write generations.jsonl and summary.json.",
)

if __name__ == "__main__":
    app()
