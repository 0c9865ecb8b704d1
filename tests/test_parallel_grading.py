from pathlib import Path

import pytest

from alignment.grader import lenient_r1_zero_reward_fn, r1_zero_reward_fn
from alignment.grading.parallel import ParallelGrader
from alignment.utils.atomic import atomic_write_jsonl


def test_parallel_grades_equal_sequential_grades():
    answers = ["18", "\\frac{36}{2}", "17", "1,8", "\\boxed{18}", "18.0", "nineteen"] * 10
    responses = [f"x </think> <answer>{a}</answer>" for a in answers] + ["no format"] * 10
    truths = ["18"] * len(responses)
    with ParallelGrader(r1_zero_reward_fn, workers=2) as grader:
        parallel = grader(responses, truths)
        again = grader(responses[:40], truths[:40])  # workers are reused
    assert parallel == [r1_zero_reward_fn(r, t) for r, t in zip(responses, truths)]
    assert sum(s["reward"] for s in parallel) == 30  # the course's grader: an integer needs an integer, not 36/2
    assert again == parallel[:40]
    with ParallelGrader(lenient_r1_zero_reward_fn, workers=2) as grader:  # the lenient mode travels by name too
        assert sum(s["reward"] for s in grader(responses, truths)) == 40


def test_parallel_needs_an_importable_reward_fn():
    with pytest.raises(ValueError, match="module-level function"):
        ParallelGrader(lambda response, truth: {"reward": 0.0}, workers=2)
    assert ParallelGrader(lambda r, t: {"reward": 1.0}, workers=1)(["a"], ["b"]) == [{"reward": 1.0}]


def test_interrupted_atomic_write_leaves_no_file(tmp_path: Path):
    def rows():
        yield {"a": 1}
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write_jsonl(tmp_path / "generations.jsonl", rows())
    assert not (tmp_path / "generations.jsonl").exists()
    atomic_write_jsonl(tmp_path / "generations.jsonl", [{"a": 1}, {"b": 2}])
    assert (tmp_path / "generations.jsonl").read_text() == '{"a": 1}\n{"b": 2}\n'
