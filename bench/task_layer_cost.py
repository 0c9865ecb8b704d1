"""What the task layer costs a GRPO step: building a user task's Tasks, the prompts of a step, and its reward calls,
beside the step itself.

    uv run python bench/task_layer_cost.py [--steps 3] [--rollout-batch-size 16]

The task is the shipped example, data/tasks/capitals.py (two weighted rewards, chat prompts), on
SmolLM2-135M-Instruct in float32 on the CPU with the hf backend, 32 new tokens at most. Measured: run_tasks (rows
read with `datasets`, renamed, split, prompted) without and with the chat template; the step's prompts built from
the Task; the step's RewardSet grading in this process and in a pool of 2 worker processes (warm); and the GRPO
steps' phases from their metrics (a step: the sum of its phases, the first step left out; time_grading_s). The task
layer's share of a step is (prompts + grading in the loop) / step.
"""

import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import typer

from alignment.grading.parallel import ParallelGrader
from alignment.grpo.config import GRPOConfig
from alignment.grpo_run import train_grpo
from alignment.models.loading import load_tokenizer
from alignment.prompts import chat_renderer, format_prompt
from alignment.tasks.building import run_tasks

TASK = str(Path(__file__).resolve().parents[1] / "data" / "tasks" / "capitals.py") + ":task"


def seconds(fn, repeat: int = 5) -> float:
    """The median of `repeat` timed calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(steps: int = 3, rollout_batch_size: int = 16, group_size: int = 4) -> None:
    with tempfile.TemporaryDirectory() as folder:
        config = GRPOConfig(
            model="smollm2-135m",
            task=TASK,
            n_grpo_steps=steps,
            rollout_batch_size=rollout_batch_size,
            group_size=group_size,
            train_batch_size=rollout_batch_size,
            gradient_accumulation_steps=rollout_batch_size // 2,
            sampling_max_tokens=32,
            n_eval_examples=2,
            eval_max_tokens=8,
            eval_every=steps + 1,
            checkpoint_every=steps + 1,
            grader_workers=2,
            backend="hf",
            learning_rate=1e-5,
            output_dir=Path(folder) / "run",
        )
        build_bare = seconds(lambda: run_tasks(config, check=False), 3)
        renderer = chat_renderer(load_tokenizer(config.model))
        build_chat = seconds(lambda: run_tasks(config, renderer, check=False), 3)
        task, _ = run_tasks(config, renderer, check=False)
        questions = list(range(rollout_batch_size // group_size))
        prompts = seconds(lambda: [format_prompt(task.template, task.questions[q]) for q in questions], 20)
        completions = [f"The capital is {row['answer']}." for row in task.truths[:rollout_batch_size]]
        rows = task.truths[:rollout_batch_size]
        here = seconds(lambda: task.reward_fn.grade_batch(completions, rows), 20)
        with ParallelGrader(task.reward_fn, 2) as pool:
            pool(completions, rows)  # the workers start and load the task file once, as in a run's first step
            pooled = seconds(lambda: pool(completions, rows), 10)
        train_grpo(config)
        metrics = [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]
    step_rows = [m for m in metrics if "time_rollout_s" in m][1:]  # the first step: one-time costs
    # a step: the sum of its phases (rollout, grading, old log-probs, train, weight sync), not the run's clock
    phases = [k for k in step_rows[0] if k.startswith("time_") and k.endswith("_s") and k != "time_elapsed_s"]
    step_s = statistics.median(sum(m[k] for k in phases) for m in step_rows)
    grading_s = statistics.median(m["time_grading_s"] for m in step_rows)
    machine = f"{platform.processor() or platform.machine()}, {platform.system()}"
    print(f"machine: {machine}; steps measured: {len(step_rows)}")
    print(f"run_tasks (read, split, prompt): {build_bare * 1e3:.1f} ms bare, {build_chat * 1e3:.1f} ms chat")
    print(f"a step's {len(questions)} prompts: {prompts * 1e6:.0f} us")
    print(f"grading {rollout_batch_size} completions: {here * 1e3:.2f} ms here, {pooled * 1e3:.2f} ms in 2 workers")
    print(f"GRPO step (median): {step_s:.2f} s, of it grading {grading_s * 1e3:.1f} ms in the loop")
    print(f"task layer's share of a step: {(prompts + grading_s) / step_s:.2%}")


if __name__ == "__main__":
    typer.run(main)
