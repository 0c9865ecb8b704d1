"""--time-budget (CS336 A5 §9's leaderboard): read from a readable duration, part of the loop's stopping condition, and
a budgeted run ends as any run does (final validation, on the whole validation set, checkpoint, policy/)."""

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.data.task import Task
from alignment.experiments.sweep import run_state
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.sampler import validation_sampling
from alignment.grpo_run import train_grpo
from alignment.run.time_budget import RunClock, budget_validations, parse_duration
from scripts import train_grpo as script
from tests.test_grpo_loop import QUESTIONS, TASK, hash_reward, tiny_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
VALIDATION = Task(
    QUESTIONS + ["Name a colour.", "Say goodbye."],
    ["2", "apple", "3", "hello", "red", "bye"],
    TASK.template,
    hash_reward,
)


@pytest.mark.parametrize(
    "text,seconds",
    [("5400", 5400), ("90m", 5400), ("1.5h", 5400), (" 4H ", 14400), ("30s", 30), ("0.5", 0.5), (60, 60)],
)
def test_durations_read_as_seconds(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["4 hours", "1h30m", "-5m", "0", "0h", "", "soon", "1.5d"])
def test_unreadable_budgets_name_the_flag(text):
    with pytest.raises(ValueError, match="^--time-budget"):
        validate(GRPOConfig(time_budget=text))


def test_the_command_line_refuses_an_unreadable_budget_before_any_model_loads():
    result = CliRunner().invoke(script.app, ["--time-budget", "4 hours", "--model", "/nonexistent"])
    text = " ".join(result.output.replace("│", " ").split())
    assert result.exit_code == 2 and "--time-budget '4 hours': expected seconds or a number with s, m or h" in text


class FakeTime:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_clock_leaves_room_for_the_next_step_and_what_follows_it():
    now = FakeTime()
    clock = RunClock(100.0, elapsed_s=10.0, now=now)  # resumed after 10 s
    assert clock.elapsed() == 10.0 and clock.room_for_step(questions=50, checkpoint=True)  # nothing timed yet
    with clock.timing_validation(10):
        now.t += 5.0  # 0.5 s a question: the final validation of 50 will take 25 s
    for seconds in (20.0, 30.0):
        assert clock.room_for_step(questions=50)
        with clock.timing_step():
            now.t += seconds
    with clock.timing_checkpoint():
        now.t += 4.0
    assert clock.elapsed() == 69.0
    assert not clock.room_for_step(questions=50)  # 69 + 30 (the longest step) + 25 > 100
    assert clock.room_for_step(questions=2)  # 69 + 30 + 1 <= 100
    assert not clock.room_for_step(questions=2, checkpoint=True)  # ... + 4 > 100
    assert RunClock(None, now=now).room_for_step(10**9, checkpoint=True)  # no budget: the step count alone decides


def test_periodic_validations_sample_the_set_the_final_one_covers():
    periodic, final = budget_validations(VALIDATION, 2, budgeted=True)
    assert final == VALIDATION and len(periodic.questions) == 2
    assert all(
        VALIDATION.truths[VALIDATION.questions.index(q)] == t for q, t in zip(periodic.questions, periodic.truths)
    )
    assert budget_validations(VALIDATION, 2, budgeted=False) == (VALIDATION, VALIDATION)
    named = replace(VALIDATION, categories=[f"c{i}" for i in range(len(VALIDATION.questions))])
    sample, _ = budget_validations(named, 2, budgeted=True)  # each sampled question keeps its own category
    assert sample.categories == [f"c{VALIDATION.questions.index(q)}" for q in sample.questions]


def evaluations(run: Path) -> list[tuple[int, int]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(row["grpo_step"], row["eval_examples"]) for row in rows if "eval_reward" in row]


def loop_state(run: Path) -> dict:
    return json.loads((run / "checkpoint" / "state.json").read_text())["loop"]


def test_a_tiny_budget_stops_before_the_first_step_and_still_validates_on_everything(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path, n_grpo_steps=1, n_eval_examples=2, time_budget="0.001s")
    assert train_grpo(config, TASK, VALIDATION) == []  # the first validation alone is past the budget
    run = config.output_dir
    assert evaluations(run) == [(0, 2), (0, 6)]  # the step-0 sample, then the whole validation set
    assert loop_state(run)["stopped_by"] == "time_budget" and (run / "policy" / "model.safetensors").is_file()
    assert run_state(run, total_steps=1) == "finished"  # a sweep does not take it for a stopped run
    longer = train_grpo(replace(config, time_budget="1h"), TASK, VALIDATION, resume=True)  # a larger budget goes on
    assert [row["grpo_step"] for row in longer] == [1] and evaluations(run) == [(0, 2), (1, 6)]
    assert loop_state(run)["stopped_by"] == "n_grpo_steps"


def test_the_step_the_budget_ends_on_validates_once_on_everything(tiny_model_dir, tmp_path, monkeypatch):
    class OneStep(RunClock):  # a budget with room for exactly one step, whatever this machine's speed
        def room_for_step(self, questions: int, checkpoint: bool = False) -> bool:
            return not self.step_s

    monkeypatch.setattr("alignment.grpo_run.RunClock", OneStep)
    config = tiny_config(tiny_model_dir, tmp_path, n_grpo_steps=5, n_eval_examples=2, time_budget="1h")
    rows = train_grpo(config, TASK, VALIDATION)
    assert [row["grpo_step"] for row in rows] == [1]
    assert evaluations(config.output_dir) == [(0, 2), (1, 6)]  # eval_every 1, but no sample validation at step 1
    state = loop_state(config.output_dir)
    assert state["step"] == 1 and state["order_position"] == 2 and state["stopped_by"] == "time_budget"
    assert (config.output_dir / "policy" / "model.safetensors").is_file()


def test_the_leaderboard_preset_keeps_the_handouts_rules():
    """CS336 A5 §9: 4 hours; Qwen2.5-Math-1.5B on MATH's training data; validation on all 5,000 of MATH's validation
    questions with the r1_zero prompt, temperature 1.0 and 1,024 tokens, by the course's r1_zero_reward_fn."""
    config = GRPOConfig(**tomllib.loads((CONFIGS / "cs336_leaderboard.toml").read_text()))
    validate(config)
    assert config.time_budget_s == 4 * 3600
    assert config.model == "Qwen/Qwen2.5-Math-1.5B" and config.task == "math" and config.dataset == "math"
    assert config.validation_dataset is None  # MATH's own 5,000-problem split, whole at the end under a budget
    assert config.prompt == "r1_zero" and config.grader == "course"
    sampling = validation_sampling(replace(config, sampling_max_tokens=512, sampling_temperature=1.2))  # rollouts'
    assert sampling.temperature == 1.0 and sampling.max_tokens == 1024 and sampling.top_p == 1.0
    assert config.n_grpo_steps >= 4 * 60  # the budget, not the step count, ends the run (even at a minute a step)


def test_grpo_on_ray_refuses_a_budget_it_would_ignore():
    from alignment.ray.config import RayGRPOConfig, validate_ray

    with pytest.raises(ValueError, match="--time-budget is a setting of scripts/train_grpo.py"):
        validate_ray(RayGRPOConfig(time_budget="4h"))


def test_torchrun_refuses_a_budget_its_ranks_would_each_read_from_their_own_clock():
    from alignment.run.setup import check_sharded

    with pytest.raises(ValueError, match="--time-budget needs one process"):
        check_sharded(GRPOConfig(backend="hf", time_budget="4h"))
    check_sharded(GRPOConfig(backend="hf"))
