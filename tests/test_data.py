import json
from pathlib import Path

import pytest

from alignment.data.math_datasets import load_math_examples
from alignment.grader import question_only_reward_fn, r1_zero_reward_fn
from alignment.prompts import format_prompt, load_prompt
from tests.conftest import GSM8K

MATH_ROWS = [
    {
        "problem": "What is $1+1$?",
        "answer": "2",
        "solution": "It is $\\boxed{2}$.",
        "level": "Level 1",
        "subject": "Algebra",
    },
    {
        "problem": "Simplify $\\frac{2}{4}$.",
        "answer": "\\frac{1}{2}",
        "solution": "...",
        "level": "Level 2",
        "subject": "Prealgebra",
    },
]
GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,200 more than $800. Price?", "answer": "1200 + 800 = 2000\n#### 2,000"},
]


def write_jsonl(path: Path, rows: list, raw_lines: tuple[str, ...] = ()) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(raw_lines))
    return path


def test_loads_math_and_gsm8k_jsonl(tmp_path):
    math = load_math_examples(str(write_jsonl(tmp_path / "math.jsonl", MATH_ROWS)))
    assert [e.answer for e in math] == ["2", "\\frac{1}{2}"]
    assert math[0].meta == {"level": "Level 1", "subject": "Algebra"} and "boxed" in math[0].solution
    gsm = load_math_examples(str(write_jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS)), kind="gsm8k")
    assert [e.answer for e in gsm] == ["7", "2000"]
    assert gsm[1].question.startswith("A car") and gsm[1].solution.endswith("#### 2,000")
    assert len(load_math_examples(str(tmp_path / "gsm.jsonl"), limit=1)) == 1


def test_local_dataset_folder_goes_through_datasets(tmp_path):
    folder = tmp_path / "my_gsm8k"
    folder.mkdir()
    write_jsonl(folder / "test.jsonl", GSM8K_ROWS)
    examples = load_math_examples(str(folder), kind="gsm8k", split="test")
    assert [e.answer for e in examples] == ["7", "2000"]


@pytest.mark.parametrize(
    "rows,raw,kind,message",
    [
        (MATH_ROWS, ("{not json\n",), None, r"bad.jsonl:3: not valid JSON"),
        ([{"problem": "p"}], (), "math", r"bad.jsonl:1: missing field 'answer'"),
        ([MATH_ROWS[0], {"answer": "1"}], (), None, r"bad.jsonl:2: missing field 'problem' \(MATH\) or 'question'"),
        ([{"question": "q", "answer": "no final line"}], (), "gsm8k", r"bad.jsonl:1: field 'answer': .*####"),
        ([{"question": ["q"], "answer": "#### 1"}], (), "gsm8k", r"bad.jsonl:1: field 'question' must be a string"),
        ([[1, 2]], (), None, r"bad.jsonl:1: expected a JSON object"),
    ],
)
def test_malformed_input_names_file_line_and_field(tmp_path, rows, raw, kind, message):
    path = write_jsonl(tmp_path / "bad.jsonl", rows, raw)
    with pytest.raises(ValueError, match=message):
        load_math_examples(str(path), kind=kind)


def test_missing_file_and_empty_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_math_examples(str(tmp_path / "nope.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no examples"):
        load_math_examples(str(tmp_path / "empty.jsonl"))


def test_prompts():
    r1 = load_prompt("r1_zero")
    assert r1.endswith("Assistant: <think>") and "User: {question}" in r1
    assert format_prompt(r1, "What is $\\frac{1}{2}$?").count("\\frac{1}{2}") == 1
    assert format_prompt(load_prompt("question_only"), "Q?") == "Q?"
    with pytest.raises(ValueError, match="unknown prompt 'r2'"):
        load_prompt("r2")


@pytest.mark.slow  # grades all 8,792 GSM8K answers, 3-4 s
def test_gsm8k_gold_answers_all_graded_correct():
    for split, size in (("train", 7473), ("test", 1319)):
        path = GSM8K / f"{split}.jsonl"
        examples = load_math_examples(str(path), kind="gsm8k")
        assert len(examples) == size
        raw_finals = [e.solution.rsplit("####", 1)[1].strip() for e in examples]  # commas and all
        rewards = [
            r1_zero_reward_fn(f"x </think> <answer>{raw}</answer>", e.answer)["reward"]
            for raw, e in zip(raw_finals, examples)
        ]
        assert sum(rewards) == size


def test_sample_math_fixture_solutions_grade_correct():
    examples = load_math_examples(str(Path(__file__).parents[1] / "data" / "sample_math.jsonl"), kind="math")
    assert len(examples) == 8
    assert all(question_only_reward_fn(e.solution, e.answer)["reward"] == 1.0 for e in examples)
