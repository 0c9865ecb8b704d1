"""The 2026 CS336 handout's data and prompts: 6,400 training and 1,024 validation questions of the shipped GSM8K,
drawn as the documentation says (random.Random(0).sample of the indices, kept in file order), and the prompts
r1_zero_three_shot_gsm8k (an r1_zero prompt: stops at </answer>) and question_only_boxed (a question_only one)."""

import json
import random
import re
from pathlib import Path

import pytest

from alignment.data.splits import run_data
from alignment.grader import question_only_reward_fn, r1_zero_reward_fn
from alignment.grading.answers import gsm8k_ground_truth
from alignment.grpo.config import GRPOConfig
from alignment.prompts import PROMPT_NAMES, format_prompt, load_prompt, prompt_kind, stop_strings
from alignment.tasks.building import run_tasks

GSM8K = Path(__file__).resolve().parents[1] / "data" / "gsm8k"


def questions(path: Path) -> list[str]:
    return [json.loads(line)["question"] for line in path.read_text().splitlines()]


def test_the_handouts_6400_and_1024_questions_are_seed_0_samples_in_file_order():
    train, test = questions(GSM8K / "train.jsonl"), questions(GSM8K / "test.jsonl")
    assert (len(train), len(test)) == (7473, 1319)
    data = run_data("gsm8k", "train", None, 1024, n_train=6400)
    expected_train = [train[i] for i in sorted(random.Random(0).sample(range(7473), 6400))]
    expected_validation = [test[i] for i in sorted(random.Random(0).sample(range(1319), 1024))]
    assert [e.question for e in data.train] == expected_train
    assert [e.question for e in data.validation] == expected_validation
    assert not set(expected_train) & set(expected_validation)
    assert any("6400 of the 7473" in note for note in data.notes)


def test_the_settings_carry_the_draw_into_a_run():
    config = GRPOConfig(dataset="gsm8k", n_train_examples=6400, n_eval_examples=1024, prompt="r1_zero")
    train, validation = run_tasks(config)
    assert (len(train.questions), len(validation.questions)) == (6400, 1024)
    assert len(run_tasks(GRPOConfig(dataset="gsm8k", n_eval_examples=8))[0].questions) == 7473  # default: all
    with pytest.raises(ValueError, match="--n-train-examples must be >= 1"):
        run_tasks(GRPOConfig(dataset="gsm8k", n_train_examples=0))


def test_three_shot_is_r1_zero_with_three_worked_training_problems():
    template_name = "r1_zero_three_shot_gsm8k"
    template, r1_zero = load_prompt(template_name), load_prompt("r1_zero")
    header = r1_zero[: r1_zero.index("User: {question}")]
    assert template.startswith(header) and template.endswith("User: {question}\nAssistant: <think>")
    assert template.count("{question}") == 1
    assert prompt_kind("r1_zero_three_shot_gsm8k") == "r1_zero"
    assert stop_strings("r1_zero_three_shot_gsm8k") == ("</answer>",)
    shots = re.findall(r"User: (.+)\nAssistant: <think>(.+</answer>)\n", template)
    assert len(shots) == 3
    records = [json.loads(line) for line in (GSM8K / "train.jsonl").read_text().splitlines()[:3]]
    for (question, response), record in zip(shots, records, strict=True):
        assert question == record["question"]
        # each worked answer is what the r1_zero grader calls correct against the shipped ground truth
        assert r1_zero_reward_fn(response, gsm8k_ground_truth(record["answer"]))["reward"] == 1.0
    task, _ = run_tasks(GRPOConfig(dataset="gsm8k", n_train_examples=2, n_eval_examples=2, prompt=template_name))
    row = task.truths[0]
    assert task.questions[0] == format_prompt(template, row["question"])
    for response, _ in shots:  # graded as r1_zero grades, against the row's answer
        assert task.reward_fn(response, row) == r1_zero_reward_fn(response, row["answer"])


def test_question_only_boxed_asks_for_a_box_and_is_graded_by_it():
    template = load_prompt("question_only_boxed")
    assert prompt_kind("question_only_boxed") == "question_only" and stop_strings("question_only_boxed") == ()
    assert template.startswith("{question}") and "\\boxed{}" in template and "{{" not in template
    assert format_prompt(template, "What is 2 + 2?").startswith("What is 2 + 2? ")
    assert question_only_reward_fn("So it is \\boxed{4}.", "4")["reward"] == 1.0
    assert set(PROMPT_NAMES) >= {"r1_zero", "question_only", "r1_zero_three_shot_gsm8k", "question_only_boxed"}
