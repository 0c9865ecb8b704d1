"""A task of the user's own on Ray: the Task travels to the Scorer actor with its RewardSet by name (the task file is
loaded again there), and a run under each strategy trains on it with each reward's mean in its metrics."""

import json
import pickle
import subprocess
import sys
from dataclasses import replace

import pytest

from alignment.ray.config import RayGRPOConfig
from alignment.tasks.building import run_tasks
from tests.test_user_task import TASK_FILE, write_rows, write_task

GRADE_ELSEWHERE = """
import json, pickle, sys
from alignment.ray.scorer import Scorer
task = pickle.loads(sys.stdin.buffer.read())
scored = Scorer(task, 1).grade([0, 1], [(0, task.truths[0]["answer"]), (1, "nothing")])
print(json.dumps({"scores": scored.scores, "user_modules": [m for m in sys.modules if m.startswith("alignment_user_")],
                  "torch": "torch" in sys.modules}))
"""


def test_a_file_defined_reward_set_unpickles_and_grades_in_a_fresh_scorer_process(tmp_path):
    source = write_rows(tmp_path / "data", "jsonl")
    config = RayGRPOConfig(task=write_task(tmp_path, str(source)), task_fields="question=problem,answer=solution")
    task, _ = run_tasks(config)
    shipped = pickle.dumps(task)  # as Ray ships the Task to the Scorer actor
    assert b"def contains" not in shipped and b"my_task.py" in shipped  # by name: the source, not the code
    done = subprocess.run(
        [sys.executable, "-c", GRADE_ELSEWHERE], input=shipped, capture_output=True, timeout=120, check=True
    )
    reply = json.loads(done.stdout.decode().strip().splitlines()[-1])
    here = task.reward_fn.grade_batch([task.truths[0]["answer"], "nothing"], task.truths[:2])

    def plain(scores):  # NaN (a reward's None) compared as None
        return [{k: None if v != v else v for k, v in s.items()} for s in scores]

    assert plain(reply["scores"]) == plain(here)  # the same scores as graded here
    assert reply["scores"][0]["reward_contains"] == 1.0 and reply["scores"][1]["reward_contains"] == 0.0
    assert len(reply["user_modules"]) == 1 and not reply["torch"]  # the task file loaded there; no torch


STRATEGY_SETTINGS = {  # what each strategy needs beyond the shared settings (alignment/ray/config.py checks them)
    "colocated-sync": {},
    "colocated-multistep": {"multistep_k": 2, "loss_type": "grpo_clip"},
    "colocated-k-batches": {"multistep_k": 2, "loss_type": "grpo_clip", "checkpoint_every": 2},
    "disaggregated-one-behind": {},
    "replay-buffer": {},
    "async": {},
}


@pytest.mark.slow  # 60-90 s each on 2 loaded cores: Ray and its actors start
@pytest.mark.parametrize("strategy", list(STRATEGY_SETTINGS))
def test_a_user_task_trains_on_ray_under_every_strategy(cluster, tiny_model_dir, tmp_path, strategy):
    """The task file's RewardSet reaches the scorer (or the async generators' grading) by name under each strategy,
    and each reward function's mean is logged beside the weighted sum, in training and in validation."""
    from alignment.ray.driver import train_grpo_ray

    task = write_task(tmp_path, str(write_rows(tmp_path / "data", "jsonl")), body=TASK_FILE)
    config = RayGRPOConfig(
        model=str(tiny_model_dir),
        task=task,
        task_fields="question=problem,answer=solution",
        n_grpo_steps=2,
        learning_rate=1e-3,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        eval_every=1,
        n_eval_examples=2,
        checkpoint_every=1,
        grader_workers=2,
        backend="hf",
        output_dir=tmp_path / "run",
        ray_timeout_s=300.0,  # the actors must start within it, on a loaded 2-core machine too
    )
    train_grpo_ray(replace(config, strategy=strategy, **STRATEGY_SETTINGS[strategy]))
    metrics = [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "loss" in m]
    assert sorted({m["grpo_step"] for m in steps}) == [1, 2] and all("train_reward_contains" in m for m in steps)
    assert all(0.0 <= m["train_reward_contains"] <= 1.0 for m in steps)
    evals = [m for m in metrics if "eval_reward" in m]
    assert evals and all("eval_reward_contains" in m for m in evals)


def test_the_ray_driver_builds_a_user_task_in_the_models_chat_turn(tiny_model_dir, tmp_path):
    from alignment.ray.driver import tasks

    source = write_rows(tmp_path / "data", "jsonl")
    body = TASK_FILE.replace("chat={chat},", "chat={chat}, system_prompt='Be brief.',")
    config = RayGRPOConfig(
        model=str(tiny_model_dir),
        task=write_task(tmp_path, str(source), True, body),
        task_fields="question=problem,answer=solution",
        n_eval_examples=2,
    )
    train, validation = tasks(config, None, None)  # the tokenizer alone: no model loads in the driver
    assert train.template.startswith("<|im_start|>system\nBe brief.") and "{question}" in train.template
    assert len(validation.questions) == 2 and train.reward_fn.names == ["reward_contains", "reward_short"]
