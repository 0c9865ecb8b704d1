"""SFT data: prompt / response / ground_truth records, from jsonl or built offline as GSM8K reasoning traces.

Two sources, one shape (`SFTExample`):
- `sft`: the handout's MATH `sft.jsonl` shape, one JSON object per line with `prompt`, `response` and, optionally,
  `ground_truth` (needed only to filter by correctness), from a .jsonl path, a local dataset folder or a hub id;
- `gsm8k`: GSM8K question/answer records turned into r1_zero traces: the worked solution, with its `<<48/2=24>>`
  calculator annotations stripped, is the thinking and the `#### N` number the answer.
A malformed line or a missing field raises ValueError naming file, line (hub row) and field, as
alignment.data.math_datasets does.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from alignment.data.math_datasets import HUB_DATASETS, MathExample, load_hub, load_math_examples, read_jsonl
from alignment.prompts import format_prompt

SFTFormat = Literal["sft", "gsm8k"]
_CALCULATOR = re.compile(r"<<[^<>]*>>")


@dataclass(frozen=True)
class SFTExample:
    prompt: str  # the full prompt text, template applied
    response: str  # the target continuation
    ground_truth: str | None = None  # the answer the grader compares against, when known


def strip_calculator_annotations(text: str) -> str:
    """'48/2 = <<48/2=24>>24' -> '48/2 = 24'."""
    return _CALCULATOR.sub("", text)


def gsm8k_trace(example: MathExample, template: str) -> SFTExample:
    """A GSM8K record as an r1_zero trace: `{reasoning} </think> <answer> {N} </answer>` after the prompt."""
    reasoning = strip_calculator_annotations(example.solution.rsplit("####", 1)[0]).strip()
    response = f"{reasoning} </think> <answer> {example.answer} </answer>"
    return SFTExample(format_prompt(template, example.question), response, example.answer)


def _text_field(record: dict[str, Any], name: str, where: str) -> str:
    if name not in record:
        raise ValueError(f"{where}: missing field {name!r}")
    if not isinstance(record[name], str):
        raise ValueError(f"{where}: field {name!r} must be a string, got {type(record[name]).__name__}")
    return record[name]


def to_sft_example(record: Any, where: str) -> SFTExample:
    """One `sft`-shaped record -> SFTExample; `where` (file:line) names the record in errors."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    prompt, response = _text_field(record, "prompt", where), _text_field(record, "response", where)
    truth = record.get("ground_truth")
    if truth is not None and not isinstance(truth, (str, int, float)):
        raise ValueError(f"{where}: field 'ground_truth' must be a string or number, got {type(truth).__name__}")
    return SFTExample(prompt, response, None if truth is None else str(truth))


def load_sft_examples(
    source: str, data_format: SFTFormat, template: str, split: str = "train", limit: int | None = None
) -> list[SFTExample]:
    """Load `source` (a .jsonl file, a local dataset folder or a hub id; `gsm8k` names the hub GSM8K).

    `sft` records are used as they are; `gsm8k` records become traces after `template` (e.g. r1_zero).
    `limit` keeps the first N examples (the handout's "unique examples").
    """
    if data_format == "gsm8k":
        examples = load_math_examples(source, kind="gsm8k", split=split, limit=limit)
        return [gsm8k_trace(e, template) for e in examples]
    if Path(source).is_file():
        rows = read_jsonl(Path(source))
    elif Path(source).is_dir() or ("/" in source and not source.endswith((".jsonl", ".json"))):
        rows = load_hub(source, None, split)
    else:
        known = "; `gsm8k` is a --data-format gsm8k source" if source in HUB_DATASETS else ""
        raise FileNotFoundError(f"dataset {source!r}: no such file or folder{known}")
    examples = [to_sft_example(record, where) for where, record in rows[:limit]]
    if not examples:
        raise ValueError(f"dataset {source!r} has no examples")
    return examples
