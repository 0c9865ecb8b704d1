"""Answer parsers for free-text model outputs (CS336 A5 supplement): MMLU option letters, GSM8K numbers.

Each returns None when the output holds no answer of the expected kind, so "unparsed" is never confused
with a wrong answer.
"""

import re
from typing import Any

MMLU_LETTERS = "ABCD"
# "The correct answer is B", "Answer: (C)", "answer is **D**": a stated answer wins over letters elsewhere
_STATED = re.compile(r"answer\s*(?:is|:)?\s*(?:option\s*)?[(*\s]*([ABCD])\b", re.IGNORECASE)
_LONE_LETTER = re.compile(r"^\W*([ABCD])\W*$")
# A number: optional sign, digits with optional thousands commas, optional decimals
_NUMBER = re.compile(r"-?\d(?:[\d,]*\d)?(?:\.\d+)?")


def parse_mmlu_response(mmlu_example: dict[str, Any], model_output: str) -> str | None:
    """The option letter the output chooses: a stated answer, a bare letter, or the exact text of one option."""
    stated = _STATED.findall(model_output)
    if stated:
        return stated[-1].upper()
    lone = _LONE_LETTER.match(model_output)
    if lone:
        return lone.group(1)
    text = model_output.strip().rstrip(".").lower()
    matches = [
        letter
        for letter, option in zip(MMLU_LETTERS, mmlu_example.get("options", []))
        if option.strip().lower() == text
    ]
    return matches[0] if len(matches) == 1 else None


def parse_gsm8k_response(model_output: str) -> str | None:
    """The last number in the output, thousands commas removed ('1,234.5' -> '1234.5'); None if there is none."""
    numbers = _NUMBER.findall(model_output)
    return numbers[-1].replace(",", "") if numbers else None
