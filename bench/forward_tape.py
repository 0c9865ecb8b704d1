"""The demo's GRPO step with the learner replaying the rollout's forward (alignment/rollout/forward_tape.py) and
without.

    uv run python bench/forward_tape.py [--steps 10]

SmolLM2-135M-Instruct in float32 on the CPU, the demo workload (8 keyword prompts x group 4, exactly 32 new tokens,
GRPO-Clip on-policy, one optimizer step per rollout batch, hf backend). One trainer; its steps alternate between
the two ways (tape, recompute, tape, ...), so both see the same machine load and a policy at the same stage.
Prints each step's rollout and train phases, their medians per way after the first pair (one-time costs), and
the tape's size.
"""

import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import typer

from alignment.grading.parallel import ParallelGrader
from alignment.grpo.config import GRPOConfig
from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import GRPOSampler
from alignment.grpo_run import sampler_and_learner
from alignment.prompts import chat_renderer
from alignment.run.setup import PhaseTimer, build_engine, load_policy
from alignment.tasks.building import run_tasks


def demo_parts(output_dir: Path) -> tuple[GRPOSampler, GRPOLearner]:
    config = GRPOConfig(
        model="smollm2-135m",
        task="keywords",
        keywords_per_prompt=2,
        n_train_prompts=256,
        n_eval_examples=8,
        learning_rate=3e-5,
        rollout_batch_size=32,
        group_size=4,
        train_batch_size=32,
        gradient_accumulation_steps=4,
        sampling_min_tokens=32,
        sampling_max_tokens=32,
        loss_type="grpo_clip",
        kl_reference=False,
        kl_prev=False,
        backend="hf",
        grader_workers=1,
        precision="fp32",
        output_dir=output_dir,
        reuse_rollout_forward="on",
    )
    torch.manual_seed(config.seed)
    policy, tokenizer = load_policy(config, "cpu", torch.float32)
    task, _ = run_tasks(config, chat_renderer(tokenizer), check=False)
    engine = build_engine(config, policy, tokenizer, "cpu", "cpu")
    engine.progress = False
    return sampler_and_learner(config, policy, tokenizer, engine, task, ParallelGrader(task.reward_fn, 1))


def main(steps: int = 10) -> None:
    if steps < 4 or steps % 2:
        raise typer.BadParameter("--steps must be even and >= 4 (pairs; the first pair pays one-time costs)")
    with tempfile.TemporaryDirectory() as tmp:
        sampler, learner = demo_parts(Path(tmp))
        tape = learner.tape
        times: dict[str, list[tuple[float, float]]] = {"tape": [], "recompute": []}
        for step in range(steps):
            way = "tape" if step % 2 == 0 else "recompute"
            sampler.tape = learner.tape = tape if way == "tape" else None
            timer = PhaseTimer()
            questions = sampler.order.take(learner.config.n_prompts_per_rollout_batch)
            with timer("rollout"):
                rollouts = sampler.generate(questions, learner.step)
            batch = learner.make_batch(questions, rollouts, sampler.grade(questions, rollouts))
            start = time.perf_counter()
            learner.update(batch)
            rollout_s, train_s = timer.seconds["rollout"], time.perf_counter() - start
            times[way].append((rollout_s, train_s))
            print(f"step {step + 1} ({way}): rollout {rollout_s:.2f}s, train {train_s:.2f}s", flush=True)
    for way, rows in times.items():
        rollout_s, train_s = (statistics.median(r[i] for r in rows[1:]) for i in (0, 1))
        print(f"{way}: median rollout {rollout_s:.2f}s, train {train_s:.2f}s, both {rollout_s + train_s:.2f}s")
    size = tape.capacity * tape.bytes_per_slot()
    print(f"tape: {tape.capacity} slots x {tape.bytes_per_slot() / 2**10:.0f} KiB = {size / 2**30:.2f} GiB")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}, python "
        f"{platform.python_version()}"
    )


if __name__ == "__main__":
    typer.run(main)
