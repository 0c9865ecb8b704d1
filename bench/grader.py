"""Grader accuracy on GSM8K gold answers, its time on 1,000 responses, and on adversarial answers.

    uv run python bench/grader.py [--data data/gsm8k/test.jsonl]

Two workloads of 1,000 r1_zero responses each: GSM8K gold answers fed back as <answer>N</answer> (the string
fast path), and a mix in which a third need the symbolic checker (LaTeX forms of the answer), a third are
wrong, and a third are badly formatted; the mix is graded once in this process, once by a worker pool, and once as
`--task math` grades a run's responses (through the task's rewards, in the pool at every batch size).
Then each adversarial answer is graded against "72" (r1_zero) and "x+1" (grade_answer), and sympy's own
deadline is hit once (a kill) to time the recovery: the next check, answered by a fresh fork.
"""

import platform
import time
from pathlib import Path
from types import SimpleNamespace

import typer

from alignment.data.math_datasets import load_math_examples
from alignment.grader import grade_answer, r1_zero_reward_fn
from alignment.grading.parallel import ParallelGrader
from alignment.grading.symbolic import symbolically_equal
from alignment.tasks import builtin
from alignment.tasks.loading import reward_set

ADVERSARIAL = [
    "9^{9^{9^{9^{9}}}}",
    "\\frac{" * 5000,
    "10^{10^{10}}",
    "1" * 1_000_000,
    "9^{9^{9^{9}}}",
    "9^{9^{9}}",
    "2^{10^{7}}",
    "10^" + "1" * 100,
    "(" * 20000 + ")" * 20000,
    "\\sqrt{" * 3000 + "}" * 3000,
    "1e99999999",
    "10000!!",
    "(10^{6})!",
    "\\binom{10^{9}}{10^{8}}",
    "{9^9}^{9^{9}}",
    "(x+1)^{5000}",
    "(1+\\sqrt{2})^{1000}",
    "e^{e^{e^{e^{e}}}}",
    "\\pi^{\\pi^{\\pi^{\\pi}}}",
    "\\sin(10^{100})",
    "\\sum_{k=1}^{10^{9}} k",
]


def timed(function, *args, **kwargs) -> tuple[object, float]:
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def adversarial() -> None:
    """Seconds per adversarial call (verdicts must all be 0), and the cost of a deadline kill plus recovery."""
    symbolically_equal("1", "1")  # start the fork server outside the timing
    worst = 0.0
    for answer in ADVERSARIAL:
        reward, r1_s = timed(r1_zero_reward_fn, f"x </think> <answer>{answer}</answer>", "72")
        verdict, grade_s = timed(grade_answer, answer, "x+1")
        worst = max(worst, r1_s, grade_s)
        print(
            f"adversarial {answer[:24]!r:30} reward {reward['reward']:.0f} in {r1_s:.3f}s; vs x+1 {verdict} in "
            f"{grade_s:.3f}s"
        )
    print(f"worst adversarial call: {worst:.3f}s")
    for deadline in (0.5, 2.0):
        killed, kill_s = timed(
            symbolically_equal, "7", "10^{10^{10}}", timeout_s=deadline
        )  # sympy itself, past the guard
        equal, next_s = timed(symbolically_equal, "x^2+2x+1", "(x+1)^2")
        print(
            f"sympy deadline {deadline}s: {killed} in {kill_s:.3f}s; next check {equal} in {next_s:.3f}s (a fresh fork)"
        )


def task_rewards(pairs: list[tuple[str, str]], workers: int) -> None:
    """The same responses graded as `--task math` grades a run's: its rewards (a RewardSet, sent to the workers by
    name and rebuilt there) over rows holding the answers, in the pool at every batch size; the workers' start timed
    apart."""
    settings = SimpleNamespace(prompt="r1_zero", grader="course")
    rewards = reward_set("math", builtin.math(settings), settings)
    responses, rows = [r for r, _ in pairs], [{"answer": t} for _, t in pairs]
    with ParallelGrader(rewards, workers) as grader:
        start_s = timed(grader, responses, rows)[1]  # the workers and their symbolic checkers start: not timed
        scores, seconds = timed(grader, responses, rows)
        small = min(timed(grader, responses[:8], rows[:8])[1] for _ in range(5))
    mean = sum(s["reward"] for s in scores) / len(scores)
    print(
        f"mixed, --task math's rewards in {workers} worker processes: {len(pairs)} responses in {seconds:.2f}s, mean "
        f"reward {mean:.3f} (first call, the workers starting: {start_s:.2f}s); 8 responses in {1000 * small:.1f} ms"
    )


def mixed_responses(examples: list, n: int) -> list[tuple[str, str]]:
    pairs = []
    for i in range(n):
        truth = examples[i % len(examples)].answer
        kind = i % 3
        if kind == 0:  # same value in a form only the symbolic path recognises
            pairs.append((f"x </think> <answer>\\frac{{{int(truth) * 3}}}{{3}} + 0 \\cdot \\pi</answer>", truth))
        elif kind == 1:
            pairs.append((f"x </think> <answer>{int(truth) + 1}</answer>", truth))
        else:
            pairs.append((f"The answer is {truth}.", truth))
    return pairs


def main(data: Path = Path("data/gsm8k/test.jsonl"), n: int = 1000, workers: int = 2) -> None:
    examples = load_math_examples(str(data), kind="gsm8k")
    raw_finals = [e.solution.rsplit("####", 1)[1].strip() for e in examples]
    start = time.perf_counter()
    correct = sum(
        r1_zero_reward_fn(f"x </think> <answer>{raw}</answer>", e.answer)["reward"]
        for raw, e in zip(raw_finals, examples)
    )
    gold_s = time.perf_counter() - start
    print(
        f"gold answers graded correct: {correct:.0f}/{len(examples)} ({100 * correct / len(examples):.1f}%) in "
        f"{gold_s:.2f}s"
    )

    gold = [(f"x </think> <answer>{raw}</answer>", e.answer) for raw, e in zip(raw_finals, examples)][:n]
    r1_zero_reward_fn(*mixed_responses(examples, 1)[0])  # start the symbolic worker outside the timing
    for name, pairs in (("gold", gold), ("mixed", mixed_responses(examples, n))):
        start = time.perf_counter()
        rewards = [r1_zero_reward_fn(response, truth)["reward"] for response, truth in pairs]
        seconds = time.perf_counter() - start
        print(
            f"{name}: {len(pairs)} responses in {seconds:.2f}s ({1000 * seconds / len(pairs):.2f} ms each), mean "
            f"reward {sum(rewards) / len(rewards):.3f}"
        )
    mixed = mixed_responses(examples, n)
    with ParallelGrader(r1_zero_reward_fn, workers) as grader:
        grader([r for r, _ in mixed], [t for _, t in mixed])  # start the workers outside the timing
        start = time.perf_counter()
        scores = grader([r for r, _ in mixed], [t for _, t in mixed])
        seconds = time.perf_counter() - start
    mean = sum(s["reward"] for s in scores) / n
    print(f"mixed, {workers} worker processes: {n} responses in {seconds:.2f}s, mean reward {mean:.3f}")
    task_rewards(mixed, workers)
    adversarial()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")


if __name__ == "__main__":
    typer.run(main)
