"""Grader accuracy on GSM8K gold answers, and its time on 1,000 responses.

    uv run python bench/grader.py [--data ../shared/data/gsm8k/test.jsonl]

Two workloads of 1,000 r1_zero responses each: GSM8K gold answers fed back as <answer>N</answer> (the string
fast path), and a mix in which a third need the symbolic checker (LaTeX forms of the answer), a third are
wrong, and a third are badly formatted; the mix is graded once in this process and once by a worker pool.
"""

import platform
import time
from pathlib import Path

import typer

from alignment.data import load_math_examples
from alignment.grader import r1_zero_reward_fn
from alignment.parallel_grading import ParallelGrader


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


def main(data: Path = Path("../shared/data/gsm8k/test.jsonl"), n: int = 1000, workers: int = 2) -> None:
    examples = load_math_examples(str(data), kind="gsm8k")
    raw_finals = [e.solution.rsplit("####", 1)[1].strip() for e in examples]
    start = time.perf_counter()
    correct = sum(r1_zero_reward_fn(f"x </think> <answer>{raw}</answer>", e.answer)["reward"] for raw, e in zip(raw_finals, examples))
    gold_s = time.perf_counter() - start
    print(f"gold answers graded correct: {correct:.0f}/{len(examples)} ({100 * correct / len(examples):.1f}%) in {gold_s:.2f}s")

    gold = [(f"x </think> <answer>{raw}</answer>", e.answer) for raw, e in zip(raw_finals, examples)][:n]
    r1_zero_reward_fn(*mixed_responses(examples, 1)[0])  # start the symbolic worker outside the timing
    for name, pairs in (("gold", gold), ("mixed", mixed_responses(examples, n))):
        start = time.perf_counter()
        rewards = [r1_zero_reward_fn(response, truth)["reward"] for response, truth in pairs]
        seconds = time.perf_counter() - start
        print(f"{name}: {len(pairs)} responses in {seconds:.2f}s ({1000 * seconds / len(pairs):.2f} ms each), mean reward {sum(rewards) / len(rewards):.3f}")
    mixed = mixed_responses(examples, n)
    with ParallelGrader(r1_zero_reward_fn, workers) as grader:
        grader([r for r, _ in mixed], [t for _, t in mixed])  # start the workers outside the timing
        start = time.perf_counter()
        scores = grader([r for r, _ in mixed], [t for _, t in mixed])
        seconds = time.perf_counter() - start
    print(f"mixed, {workers} worker processes: {n} responses in {seconds:.2f}s, mean reward {sum(s['reward'] for s in scores) / n:.3f}")
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")


if __name__ == "__main__":
    typer.run(main)
