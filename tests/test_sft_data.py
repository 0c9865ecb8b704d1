"""SFT data: GSM8K reasoning traces in the r1_zero format, and prompt/response jsonl with errors naming the line."""

import json

import pytest

from alignment.data.math_datasets import MathExample
from alignment.data.sft_examples import gsm8k_trace, load_sft_examples, strip_calculator_annotations
from alignment.grader import r1_zero_reward_fn
from alignment.prompts import format_prompt, load_prompt

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


def test_shared_gsm8k_train_traces_all_grade_correct(shared_data):
    examples = load_sft_examples(str(shared_data / "gsm8k" / "train.jsonl"), "gsm8k", load_prompt("r1_zero"), limit=200)
    assert len(examples) == 200
    assert not any("<<" in e.response for e in examples)
    assert all(r1_zero_reward_fn(e.response, e.ground_truth)["reward"] == 1.0 for e in examples)
