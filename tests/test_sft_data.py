"""SFT data: GSM8K reasoning traces in the r1_zero format, and prompt/response jsonl with errors naming the line."""

import json
from pathlib import Path

import pytest

from alignment.data.math_datasets import MathExample
from alignment.data.sft_examples import gsm8k_trace, load_sft_examples, strip_calculator_annotations
from alignment.grader import r1_zero_reward_fn
from alignment.prompts import format_prompt, load_prompt
from alignment.sft_run import load_training_examples, sft_validation, validation_source
from alignment.supervised.config import SFTConfig
from tests.conftest import GSM8K
from tests.hub_copies import N_TRAIN, TEST_IDS, TRAIN_IDS, math_problem, write_course_math

NATALIA = {
    "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
    "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
}


def test_calculator_annotations_are_stripped():
    assert strip_calculator_annotations("48/2 = <<48/2=24>>24 and $<<0.2*50=10>>10") == "48/2 = 24 and $10"
    assert strip_calculator_annotations("no <b>tags</b> here") == "no <b>tags</b> here"


def test_gsm8k_trace_is_an_r1_zero_answer_the_grader_accepts(tmp_path):
    template = load_prompt("r1_zero")
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(NATALIA) + "\n")
    [example] = load_sft_examples(str(path), "gsm8k", template)
    assert example.prompt == format_prompt(template, NATALIA["question"])
    assert example.response == (
        "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether in April and May. "
        "</think> <answer> 72 </answer>"
    )
    assert example.ground_truth == "72"
    assert r1_zero_reward_fn(example.response, "72") == {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}
    # the answer is the #### number even when the solution mentions other numbers last
    trace = gsm8k_trace(MathExample("q", "5", solution="2 + 3 = 5, not 6\n#### 5"), "{question}")
    assert trace.response.endswith("not 6 </think> <answer> 5 </answer>")


def test_sft_jsonl_loads_with_limit_and_optional_truth(tmp_path):
    path = tmp_path / "sft.jsonl"
    rows = [
        {"prompt": "P1", "response": "R1", "ground_truth": "1"},
        {"prompt": "P2", "response": "R2"},
        {"prompt": "P3", "response": "R3", "ground_truth": 3},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = load_sft_examples(str(path), "sft", "{question}")
    assert [(e.prompt, e.response, e.ground_truth) for e in examples] == [
        ("P1", "R1", "1"),
        ("P2", "R2", None),
        ("P3", "R3", "3"),
    ]
    assert len(load_sft_examples(str(path), "sft", "{question}", limit=2)) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"prompt": "P"}, "sft.jsonl:2: missing field 'response'"),
        ({"prompt": "P", "response": 3}, "sft.jsonl:2: field 'response' must be a string"),
        ([1, 2], "sft.jsonl:2: expected a JSON object"),
    ],
)
def test_bad_sft_lines_name_file_line_and_field(tmp_path, line, message):
    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps({"prompt": "P", "response": "R"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(ValueError, match=message):
        load_sft_examples(str(path), "sft", "{question}")


def test_missing_source_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_sft_examples(str(tmp_path / "nope.jsonl"), "sft", "{question}")


def test_shipped_gsm8k_train_traces_all_grade_correct():
    examples = load_sft_examples(str(GSM8K / "train.jsonl"), "gsm8k", load_prompt("r1_zero"), limit=200)
    assert len(examples) == 200
    assert not any("<<" in e.response for e in examples)
    assert all(r1_zero_reward_fn(e.response, e.ground_truth)["reward"] == 1.0 for e in examples)


def test_the_format_is_read_from_the_first_record_and_a_wrong_one_names_the_flag(tmp_path):
    course = write_course_math(tmp_path / "MATH", load_prompt("r1_zero"))  # the handout's sft.jsonl shape
    examples = load_sft_examples(str(course / "sft.jsonl"), "auto", load_prompt("r1_zero"))
    assert len(examples) == N_TRAIN and examples[0].ground_truth == math_problem(TRAIN_IDS[0])["answer"]
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text(json.dumps(NATALIA) + "\n")
    assert load_sft_examples(str(gsm8k), "auto", "{question}")[0].ground_truth == "72"
    with pytest.raises(
        ValueError,
        match=r"sft.jsonl:1: a record of --data-format sft \(prompt, response\), given --data-format gsm8k; pass "
        r"--data-format sft",
    ):
        load_sft_examples(str(course / "sft.jsonl"), "gsm8k", "{question}")
    with pytest.raises(
        ValueError,
        match=r"gsm8k.jsonl:1: a record of --data-format gsm8k \(question, answer\), given --data-format sft",
    ):
        load_sft_examples(str(gsm8k), "sft", "{question}")
    with pytest.raises(
        ValueError,
        match=r"train.jsonl:1: neither an SFT record \(prompt, response\) nor a GSM8K one \(question, answer\): "
        r"fields problem",
    ):
        load_sft_examples(str(course / "train.jsonl"), "auto", "{question}")


def test_n_examples_are_a_seeded_random_subset_in_file_order(tmp_path):
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"P{i}", "response": f"R{i}"}) + "\n" for i in range(64)))
    picked = [int(e.prompt[1:]) for e in load_sft_examples(str(path), "sft", "{question}", limit=8)]
    assert len(picked) == 8 and picked == sorted(picked) and picked != list(range(8))  # not the first 8
    assert picked == [int(e.prompt[1:]) for e in load_sft_examples(str(path), "sft", "{question}", limit=8)]
    larger = [int(e.prompt[1:]) for e in load_sft_examples(str(path), "sft", "{question}", limit=16)]
    assert set(picked) < set(larger)  # the dataset-size sweep's smaller sets lie inside its larger ones
    assert len(load_sft_examples(str(path), "sft", "{question}", limit=100)) == 64


def test_sft_trains_on_the_handouts_math_traces_and_validates_on_math(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    course = write_course_math(tmp_path / "data" / "MATH", load_prompt("r1_zero"))
    config = SFTConfig()
    examples, counts = load_training_examples(config)  # data/MATH/sft.jsonl, its format read from its records
    assert counts == {"n_examples_loaded": N_TRAIN} and examples[0].response.endswith("</answer>")
    validation = sft_validation(config, examples)  # MATH/validation.jsonl beside it, whole
    assert validation_source(config) == str(Path("data") / "MATH" / "validation.jsonl")
    logged = sorted(validation.logged_truth(row) for row in validation.truths)  # the math task's rows: answers logged
    assert logged == sorted(math_problem(i)["answer"] for i in TEST_IDS)
    assert validation.reward_fn("x </think> <answer>nothing</answer>", validation.truths[0]) == {
        "format_reward": 1.0,
        "answer_reward": 0.0,
        "reward": 0.0,
    }
    # GSM8K traces validate on GSM8K: the test.jsonl beside train.jsonl, or the short name's test split
    (tmp_path / "gsm8k").mkdir()
    for split in ("train", "test"):
        (tmp_path / "gsm8k" / f"{split}.jsonl").write_text(json.dumps(NATALIA) + "\n")
    assert validation_source(SFTConfig(dataset="gsm8k/train.jsonl")) == str(Path("gsm8k") / "test.jsonl")
    assert validation_source(SFTConfig(dataset="gsm8k")) == "gsm8k"
    lone = tmp_path / "traces.jsonl"
    lone.write_text((course / "sft.jsonl").read_text())
    assert validation_source(SFTConfig(dataset=str(lone))) == "math"  # MATH's test problems, as the handout's


def test_sft_refuses_an_evaluation_split_unless_asked(tmp_path):
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps(NATALIA) + "\n")
    with pytest.raises(ValueError, match=r"--dataset: .*test.jsonl is named as a test split.*--train-on-evaluation"):
        load_training_examples(SFTConfig(dataset=str(test)))
    examples, _ = load_training_examples(SFTConfig(dataset=str(test), train_on_evaluation_split=True))
    assert examples[0].ground_truth == "72"
