"""`--task reasoning_gym:...`: the mix's rows (weights, seeds, no shared question, JSON values), the answer rule,
rewards equal to reasoning-gym's own scores (also in grading workers), and the curriculum (moves, rows, state)."""

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import typer

from alignment.config.settings import setting
from alignment.data.task import Task
from alignment.grading.parallel import ParallelGrader
from alignment.grpo.config import GRPOConfig
from alignment.grpo_run import train_grpo
from alignment.tasks.curriculum import Curriculum
from alignment.tasks.loading import definition_for, reward_set
from alignment.tasks.reasoning_gym import Mix, apportion, check_disjoint, extract_answer, parse_weights

SMALL_SUMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}  # 200 distinct questions


def settings(task: str = "chain_sum,leg_counting=2", **overrides) -> SimpleNamespace:
    base = {
        "task": f"reasoning_gym:{task}",
        "task_config": None,
        "seed": 3,
        "n_train_examples": 30,
        "n_eval_examples": 6,
        "curriculum_threshold": None,
        "curriculum_window": 4,
    }
    return SimpleNamespace(**(base | overrides))


def rows_of(s: SimpleNamespace) -> tuple[list[dict], list[dict]]:
    return definition_for(s.task, s).rows(s)


def test_weights_parse_and_bad_ones_are_named() -> None:
    assert parse_weights("chain_sum, leg_counting=2.5") == {"chain_sum": 1.0, "leg_counting": 2.5}
    for bad, says in [("a,b=x", "weight 'x' of b"), ("a=0", "weight '0' of a"), ("a,,b", "empty"), ("a,a", "twice")]:
        with pytest.raises(ValueError, match=says):
            parse_weights(bad)
    assert apportion([1, 2], 30) == [10, 20] and apportion([1, 1, 1], 10) == [4, 3, 3]
    assert sum(apportion([0.3, 0.3, 0.4], 7)) == 7


def test_unknown_tasks_and_configurations_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match=r"no reasoning-gym task 'chain_sums' \(close: chain_sum"):
        rows_of(settings("chain_sums"))
    with pytest.raises(
        ValueError, match=r"--task-config chain_sum: no key 'min_term' \(its keys: min_terms, max_terms"
    ):
        rows_of(settings(task_config='{"chain_sum": {"min_term": 3}}'))
    with pytest.raises(ValueError, match="names 'basic_arithmetic', which is not in the mix"):
        rows_of(settings(task_config='{"basic_arithmetic": {}}'))
    with pytest.raises(ValueError, match="--task-config is not JSON"):
        rows_of(settings(task_config="{chain_sum"))
    with pytest.raises(ValueError, match="--task-config chain_sum .*reasoning-gym refuses it"):
        rows_of(settings(task_config='{"chain_sum": {"min_terms": 0}}'))


def test_a_mix_has_its_weights_its_own_validation_and_json_rows() -> None:
    s = settings(n_train_examples=300, n_eval_examples=30)
    train, validation = rows_of(s)
    assert [sum(r["task"] == t for r in train) for t in ("chain_sum", "leg_counting")] == [100, 200]
    assert [sum(r["task"] == t for r in validation) for t in ("chain_sum", "leg_counting")] == [10, 20]
    assert {r["task"] for r in train[:20]} == {"chain_sum", "leg_counting"}  # shuffled, not one task after the other
    assert json.loads(json.dumps(train + validation)) == train + validation  # tuples became lists
    row = train[0]
    assert set(row) == {"question", "answer", "metadata", "task", "prompt"}
    assert row["metadata"]["source_dataset"] == row["task"] and row["prompt"].startswith(row["question"])
    assert "<answer>" in row["prompt"]
    assert rows_of(s) == (train, validation)  # the same settings, the same rows
    assert rows_of(replace_ns(s, seed=4))[0] != train


def replace_ns(s: SimpleNamespace, **changes) -> SimpleNamespace:
    return SimpleNamespace(**(vars(s) | changes))


def test_training_questions_are_never_validation_questions() -> None:
    s = settings(
        "chain_sum", task_config=json.dumps({"chain_sum": SMALL_SUMS}), n_train_examples=300, n_eval_examples=60
    )
    train, validation = rows_of(s)
    held_out = {r["question"] for r in validation}
    assert len(train) == 300 and not held_out & {r["question"] for r in train}
    mix = Mix.from_settings("chain_sum", s)
    unchecked = mix.generate("chain_sum", mix.configs["chain_sum"], mix.seed, 300)
    assert held_out & {r["question"] for r in unchecked}  # in so small a space, overlap had to be removed
    with pytest.raises(ValueError, match="1 training questions are validation questions"):
        check_disjoint(train[:5] + validation[:1], validation, "reasoning_gym:chain_sum")
    with pytest.raises(ValueError, match="too few distinct questions"):
        rows_of(replace_ns(s, n_eval_examples=3000))


def test_the_answer_is_the_last_answer_tag_else_the_last_line() -> None:
    assert extract_answer("think <answer>1</answer> more <answer> 42 </answer> done") == "42"
    assert extract_answer("so <answer>17") == "17"  # unclosed (a stop string cut it): up to the end
    assert extract_answer("the sum is\n 12 \n\n") == "12"
    assert extract_answer("<answer></answer>") is None and extract_answer("  \n") is None
    assert extract_answer("<answer>a\nb</answer>") == "a\nb"


@pytest.mark.parametrize("name", ["chain_sum", "leg_counting", "basic_arithmetic", "letter_counting"])
def test_the_score_is_reasoning_gyms_own(name: str) -> None:
    import reasoning_gym

    s = settings(name, n_train_examples=4, n_eval_examples=2)
    definition = definition_for(s.task, s)
    train, _ = definition.rows(s)
    rewards = reward_set(s.task, definition, s)
    score_answer = reasoning_gym.get_score_answer_fn(name)
    for row in train:
        entry = {"question": row["question"], "answer": row["answer"], "metadata": row["metadata"]}
        wrong = str(int(row["answer"]) + 7)
        right, off, untagged = rewards.grade_batch(
            [f"Thinking.\n<answer>{row['answer']}</answer>", f"<answer>{wrong}</answer>", f"so\n{row['answer']}"],
            [row] * 3,
        )
        assert right["reward_score"] == score_answer(row["answer"], entry) == 1.0 and right["reward_format"] == 1.0
        assert off["reward_score"] == score_answer(wrong, entry) < 1.0 and off["reward_format"] == 1.0
        assert untagged["reward_score"] == 1.0 and untagged["reward_format"] == 0.0
        assert right["reward"] == pytest.approx(1.1)


def test_rewards_are_rebuilt_by_name_in_grading_workers() -> None:
    s = settings(n_train_examples=12)
    definition = definition_for(s.task, s)
    train, _ = definition.rows(s)
    rewards = reward_set(s.task, definition, s)
    responses = [f"<answer>{r['answer']}</answer>" if i % 3 else "<answer>0</answer>" for i, r in enumerate(train)]
    with ParallelGrader(rewards, workers=2) as grader:
        pooled = grader(responses, train)
    assert pooled == rewards.grade_batch(responses, train)
    assert 0 < sum(p["reward_score"] for p in pooled) < len(train)


def compiled(rows: list[dict]) -> Task:
    """The training Task a reasoning_gym definition compiles to: its rows' prompts as questions."""
    return Task([r["prompt"] for r in rows], list(rows), "{question}", lambda c, r: {"reward": 0.0})


def test_the_curriculum_moves_a_task_up_once_its_window_reaches_the_threshold() -> None:
    curriculum = Curriculum.from_settings(settings(curriculum_threshold=0.75, curriculum_window=4))
    assert curriculum is not None
    assert curriculum.observe(["chain_sum"] * 3, [1.0, 1.0, 1.0]) == []  # the window is not full yet
    assert curriculum.observe(["chain_sum", "leg_counting"], [0.0, 1.0]) == ["chain_sum"]  # 3 of 4: 0.75
    assert curriculum.levels == {"chain_sum": 1, "leg_counting": 0}
    assert curriculum.observe(["chain_sum"] * 3 + ["leg_counting"] * 3, [1.0] * 3 + [0.5] * 3) == []
    assert curriculum.observe(["chain_sum", "leg_counting"], [1.0, 0.0]) == ["chain_sum"]  # leg_counting: 0.625
    assert curriculum.metrics() == {"curriculum_level@chain_sum": 2, "curriculum_level@leg_counting": 0}
    curriculum.levels["leg_counting"] = curriculum.top["leg_counting"]
    assert curriculum.observe(["leg_counting"] * 4, [1.0] * 4) == []  # never past the last level


def test_a_moved_task_gets_new_rows_at_its_level_and_a_restored_state_the_same_rows() -> None:
    s = settings(curriculum_threshold=0.5, curriculum_window=2, n_train_examples=30)
    train, validation = rows_of(s)
    assert all(r["metadata"]["num_terms"] == 2 for r in train if r["task"] == "chain_sum")  # level 0: two terms
    task, curriculum = compiled(train), Curriculum.from_settings(s)
    curriculum.apply(task)
    assert task.truths == train
    for _ in range(3):
        curriculum.observe(["chain_sum"] * 2, [1.0, 1.0])
    curriculum.apply(task)
    sums = [r for r in task.truths if r["task"] == "chain_sum"]
    assert len(sums) == 10 and {r["metadata"]["difficulty"]["num_terms"][1] for r in sums} == {5}  # level 3: 2..5
    assert any(r["metadata"]["num_terms"] > 2 for r in sums)
    assert [r for r in task.truths if r["task"] == "leg_counting"] == [r for r in train if r["task"] == "leg_counting"]
    assert task.questions == [r["prompt"] for r in task.truths]
    assert not {r["question"] for r in validation} & {r["question"] for r in task.truths}

    state = json.loads(json.dumps(curriculum.state()))
    restored, fresh = Curriculum.from_settings(s), compiled(train)
    restored.load_state(state)
    restored.apply(fresh)
    assert restored.levels == curriculum.levels and fresh.truths == task.truths
    assert list(restored.recent["chain_sum"]) == list(curriculum.recent["chain_sum"])


def test_a_curriculum_is_refused_where_there_are_no_levels() -> None:
    with pytest.raises(ValueError, match="reasoning-gym has no curriculum for list_functions"):
        rows_of(settings("chain_sum,list_functions", curriculum_threshold=0.8))
    with pytest.raises(ValueError, match="min_terms are set by its curriculum"):
        rows_of(settings(task_config='{"chain_sum": {"min_terms": 3}}', curriculum_threshold=0.8))
    with pytest.raises(ValueError, match="only --task reasoning_gym"):
        Curriculum.from_settings(SimpleNamespace(task="math", curriculum_threshold=0.8, curriculum_window=4))
    with pytest.raises(ValueError, match="--curriculum-threshold 1.5"):
        Curriculum.from_settings(settings(curriculum_threshold=1.5))
    assert Curriculum.from_settings(settings()) is None


@dataclass
class ReasoningGymRun(GRPOConfig):
    """GRPO's settings with the task settings a reasoning_gym run reads (alignment/tasks/settings.py)."""

    task: str = setting("math", "--task")
    task_config: str | None = setting(None, "--task-config")
    curriculum_threshold: float | None = setting(None, "--curriculum-threshold")
    curriculum_window: int = setting(64, "--curriculum-window")


def run_tasks(config: ReasoningGymRun) -> tuple[Task, Task]:
    """Training and validation Tasks of config.task: rows' prompts as questions, rows as truths, its rewards."""
    definition = definition_for(config.task, config)
    rewards = reward_set(config.task, definition, config)
    return tuple(  # type: ignore[return-value]
        Task([r["prompt"] for r in rows], rows, "{question}", rewards, [r["task"] for r in rows], config.task)
        for rows in definition.rows(config)
    )


def tiny_run(model_dir, tmp_path) -> ReasoningGymRun:
    return ReasoningGymRun(
        model=str(model_dir),
        task="reasoning_gym:chain_sum,leg_counting",
        curriculum_threshold=1.0,
        curriculum_window=2,
        n_train_examples=8,
        n_eval_examples=4,
        n_grpo_steps=1,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        grader_workers=1,
        backend="hf",
        output_dir=tmp_path / "run",
    )


def test_grpo_steps_on_a_mix_with_its_curriculum_in_the_logs_and_checkpoint(tiny_model_dir, tmp_path) -> None:
    config = tiny_run(tiny_model_dir, tmp_path)
    train, validation = run_tasks(config)
    (row,) = train_grpo(config, train, validation)
    assert row["curriculum_level@chain_sum"] == 0 and row["curriculum_level@leg_counting"] == 0
    assert 0 <= row["train_reward"] <= 1.1
    path = config.output_dir / "checkpoint" / "state.json"
    saved = json.loads(path.read_text())
    kept = saved["loop"]["curriculum"]
    assert kept["levels"] == {"chain_sum": 0, "leg_counting": 0}
    assert sum(len(scores) for scores in kept["recent"].values()) in (2, 3, 4)  # 4 rollouts, at most 2 kept per task


@pytest.mark.slow
def test_a_resumed_run_continues_at_its_curriculum_levels(tiny_model_dir, tmp_path) -> None:
    config = tiny_run(tiny_model_dir, tmp_path)
    train_grpo(config, *run_tasks(config))
    path = config.output_dir / "checkpoint" / "state.json"
    saved = json.loads(path.read_text())
    saved["loop"]["curriculum"]["levels"]["chain_sum"] = 2  # as if chain_sum had moved up twice before this checkpoint
    path.write_text(json.dumps(saved))
    train, validation = run_tasks(config)
    before = [r for r in train.truths if r["task"] == "leg_counting"]
    (row,) = train_grpo(replace(config, n_grpo_steps=2), train, validation, resume=True)
    assert row["grpo_step"] == 2 and row["curriculum_level@chain_sum"] == 2
    sums = [r for r in train.truths if r["task"] == "chain_sum"]
    assert sums and all(r["metadata"]["difficulty"]["num_terms"] == [2, 4] for r in sums)  # level 2: 2 to 4 terms
    assert [r for r in train.truths if r["task"] == "leg_counting"] == before
    assert all(r["metadata"]["num_terms"] == 2 for r in validation.truths if r["task"] == "chain_sum")


def run_learning_bench(tmp_path: Path, *flags: str) -> dict:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "bench/reasoning_gym_learning.py", "--tiny", "--tasks", "chain_sum,leg_counting", *flags]
        + ["--out", str(out)],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.with_suffix(".png").stat().st_size > 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_the_learning_bench_runs_tiny(tmp_path) -> None:
    result = run_learning_bench(tmp_path)
    assert sorted(result["seeds"]) == ["0", "1"] and result["settings"]["tiny"]
    for run in result["seeds"].values():
        assert set(run["ours"]["final"]) == {"accuracy", "accuracy@chain_sum", "accuracy@leg_counting", "format"}
        assert len(run["ours"]["train_reward"]) == 1 and run["ours"]["seconds"] > 0
        assert [p[1] for p in run["ours"]["curve"]] == [0, 1]  # validated at step 0 and after its one step
        assert run["ours"]["curve"][0][2] == pytest.approx(run["start"]["accuracy"])  # both greedy, same questions
    gain = result["summary"]["ours"]["gain_accuracy"]
    assert gain["n"] == 2 and gain["low"] <= gain["mean"] <= gain["high"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is in the bench group (--group bench)")
def test_the_learning_bench_sets_trl_beside_ours_tiny(tmp_path) -> None:
    result = run_learning_bench(tmp_path, "--trl-seeds", "0,1", "--trl-minutes", "5")
    for run in result["seeds"].values():
        trl = run["trl"]
        assert trl["steps"] >= 1 and trl["curve"][0][1] == 0 and set(trl["final"]) == set(run["ours"]["final"])
        reach = run["time_to_accuracy"]
        assert reach["target"] == min(run["ours"]["curve"][-1][2], trl["curve"][-1][2])
    assert result["summary"]["trl"]["gain_accuracy"]["n"] == 2


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"task": "math"}, "only --task reasoning_gym:... has levels, not --task math"),
        ({"curriculum_threshold": 1.5}, "an accuracy in \\(0, 1\\]"),
        ({"curriculum_window": 0}, "at least 1 rollout"),
    ],
)
def test_curriculum_flags_are_checked_with_the_settings(changes, says, tmp_path):
    from alignment.grpo.config import GRPOConfig, validate

    settings = {"task": "reasoning_gym:chain_sum", "curriculum_threshold": 0.8, "output_dir": tmp_path} | changes
    with pytest.raises(ValueError, match=says):
        validate(GRPOConfig(**settings))


def test_the_learning_bench_merges_seeds_run_side_by_side():
    from bench.reasoning_gym_learning import merged, summaries

    def part(seed: int, final: float, settings: dict) -> dict:
        start = {"accuracy": 0.1, "format": 0.0}
        ours = {"final": {"accuracy": final, "format": 0.5}, "seconds": 100.0 + seed}
        stamp = {"date": f"2026-11-29T1{seed}:00:00+00:00", "machine": "x86_64", "load_average": [1.0, 1.0, 1.0]}
        return stamp | {"settings": settings | {"seeds": [seed]}, "seeds": {str(seed): {"start": start, "ours": ours}}}

    settings = {"tasks": "chain_sum", "steps": 64, "trl_seeds": [], "trl_minutes": 15.0, "trl_eval_every": 2}
    parts = [part(0, 0.3, settings), part(1, 0.5, settings | {"trl_eval_every": 1})]  # TRL's settings: no TRL run
    result = merged(parts)
    assert sorted(result["seeds"]) == ["0", "1"] and result["settings"]["seeds"] == [0, 1]
    assert [p["date"] for p in result["parts"]] == [p["date"] for p in parts]
    gain = result["summary"]["ours"]["gain_accuracy"]
    assert gain["n"] == 2 and gain["mean"] == pytest.approx(0.3) and gain["low"] < 0.3 < gain["high"]
    assert result["summary"] == summaries(result["seeds"])
    with pytest.raises(typer.BadParameter, match="settings differ in steps"):
        merged([parts[0], part(1, 0.5, settings | {"steps": 32})])
    with pytest.raises(typer.BadParameter, match="a seed is in more than one part"):
        merged([parts[0], part(0, 0.5, settings)])
    trl = [part(s, 0.4, settings | {"trl_seeds": [s], "trl_eval_every": s + 1}) for s in (2, 3)]
    with pytest.raises(typer.BadParameter, match="settings differ in trl_eval_every"):
        merged(trl)


HASH_PROBE = """
import hashlib, json, sys
from types import SimpleNamespace
from alignment.tasks.reasoning_gym import Mix
mix = Mix.from_settings(sys.argv[1], SimpleNamespace(seed=0, n_train_examples=12, n_eval_examples=4))
validation = mix.validation_rows()
rows = [validation, mix.training_rows(frozenset(r["question"] for r in validation))]
print(hashlib.sha256(json.dumps(rows).encode()).hexdigest())
"""


def rows_digest(source: str, hash_seed: str) -> str:
    env = os.environ | {"PYTHONHASHSEED": hash_seed}
    done = subprocess.run(
        [sys.executable, "-c", HASH_PROBE, source], env=env, capture_output=True, text=True, timeout=600, check=True
    )
    return done.stdout.strip()


@pytest.mark.slow  # three interpreters importing reasoning-gym: 10 s on 2 quiet cores
def test_rows_of_a_task_in_string_hash_order_are_the_same_in_every_process():
    """ransom_note iterates over sets of letters: its rows are drawn where string hashing is fixed, so processes with
    other hash seeds (a resumed run, another seed's run) draw the same rows."""
    assert rows_digest("ransom_note,chain_sum", "1") == rows_digest("ransom_note,chain_sum", "2")


@pytest.mark.slow  # two interpreters importing reasoning-gym: 8 s on 2 quiet cores
@pytest.mark.skipif(not sys.flags.hash_randomization, reason="string hashing is fixed here: rows are drawn in-process")
def test_rows_in_string_hash_order_come_from_one_child_per_request(monkeypatch):
    """A run asks for the same rows more than once (bare prompts and chat prompts): the child that draws them with
    fixed hashing runs once per request, and each caller gets its own copy."""
    import alignment.tasks.reasoning_gym as module

    children = []
    real_run = subprocess.run
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: children.append(a) or real_run(*a, **k))
    monkeypatch.setattr(module, "_FIXED_HASHING_REPLIES", {})
    mix = Mix.from_settings("ransom_note", settings("ransom_note"))
    first = mix.generate("ransom_note", {}, 5, 3)
    first[0]["question"] = "changed by its caller"
    again = mix.generate("ransom_note", {}, 5, 3)
    other = mix.generate("ransom_note", {}, 6, 3)
    assert len(children) == 2
    assert again[0]["question"] != "changed by its caller" and again[1:] == first[1:] and other != again


SURVEY = """
import hashlib, json
import reasoning_gym, reasoning_gym.factory
out = {}
for name in sorted(reasoning_gym.factory.DATASETS):
    try:
        entries = reasoning_gym.create_dataset(name, size=4, seed=0)
        text = json.dumps([[e["question"], str(e["answer"])] for e in entries])
        out[name] = hashlib.sha256(text.encode()).hexdigest()
    except Exception as error:  # a task needing data it cannot download here: not this test's matter
        out[name] = type(error).__name__
print("SURVEY", json.dumps(out))  # after whatever the generators print themselves
"""


@pytest.mark.slow  # every reasoning-gym task generated twice: a minute on 2 quiet cores
def test_the_tasks_in_string_hash_order_are_those_listed():
    """Every reasoning-gym task's first rows under two hash seeds: those that differ are HASH_ORDERED, no more."""
    from alignment.tasks.reasoning_gym import HASH_ORDERED

    def survey(hash_seed: str) -> dict[str, str]:
        env = os.environ | {"PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-c", SURVEY], env=env, capture_output=True, text=True, timeout=900, check=True
        )
        return json.loads(done.stdout.rpartition("SURVEY ")[2])

    first, second = survey("1"), survey("2")
    assert {name for name in first if first[name] != second[name]} == HASH_ORDERED
