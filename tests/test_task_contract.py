"""The task contract: sources named one way, rewards weighted and logged per function, errors naming the row,
and a user's rewards rebuilt by name in grading worker processes."""

import math
import textwrap
from pathlib import Path

import pytest

from alignment.grading.parallel import ParallelGrader
from alignment.tasks import Reward, RewardError, RewardSet, TaskDefinition
from alignment.tasks.loading import definition_for, reward_set
from alignment.tasks.source import parse_source

USER_TASK = """
import asyncio
from alignment.tasks import Reward, TaskDefinition

def has_answer(completion, row):
    return float(row["answer"] in completion)

def short(completion, row):
    return None if row.get("skip") else float(len(completion) < 10)

async def polite(completion, row):
    await asyncio.sleep(0)
    return 1 if "please" in completion else 0

def lengths(completions, rows):
    return [len(c) / 100 for c in completions]

task = TaskDefinition(
    rows=[{"q": "1+1", "answer": "2"}],
    prompt="{q}",
    rewards=[has_answer, Reward(short, weight=0.5), Reward(polite, weight=2.0), Reward(lengths, batched=True)],
)

def factory(settings):
    return TaskDefinition(rows=[], rewards=[Reward(has_answer, weight=settings.weight)])
"""


@pytest.fixture
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_task.py"
    path.write_text(textwrap.dedent(USER_TASK))
    return path


def test_sources_are_parsed_one_way(tmp_path: Path) -> None:
    assert parse_source("math").kind == "builtin"
    file = parse_source("tasks/mine.py:task")
    assert (file.kind, file.attribute) == ("file", "task") and Path(file.target).is_absolute()
    assert parse_source("pkg.module:make").kind == "module"
    assert parse_source("reasoning_gym:chain_sum,leg_counting=2").target == "chain_sum,leg_counting=2"
    assert parse_source("openenv:http://127.0.0.1:8000", "--env").target == "http://127.0.0.1:8000"
    for bad, says in [("mine.py", "name the object"), ("x:1a", "not a Python name"), ("a-b:c", "neither")]:
        with pytest.raises(ValueError, match=says):
            parse_source(bad)


def test_rewards_weighted_summed_and_logged_each(task_file: Path) -> None:
    definition = definition_for(f"{task_file}:task", {})
    rewards = reward_set(f"{task_file}:task", definition, {})
    scores = rewards.grade_batch(["2 please", "no"], [{"answer": "2"}, {"answer": "2", "skip": True}])
    first, second = scores
    assert first["reward_has_answer"] == 1.0 and first["reward_short"] == 1.0 and first["reward_polite"] == 1.0
    assert first["reward"] == pytest.approx(1.0 + 0.5 + 2.0 + 0.08)
    assert math.isnan(second["reward_short"])  # None: does not apply, left out of the sum
    assert second["reward"] == pytest.approx(0.0 + 0.0 + 0.02)


def test_a_factory_gets_the_run_settings(task_file: Path) -> None:
    class Settings:
        weight = 3.0

    definition = definition_for(f"{task_file}:factory", Settings())
    assert definition.reward_list()[0].weight == 3.0


@pytest.mark.parametrize(
    "reward, says",
    [
        (lambda c, r: "high", "returned 'high' \\(str\\)"),
        (lambda c, r: float("nan"), "returned nan"),
        (lambda c, r: 1 / 0, "raised ZeroDivisionError"),
        (lambda c, r: {"score": 1}, "without 'reward'"),
    ],
)
def test_bad_rewards_name_the_task_the_function_and_the_row(reward, says: str) -> None:
    rewards = RewardSet("mine", [Reward(reward, name="judge")])
    with pytest.raises(RewardError, match=f'task mine: reward judge on row .*"id": 7.*{says}'):
        rewards.grade_batch(["x"], [{"id": 7}])


def test_a_reward_of_the_wrong_shape_is_refused_when_the_task_loads() -> None:
    with pytest.raises(RewardError, match="reward one must take two arguments \\(completion, row\\)"):
        RewardSet("mine", [Reward(lambda completion: 1.0, name="one")])
    with pytest.raises(RewardError, match="two rewards are named 'f'"):
        RewardSet("mine", [Reward(len, name="f"), Reward(len, name="f")])


def test_missing_files_and_names_are_one_line(task_file: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="--task: no file"):
        definition_for(f"{tmp_path}/absent.py:task", {})
    with pytest.raises(ValueError, match="defines no 'tsak' \\(it defines: .*task"):
        definition_for(f"{task_file}:tsak", {})
    with pytest.raises(ValueError, match="is a function, not a TaskDefinition|is a str, not a TaskDefinition"):
        definition_for("os.path:sep", {})


def test_user_rewards_travel_to_grading_workers_by_name(task_file: Path) -> None:
    definition = definition_for(f"{task_file}:task", {})
    rewards = reward_set(f"{task_file}:task", definition, {})
    rows = [{"answer": str(i % 3)} for i in range(40)]
    responses = [f"answer {i % 2}" for i in range(40)]
    with ParallelGrader(rewards, workers=2) as grader:
        pooled = grader(responses, rows)
    assert pooled == rewards.grade_batch(responses, rows)


def test_a_reward_raising_in_a_worker_is_raised_again_naming_the_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text(
        "from alignment.tasks import TaskDefinition\n"
        "def picky(c, row):\n    if row['n'] == 3:\n        raise KeyError('gone')\n    return 1.0\n"
        "task = TaskDefinition(rows=[], rewards=[picky])\n"
    )
    rewards = reward_set(f"{path}:task", definition_for(f"{path}:task", {}), {})
    with ParallelGrader(rewards, workers=2) as grader, pytest.raises(RewardError, match='picky on row \\{"n": 3\\}'):
        grader(["x"] * 5, [{"n": n} for n in range(5)])


def test_an_object_task_cannot_travel_but_grades_here() -> None:
    rewards = RewardSet("inline", TaskDefinition(rows=[], rewards=[lambda c, r: 1.0]).reward_list())
    with pytest.raises(TypeError, match="--grader-workers 1"):
        ParallelGrader(rewards, workers=2)
    with ParallelGrader(rewards, workers=1) as grader:
        assert grader(["a"], [{}])[0]["reward"] == 1.0
