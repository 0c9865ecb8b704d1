"""pass@N and Best@N from one generation of N_max samples per problem.

    uv run scripts/best_of_n.py --dataset data/gsm8k/test.jsonl --model smollm2-135m --limit 8 --n-max 4 --ns
    1 --ns 2 --ns 4

pass@N: the unbiased estimator 1 - C(n-c, N)/C(n, N). Best@N: a verifier-free pick, the sample with the
highest mean token log-prob among N, graded; reported as its exact expectation over the N-subsets of the
n samples (see alignment.pass_at_k.best_at_k), so Best@1 = pass@1 on the same samples.
With --zero-shot-generations (eval_zero_shot's generations.jsonl on the same questions), N=1 is that run's
accuracy instead, as PKU's handout asks ("use the generations from your zero-shot script for N=1"); its responses
are graded again here, with this run's --grader.
With a --task other than math, a sample is a success when its reward reaches --success-reward, and the summary adds
the task's mean reward per reward function (reward_<name>) and per category (reward@<category>) over every sample.
Writes generations.jsonl (every sample), summary.json and best_of_n.png in --output-dir.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import typer  # noqa: E402

from alignment.config import cli  # noqa: E402
from alignment.config.settings import override, setting, to_json  # noqa: E402
from alignment.evaluation import GradedRollout, generate_and_grade, task_summary  # noqa: E402
from alignment.grading.parallel import ParallelGrader  # noqa: E402
from alignment.pass_at_k import best_at_k, pass_at_k  # noqa: E402
from alignment.prompts import format_prompt  # noqa: E402
from alignment.rollout.backends import resolve_backend  # noqa: E402
from alignment.run import generation  # noqa: E402
from alignment.tasks.evaluating import task_records  # noqa: E402
from alignment.tasks.settings import TaskSettings  # noqa: E402
from alignment.utils.atomic import atomic_write_json, atomic_write_jsonl  # noqa: E402


@dataclass
class BestOfNConfig(generation.GenerationConfig, TaskSettings):
    output_dir: Path = override(generation.GenerationConfig, "output_dir", Path("outputs/best_of_n"))
    n_max: int = setting(16, "Samples generated per problem (one generation call).")
    ns: list[int] = setting([1, 4, 8, 16], "N values to report (repeatable); each must be <= --n-max.")
    zero_shot_generations: Path | None = setting(
        None,
        "generations.jsonl of scripts/eval_zero_shot.py on the same --dataset, --limit and --prompt: N=1 of both "
        "curves is its accuracy (regraded here) instead of an estimate from the --n-max samples.",
    )
    success_reward: float = setting(
        1.0, "A --task other than math: a sample counts as solved when its reward is at least this."
    )


def solved_answer(record: GradedRollout) -> bool:
    return record.answer_reward > 0


def curves(
    records: list[GradedRollout], n_max: int, ns: list[int], solved: Callable[[GradedRollout], bool] = solved_answer
) -> dict[str, dict[int, float]]:
    """Mean over problems of pass@N and Best@N; records are problem-major, n_max per problem; `solved` says which
    samples count (math: a correct answer)."""
    groups = [records[i : i + n_max] for i in range(0, len(records), n_max)]
    result: dict[str, dict[int, float]] = {"pass_at": {}, "best_at": {}}
    for n in ns:
        result["pass_at"][n] = sum(pass_at_k(n_max, sum(map(solved, g)), n) for g in groups) / len(groups)
        result["best_at"][n] = sum(
            best_at_k([solved(r) for r in g], [r.mean_logprob for r in g], n) for g in groups
        ) / len(groups)
    return result


def zero_shot_rows(path: Path, prompts: list[str]) -> list[dict]:
    """A zero-shot run's one response per question; its questions must be these, in order."""
    if not path.is_file():
        raise cli.bad_flag("--zero-shot-generations", f"no such file: {path}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if [row.get("prompt") for row in rows] != prompts:
        raise cli.bad_flag(
            "--zero-shot-generations",
            f"{path} holds {len(rows)} responses to other prompts than these {len(prompts)} (same --dataset, "
            "--limit and --prompt as the zero-shot run?)",
        )
    return rows


def accuracy(rows: list[dict], reward_fn, workers: int | None) -> float:
    with ParallelGrader(reward_fn, workers) as grader:
        scores = grader([row["response"] for row in rows], [row["ground_truth"] for row in rows])
    return sum(s["answer_reward"] for s in scores) / len(scores)


def plot(result: dict[str, dict[int, float]], path: Path, title: str) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for key, label in (("pass_at", "pass@N (oracle verifier)"), ("best_at", "Best@N (max mean log-prob)")):
        ns = sorted(result[key])
        ax.plot(ns, [result[key][n] for n in ns], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(result["pass_at"]), [str(n) for n in sorted(result["pass_at"])])
    ax.set_xlabel("N samples")
    ax.set_ylabel("accuracy")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(config: BestOfNConfig) -> dict:
    if config.n_max < 1:
        raise cli.bad_flag("--n-max", f"must be >= 1, got {config.n_max}")
    too_big = [n for n in config.ns if not 1 <= n <= config.n_max]
    if too_big:
        raise cli.bad_flag("--ns", f"every N must be in [1, --n-max={config.n_max}]; got {too_big}")
    if config.task != "math":
        return run_task(config)
    zero_shot = None
    if config.zero_shot_generations is not None:  # checked before any model loads
        examples, template, _ = generation.load_task(config.dataset, config.prompt, config.limit, config.grader)
        prompts = [format_prompt(template, e.question) for e in examples]
        zero_shot = zero_shot_rows(config.zero_shot_generations, prompts)
    setup = generation.set_up(config)
    with ParallelGrader(setup.reward_fn, config.grader_workers) as grader:
        records, timings = generate_and_grade(
            setup.engine,
            [e.question for e in setup.examples],
            [e.answer for e in setup.examples],
            setup.template,
            grader,
            setup.sampling,
            n=config.n_max,
        )
    result = curves(records, config.n_max, sorted(set(config.ns)))
    if zero_shot is not None and 1 in result["pass_at"]:
        result["pass_at"][1] = result["best_at"][1] = accuracy(zero_shot, setup.reward_fn, config.grader_workers)
    tokens = sum(r.num_tokens for r in records)
    summary = {
        "num_problems": len(setup.examples),
        "n_max": config.n_max,
        "pass_at": result["pass_at"],
        "best_at": result["best_at"],
        "n1_from": str(config.zero_shot_generations or f"the {config.n_max} samples"),
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / timings["generation_s"] if timings["generation_s"] > 0 else None,
        "timings_s": timings,
        "backend": setup.backend,
        "config": to_json(config),
    }
    rows = [r.to_json() | {"problem": i // config.n_max, "sample": i % config.n_max} for i, r in enumerate(records)]
    atomic_write_jsonl(setup.output_dir / "generations.jsonl", rows)
    title = f"{config.model} on {Path(config.dataset).name}, {len(setup.examples)} problems"
    plot(result, setup.output_dir / "best_of_n.png", title)
    atomic_write_json(setup.output_dir / "summary.json", summary)  # last: its presence means the run finished
    shown = ("num_problems", "n_max", "pass_at", "best_at", "generated_tokens_per_s", "timings_s")
    typer.echo(json.dumps({k: summary[k] for k in shown}, indent=2))
    return summary


def run_task(config: BestOfNConfig) -> dict:
    """pass@N and Best@N on --task's validation rows, a sample solved when its reward reaches --success-reward."""
    if config.zero_shot_generations is not None:
        raise cli.bad_flag("--zero-shot-generations", "is for --task math (an eval_zero_shot run on --dataset)")
    task, records, timings, output_dir = task_records(config, config.n_max)
    result = curves(records, config.n_max, sorted(set(config.ns)), lambda r: r.reward >= config.success_reward)
    summary = {
        "num_problems": len(task.questions),
        "n_max": config.n_max,
        "pass_at": result["pass_at"],
        "best_at": result["best_at"],
        "samples": task_summary(records, timings, task.categories),
        "backend": resolve_backend(config.backend),
        "config": to_json(config),
    }
    rows = [r.to_json() | {"problem": i // config.n_max, "sample": i % config.n_max} for i, r in enumerate(records)]
    atomic_write_jsonl(output_dir / "generations.jsonl", rows)
    plot(result, output_dir / "best_of_n.png", f"{config.model} on {task.name}, {len(task.questions)} problems")
    atomic_write_json(output_dir / "summary.json", summary)  # last: its presence means the run finished
    typer.echo(json.dumps({k: summary[k] for k in ("num_problems", "n_max", "pass_at", "best_at")}, indent=2))
    return summary


app = cli.config_command(
    BestOfNConfig, run, "Sample N_max responses per problem, grade them all, and report pass@N and Best@N."
)

if __name__ == "__main__":
    app()
