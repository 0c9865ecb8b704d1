"""Zero-shot evaluation of a model on any --task, MATH / GSM8K (the built-in math task) by default, with serialized
generations.

    uv run scripts/eval_zero_shot.py --dataset data/gsm8k/test.jsonl --model smollm2-135m --limit 16
    uv run scripts/eval_zero_shot.py --task data/tasks/dates.py:task --model smollm2-135m --limit 16

Every task goes one way (alignment/tasks/evaluating.py): its evaluation rows (math: --dataset's test or validation
split, whole, in the --prompt template; a task of your own: its evaluation_rows, else its validation rows), --limit
of them, one response each, graded by its rewards. The summary holds the mean reward, each reward function's mean
(reward_<name>) and, for a task with categories, the mean reward per category (reward@<category>); where the rewards
grade a format and an answer (math's graders), the handouts' counts of format1_answer1, format1_answer0 and
format0_answer0, accuracy and format rate too, printed with --show-examples responses of each category.

Writes OUTPUT_DIR/generations.jsonl (one line per example) and OUTPUT_DIR/summary.json, each atomically.
"""

import json
import textwrap
from dataclasses import dataclass

import typer

from alignment.config import cli
from alignment.config.settings import setting, to_json
from alignment.evaluation import GradedRollout, category, summarize, task_summary
from alignment.run import generation
from alignment.tasks.evaluating import task_records
from alignment.tasks.settings import TaskSettings
from alignment.utils.atomic import atomic_write_json, atomic_write_jsonl

# what the console shows of a summary whose rewards grade a format and an answer (the handouts' categories)
COURSE_SHOWN = (
    "num_examples",
    "counts",
    "accuracy",
    "format_rate",
    "mean_response_tokens",
    "generated_tokens_per_s",
    "timings_s",
)


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
    """One response per evaluation row of --task, graded by its rewards; generations.jsonl, then summary.json."""
    evaluation = task_records(config)
    records, timings = evaluation.records, evaluation.timings
    summary = task_summary(records, timings, evaluation.task.categories)
    if evaluation.answer_graded:  # the handouts' categories first, as the course's summary has them
        summary = summarize(records, timings) | summary
    summary |= {"backend": evaluation.backend, "config": to_json(config)}
    atomic_write_jsonl(evaluation.output_dir / "generations.jsonl", (r.to_json() for r in records))
    atomic_write_json(evaluation.output_dir / "summary.json", summary)  # last: its presence means the run finished
    shown = COURSE_SHOWN if evaluation.answer_graded else [k for k in summary if k not in ("backend", "config")]
    typer.echo(json.dumps({k: summary[k] for k in shown}, indent=2))
    if evaluation.answer_graded:
        show_examples(records, config.show_examples)
    return summary


app = cli.config_command(
    EvalConfig,
    run,
    "Generate one response per example, grade it, and write generations.jsonl and summary.json.",
)

if __name__ == "__main__":
    app()
