"""SFT data: prompt / response / ground_truth records, from jsonl or built offline as GSM8K reasoning traces.

Two shapes of record, one result (`SFTExample`):
- `sft`: the handout's MATH `sft.jsonl` shape, one JSON object per line with `prompt`, `response` and, optionally,
  `ground_truth` (needed only to filter by correctness), from a .jsonl path, a local dataset folder or a hub id;
- `gsm8k`: GSM8K question/answer records turned into r1_zero traces: the worked solution, with its `<<48/2=24>>`
  calculator annotations stripped, is the thinking and the `#### N` number the answer.
`auto` reads the shape from the first record. A malformed line or a missing field raises ValueError naming file,
line (hub row) and field, as alignment.data.math_datasets does.

N examples of a source (the handout's dataset-size experiment) are drawn at random with a fixed seed and kept in
the source's order: the first N of one seeded shuffle, so a smaller N's examples are among a larger N's.
"""

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from alignment.data.arithmetic import arithmetic_records, is_arithmetic
from alignment.data.math_datasets import (
    HUB_DATASETS,
    SUBSET_SEED,
    MathExample,
    Rows,
    is_folder_or_hub_id,
    load_hub,
    load_named,
    read_jsonl,
    to_example,
    unknown_source,
)
from alignment.prompts import format_prompt

SFTFormat = Literal["sft", "gsm8k"]
DataFormat = Literal["auto", "sft", "gsm8k"]
FIELDS: dict[SFTFormat, str] = {"sft": "prompt, response", "gsm8k": "question, answer"}
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


def record_format(record: Any, where: str) -> SFTFormat:
    """`sft` for a prompt/response record, `gsm8k` for a question/answer one; ValueError naming both otherwise."""
    if isinstance(record, dict) and "prompt" in record and "response" in record:
        return "sft"
    if isinstance(record, dict) and "question" in record and "answer" in record:
        return "gsm8k"
    has = f"fields {', '.join(record)}" if isinstance(record, dict) else f"a {type(record).__name__}"
    raise ValueError(f"{where}: neither an SFT record ({FIELDS['sft']}) nor a GSM8K one ({FIELDS['gsm8k']}): {has}")


def sft_rows(source: str, split: str) -> Rows:
    """The records of `source`: a .jsonl file, a generated `arithmetic?...` task, a short name's data (`gsm8k`: the
    shipped copy), a folder or a hub id."""
    if Path(source).is_file():
        return read_jsonl(Path(source))
    if is_arithmetic(source):
        return list(arithmetic_records(source, split))
    if source in HUB_DATASETS:
        return load_named(source, split)
    if is_folder_or_hub_id(source):
        return load_hub(source, None, split)
    raise unknown_source(source)


def random_subset(items: list, n: int | None) -> list:
    """`n` items drawn at random by a fixed seed, in their order: the first n of one seeded shuffle, so that the
    items of a smaller n are among those of a larger one."""
    if n is None or n >= len(items):
        return items
    order = list(range(len(items)))
    random.Random(SUBSET_SEED).shuffle(order)
    return [items[i] for i in sorted(order[:n])]


def load_sft_examples(
    source: str, data_format: DataFormat, template: str, split: str = "train", limit: int | None = None
) -> list[SFTExample]:
    """Load `source` (a .jsonl file, a local dataset folder or a hub id; `gsm8k` names the shipped GSM8K).

    `sft` records are used as they are; `gsm8k` records become traces after `template` (e.g. r1_zero); `auto`
    takes the first record's shape, and a format given that the first record does not have is an error naming
    --data-format. `limit` keeps N examples drawn at random by a fixed seed (random_subset), the handout's
    "unique examples".
    """
    rows = sft_rows(source, split)
    if not rows:
        raise ValueError(f"dataset {source!r} has no examples")
    where, first = rows[0]
    found = record_format(first, where)
    if data_format not in ("auto", found):
        raise ValueError(
            f"{where}: a record of --data-format {found} ({FIELDS[found]}), given --data-format {data_format}; pass "
            f"--data-format {found}, or auto to read the format from the first record"
        )
    if found == "gsm8k":
        examples = [gsm8k_trace(to_example(record, "gsm8k", at), template) for at, record in rows]
    else:
        examples = [to_sft_example(record, at) for at, record in rows]
    return random_subset(examples, limit)
