"""pass@N and Best@N from one generation of N_max samples per problem, on any --task (math by default).

    uv run scripts/best_of_n.py --dataset data/gsm8k/test.jsonl --model smollm2-135m --limit 8 --n-max 4 --ns
    1 --ns 2 --ns 4

pass@N: the unbiased estimator 1 - C(n-c, N)/C(n, N). Best@N: a verifier-free pick, the sample with the
highest mean token log-prob among N, graded; reported as its exact expectation over the N-subsets of the
n samples (see alignment.pass_at_k.best_at_k), so Best@1 = pass@1 on the same samples.
The problems are the task's evaluation rows, as scripts/eval_zero_shot.py takes them (alignment/tasks/evaluating.py:
math's --dataset split in the --prompt template, a task of your own its evaluation_rows, else its validation rows).
A sample is solved when it has a correct answer where the task's rewards grade one (math: answer_reward > 0), else
when its reward reaches --success-reward; a task other than math adds its mean reward per reward function
(reward_<name>) and per category (reward@<category>) over every sample (`samples`).
With --zero-shot-generations (eval_zero_shot's generations.jsonl on the same problems), N=1 is that run's
success rate instead, as PKU's handout asks ("use the generations from your zero-shot script for N=1"); its
responses are graded again here, by this run's rewards (math: its --grader) against the task's rows.
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
from alignment.data.task import Task  # noqa: E402
from alignment.evaluation import GradedRollout, task_summary  # noqa: E402
from alignment.grading.parallel import ParallelGrader  # noqa: E402
from alignment.pass_at_k import best_at_k, pass_at_k  # noqa: E402
from alignment.prompts import format_prompt  # noqa: E402
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
        "generations.jsonl of scripts/eval_zero_shot.py on the same problems (--task, --dataset, --limit, --prompt): "
        "N=1 of both curves is its success rate (regraded here) instead of an estimate from the --n-max samples.",
    )
    success_reward: float = setting(
        1.0,
        "A sample counts as solved when its reward is at least this, for a task whose rewards grade no answer (math's "
        "do: a sample with a correct answer is solved).",
    )


Solved = Callable[[float, float], bool]  # (reward, answer_reward) -> whether a sample solved its problem


def solved_rule(answer_graded: bool, success_reward: float) -> Solved:
    """A correct answer where the task's rewards grade one (math), else a reward of at least `success_reward`."""
    if answer_graded:
        return lambda reward, answer_reward: answer_reward > 0
    return lambda reward, answer_reward: reward >= success_reward


def curves(records: list[GradedRollout], n_max: int, ns: list[int], solved: Solved) -> dict[str, dict[int, float]]:
    """Mean over problems of pass@N and Best@N; records are problem-major, n_max per problem; `solved` says which
    samples count."""
    groups = [records[i : i + n_max] for i in range(0, len(records), n_max)]
    hits = [[solved(r.reward, r.answer_reward) for r in g] for g in groups]
    result: dict[str, dict[int, float]] = {"pass_at": {}, "best_at": {}}
    for n in ns:
        best = [best_at_k(h, [r.mean_logprob for r in g], n) for h, g in zip(hits, groups)]
        result["pass_at"][n] = sum(pass_at_k(n_max, sum(h), n) for h in hits) / len(groups)
        result["best_at"][n] = sum(best) / len(groups)
    return result


def zero_shot_rows(path: Path, prompts: list[str]) -> list[dict]:
    """A zero-shot run's one response per question; its questions must be these, in order."""
    if not path.is_file():
        raise cli.bad_flag("--zero-shot-generations", f"no such file: {path}")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if [row.get("prompt") for row in rows] != prompts:
        raise cli.bad_flag(
            "--zero-shot-generations",
            f"{path} holds {len(rows)} responses to other prompts than these {len(prompts)} (same --task, --dataset, "
            "--limit and --prompt as the zero-shot run?)",
        )
    return rows


def success_rate(rows: list[dict], task: Task, solved: Solved, workers: int | None) -> float:
    """The share of a zero-shot run's responses (one per question of `task`, in order) that solve their question,
    graded again by the task's rewards against its rows."""
    with ParallelGrader(task.reward_fn, workers) as grader:
        scores = grader([row["response"] for row in rows], task.truths)
    return sum(solved(s["reward"], s.get("answer_reward", 0.0)) for s in scores) / len(scores)


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
    zero_shot: list[dict] = []

    def read_zero_shot(task: Task) -> None:  # as soon as the prompts are known: for math, before any model loads
        if config.zero_shot_generations is not None:
            prompts = [format_prompt(task.template, q) for q in task.questions]
            zero_shot.extend(zero_shot_rows(config.zero_shot_generations, prompts))

    evaluation = task_records(config, config.n_max, read_zero_shot)
    task, records = evaluation.task, evaluation.records
    solved = solved_rule(evaluation.answer_graded, config.success_reward)
    result = curves(records, config.n_max, sorted(set(config.ns)), solved)
    if config.zero_shot_generations is not None and 1 in result["pass_at"]:
        result["pass_at"][1] = result["best_at"][1] = success_rate(zero_shot, task, solved, config.grader_workers)
    tokens, generation_s = sum(r.num_tokens for r in records), evaluation.timings["generation_s"]
    summary = {
        "num_problems": len(task.questions),
        "n_max": config.n_max,
        "pass_at": result["pass_at"],
        "best_at": result["best_at"],
        "n1_from": str(config.zero_shot_generations or f"the {config.n_max} samples"),
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / generation_s if generation_s > 0 else None,
        "timings_s": evaluation.timings,
        "samples": task_summary(records, evaluation.timings, task.categories),
        "backend": evaluation.backend,
        "config": to_json(config),
    }
    rows = [r.to_json() | {"problem": i // config.n_max, "sample": i % config.n_max} for i, r in enumerate(records)]
    output_dir = evaluation.output_dir
    atomic_write_jsonl(output_dir / "generations.jsonl", rows)
    source = Path(config.dataset).name if config.task == "math" else task.name  # math's rows are --dataset's
    plot(result, output_dir / "best_of_n.png", f"{config.model} on {source}, {len(task.questions)} problems")
    atomic_write_json(output_dir / "summary.json", summary)  # last: its presence means the run finished
    shown = ("num_problems", "n_max", "pass_at", "best_at", "generated_tokens_per_s", "timings_s")
    typer.echo(json.dumps({k: summary[k] for k in shown}, indent=2))
    return summary


app = cli.config_command(
    BestOfNConfig, run, "Sample N_max responses per problem, grade them all, and report pass@N and Best@N."
)

if __name__ == "__main__":
    app()
