"""Math datasets: MATH-style and GSM8K jsonl from a local path, a local dataset folder, or a hub id.

Every record becomes a `MathExample`; a malformed line or a missing field raises ValueError naming the
file, the line (row, for hub datasets) and the field.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from alignment.math_answers import gsm8k_ground_truth

DatasetKind = Literal["math", "gsm8k"]
# Short names -> (hub id, config, split). MATH-500 is the standard held-out slice of MATH.
HUB_DATASETS: dict[str, tuple[str, str | None, str]] = {
    "math": ("HuggingFaceH4/MATH-500", None, "test"),
    "gsm8k": ("openai/gsm8k", "main", "test"),
}
_REQUIRED = {"math": ("problem", "answer"), "gsm8k": ("question", "answer")}


@dataclass(frozen=True)
class MathExample:
    question: str
    answer: str  # the ground-truth final answer the grader compares against
    solution: str = ""  # the worked solution, when the dataset has one
    meta: dict[str, Any] = field(default_factory=dict)  # level, subject, ... as the source gives them


def _field(record: dict[str, Any], name: str, where: str) -> str:
    if name not in record:
        raise ValueError(f"{where}: missing field {name!r}")
    value = record[name]
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ValueError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")
    return str(value)


def _detect_kind(record: dict[str, Any], where: str) -> DatasetKind:
    if "problem" in record:
        return "math"
    if "question" in record:
        return "gsm8k"
    raise ValueError(f"{where}: missing field 'problem' (MATH) or 'question' (GSM8K)")


def to_example(record: Any, kind: DatasetKind | None, where: str) -> MathExample:
    """One dataset record -> MathExample; `where` (file:line) names the record in errors."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    kind = kind or _detect_kind(record, where)
    question, answer = (_field(record, name, where) for name in _REQUIRED[kind])
    if kind == "gsm8k":
        try:
            return MathExample(question, gsm8k_ground_truth(answer), solution=answer)
        except ValueError as err:
            raise ValueError(f"{where}: field 'answer': {err}") from None
    meta = {k: v for k, v in record.items() if k not in ("problem", "answer", "solution")}
    return MathExample(question, answer, solution=str(record.get("solution", "")), meta=meta)


def read_jsonl(path: Path) -> list[tuple[str, Any]]:
    """(file:line, parsed object) for every non-blank line; bad JSON raises ValueError naming the line."""
    rows = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                rows.append((where, json.loads(line)))
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
    return rows


def load_hub(source: str, config: str | None, split: str) -> list[tuple[str, Any]]:
    import datasets  # heavy; only needed off the jsonl path

    rows = datasets.load_dataset(source, config, split=split)
    return [(f"{source}[{split}] row {i}", row) for i, row in enumerate(rows)]


def load_math_examples(
    source: str, kind: DatasetKind | None = None, split: str | None = None, limit: int | None = None
) -> list[MathExample]:
    """Load `source`: a short name (`math`, `gsm8k`), a .jsonl file, a local dataset folder, or a hub id.

    `kind` picks the field names (`problem` for MATH, `question` for GSM8K); None detects it per record.
    `split` applies to folders and hub ids (short names default to their test split).
    """
    if source in HUB_DATASETS:
        hub_id, config, default_split = HUB_DATASETS[source]
        rows = load_hub(hub_id, config, split or default_split)
        kind = kind or source  # type: ignore[assignment]
    elif Path(source).is_file():
        rows = read_jsonl(Path(source))
    elif Path(source).is_dir() or ("/" in source and not source.endswith((".jsonl", ".json"))):
        rows = load_hub(source, None, split or "test")
    else:
        raise FileNotFoundError(f"dataset {source!r}: no such file, and not one of {', '.join(HUB_DATASETS)}")
    if limit is not None:
        rows = rows[:limit]
    examples = [to_example(record, kind, where) for where, record in rows]
    if not examples:
        raise ValueError(f"dataset {source!r} has no examples")
    return examples
