"""MMLU letter and GSM8K last-number parsers, through the reference adapters."""

import pytest

from tests.adapters import run_parse_gsm8k_response, run_parse_mmlu_response

MMLU = {
    "subject": "virology",
    "question": "How many human polyomaviruses are known at present?",
    "options": ["100", "1", "10", "unknown"],
    "answer": "A",
}


@pytest.mark.parametrize(
    ("output", "letter"),
    [
        ("The correct answer is B. Because ...", "B"),
        ("Answer: (C)", "C"),
        ("the answer is **d**", "D"),
        ("A or B? After thinking, the answer is A", "A"),
        ("C", "C"),
        ("(B).", "B"),
        ("unknown", "D"),  # the exact text of one option
        ("I am not sure which one it is.", None),
        ("", None),
    ],
)
def test_parse_mmlu_response(output, letter):
    assert run_parse_mmlu_response(MMLU, output) == letter


@pytest.mark.parametrize(
    ("output", "number"),
    [
        ("Natalia sold 48 + 24 = 72 clips.", "72"),
        ("She earned $1,234.50 in total, then spent -3", "-3"),
        ("The total is 1,234.50.", "1234.50"),
        ("2 apples and 3 pears make 5", "5"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_parse_gsm8k_response(output, number):
    assert run_parse_gsm8k_response(output) == number
