"""Math datasets (MATH and GSM8K, every way they are shipped) as `MathExample`s.

A source is a short name (`math`, `math500`, `competition_math`, `hendrycks_math`, `gsm8k`), a generated task
(`arithmetic` or `arithmetic?ops=1-3&max=50&seed=1`: word problems, alignment/data/arithmetic.py), a .jsonl file, a
local dataset folder (a download of a hub repo as it is, or a folder of `<split>.jsonl` files such as the course's
`MATH/{train,validation,sft}.jsonl`), or a hub id. A folder of `<split>.jsonl` files is read line by line; other
folders and hub ids go through `datasets.load_dataset`, which reads a repo's own layout (parquet files, the configs
in its README); a repo whose only configs are per-subject ones (EleutherAI/hendrycks_math) is read whole, one
config after another.

`gsm8k` reads the copy shipped in the repository's data/gsm8k/ (the course repositories' train.jsonl and
test.jsonl, OpenAI's original files); the hub's copy stays reachable by its id, `openai/gsm8k`. Other short names and
hub ids are looked up first in `$ALIGNMENT_DATA_MIRROR/<owner>/<name>/` when that folder exists: a local copy of the
repo (e.g. made by `huggingface-cli download --repo-type dataset`) used exactly as the hub's. A hub id that neither
the mirror, the hub cache nor the hub can give is a one-line error (alignment/utils/hub.py).

A MATH record's answer is its `answer` field, else the last `\\boxed{}` / `\\fbox{}` of its `solution` (nested braces
kept); a GSM8K record's is the number after `####`. A malformed line or a missing field raises ValueError naming
the file, the line (row, for datasets) and the field.
"""

import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from alignment.data.arithmetic import SPLITS as ARITHMETIC_SPLITS
from alignment.data.arithmetic import arithmetic_records, is_arithmetic
from alignment.grading.answers import gsm8k_ground_truth, last_boxed
from alignment.utils.hub import MIRROR_ENV, check_hub_source

DatasetKind = Literal["math", "gsm8k"]
SUBSET_SEED = 0  # fixed, so every run and script evaluating N questions of a source sees the same N
SHIPPED_DATA = Path(__file__).resolve().parents[2] / "data"  # the repository's data/ folder


@dataclass(frozen=True)
class HubDataset:
    """A dataset named by a short name: its repo, the config to read, and which split trains and which evaluates;
    `shipped`, a folder of `<split>.jsonl` in the repository's data/ that the short name reads instead of the repo."""

    repo: str
    config: str | None
    train_split: str | None  # None: the repo has no training split (MATH-500 is a test set)
    eval_split: str  # competition_math's is its one training split, of which a tenth is held out
    shipped: str | None = None


HUB_DATASETS: dict[str, HubDataset] = {
    # MATH (Hendrycks et al.): 7,500 training and 5,000 test problems, `answer` only inside `solution`
    "math": HubDataset("DigitalLearningGmbH/MATH-lighteval", "default", "train", "test"),
    # MATH-500 (Lightman et al.): 500 of MATH's test problems, with `answer`
    "math500": HubDataset("HuggingFaceH4/MATH-500", None, None, "test"),
    # the UW handout's copy: all 12,500 MATH problems, train and test, in one split
    "competition_math": HubDataset("qwedsacf/competition_math", None, "train", "train"),
    # MATH with one config per subject, read whole
    "hendrycks_math": HubDataset("EleutherAI/hendrycks_math", None, "train", "test"),
    # GSM8K: 7,473 training and 1,319 test problems, shipped as the course repositories ship them; by its id, the
    # hub repo is read in its `main` config (not `socratic`)
    "gsm8k": HubDataset("openai/gsm8k", "main", "train", "test", shipped="gsm8k"),
}
# A hub id read without a config takes the one its short name reads (openai/gsm8k: main, not main and socratic)
REPO_CONFIGS = {hub.repo: hub.config for hub in HUB_DATASETS.values()}


@dataclass(frozen=True)
class MathExample:
    question: str
    answer: str  # the ground-truth final answer the grader compares against
    solution: str = ""  # the worked solution, when the dataset has one
    meta: dict[str, Any] = field(default_factory=dict)  # level, subject, ... as the source gives them


Rows = list[tuple[str, Any]]  # (where: "file:line" or "repo[split] row i", record)


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


def math_answer(record: dict[str, Any], where: str) -> str:
    """`answer` when present, else the last \\boxed{} / \\fbox{} of `solution`."""
    if record.get("answer") is not None:
        return _field(record, "answer", where)
    if "solution" not in record:
        raise ValueError(f"{where}: missing field 'answer' (and no 'solution' to take a \\boxed{{}} answer from)")
    boxed = last_boxed(_field(record, "solution", where))
    if boxed is None or not boxed.strip():
        raise ValueError(
            f"{where}: missing field 'answer', and field 'solution' has no \\boxed{{}} or \\fbox{{}} answer"
        )
    return boxed.strip()


def to_example(record: Any, kind: DatasetKind | None, where: str) -> MathExample:
    """One dataset record -> MathExample; `where` (file:line) names the record in errors."""
    if not isinstance(record, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
    kind = kind or _detect_kind(record, where)
    if kind == "gsm8k":
        question, answer = _field(record, "question", where), _field(record, "answer", where)
        try:
            return MathExample(question, gsm8k_ground_truth(answer), solution=answer)
        except ValueError as err:
            raise ValueError(f"{where}: field 'answer': {err}") from None
    question, answer = _field(record, "problem", where), math_answer(record, where)
    meta = {k: v for k, v in record.items() if k not in ("problem", "answer", "solution")}
    return MathExample(question, answer, solution=str(record.get("solution") or ""), meta=meta)


def read_jsonl(path: Path) -> Rows:
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


def hub_location(repo: str) -> str:
    """The repo's local copy under $ALIGNMENT_DATA_MIRROR when there is one, a local folder as it is, else the hub id
    itself once the hub (or its cache) can give it: SourceUnavailable, one line naming the remedies, if not."""
    mirror = os.environ.get(MIRROR_ENV)
    if mirror and (Path(mirror) / repo).is_dir():
        return str(Path(mirror) / repo)
    if not Path(repo).is_dir():
        check_hub_source(repo, "dataset")
    return repo


def named_location(name: str) -> str:
    """Where a short name's data is read from: its shipped folder, else its hub repo (hub_location)."""
    hub = HUB_DATASETS[name]
    return str(SHIPPED_DATA / hub.shipped) if hub.shipped else hub_location(hub.repo)


def is_folder_or_hub_id(source: str) -> bool:
    return Path(source).is_dir() or ("/" in source and not source.endswith((".jsonl", ".json")))


def unknown_source(source: str) -> FileNotFoundError:
    return FileNotFoundError(f"dataset {source!r}: no such file or folder, and not one of {', '.join(HUB_DATASETS)}")


def dataset_configs(location: str, config: str | None = None) -> list[str | None]:
    """The configs to read: the one asked for, else `default` or the only one, else every one (per-subject repos)."""
    if config is not None:
        return [config]
    import datasets  # heavy; only needed off the jsonl path

    names = datasets.get_dataset_config_names(location)
    if len(names) <= 1 or "default" in names:
        return [None]
    return list(names)


def jsonl_splits(folder: Path) -> dict[str, Path]:
    """A folder of `<split>.jsonl` files (the course's MATH/, MATH-500): split -> file. Read line by line rather
    than by `datasets`, which refuses splits whose columns differ (the course's train.jsonl has no `answer`)."""
    return {path.stem: path for path in sorted(folder.glob("*.jsonl"))} if folder.is_dir() else {}


def dataset_splits(source: str) -> list[str]:
    """The splits `source` has (a .jsonl file has one, named `file`)."""
    if Path(source).is_file():
        return ["file"]
    if is_arithmetic(source):
        return list(ARITHMETIC_SPLITS)
    if source not in HUB_DATASETS and not is_folder_or_hub_id(source):
        raise unknown_source(source)
    hub = HUB_DATASETS.get(source)
    location = named_location(source) if hub else hub_location(source)
    files = jsonl_splits(Path(location))
    if files:
        return list(files)
    import datasets

    config = dataset_configs(location, hub.config if hub else REPO_CONFIGS.get(source))[0]
    return list(datasets.get_dataset_split_names(location, config))


def load_named(name: str, split: str) -> Rows:
    """Rows of `split` of a short name's dataset: its shipped copy when the repository has one, else its hub repo."""
    hub = HUB_DATASETS[name]
    return load_hub(named_location(name), None, split) if hub.shipped else load_hub(hub.repo, hub.config, split)


def load_hub(source: str, config: str | None, split: str) -> Rows:
    """Rows of `split` of a hub id or local dataset folder, every config in turn when it has per-subject ones."""
    config = config or REPO_CONFIGS.get(source)
    location = hub_location(source)
    files = jsonl_splits(Path(location))
    if files:
        if split not in files:
            raise ValueError(
                f"{location} has no split {split!r} (its files: {', '.join(p.name for p in files.values())})"
            )
        return read_jsonl(files[split])
    import datasets

    rows: Rows = []
    for name in dataset_configs(location, config):
        part = datasets.load_dataset(location, name, split=split)
        label = f"{source}[{split}]" if name is None else f"{source}/{name}[{split}]"
        rows += [(f"{label} row {i}", row) for i, row in enumerate(part)]
    return rows


def spread_subset(items: list, limit: int | None) -> list:
    """`limit` items picked by a fixed seed, kept in their order: evaluations on N questions take these, since
    MATH's splits are ordered by subject and the first N would all be algebra."""
    if limit is None or limit >= len(items):
        return items
    keep = sorted(random.Random(SUBSET_SEED).sample(range(len(items)), limit))
    return [items[i] for i in keep]


def evaluation_split(source: str) -> str:
    """The split a source is evaluated on: a short name's own, else validation, test or the only split."""
    if source in HUB_DATASETS:
        return HUB_DATASETS[source].eval_split
    if is_arithmetic(source):
        return "test"
    splits = dataset_splits(source)
    return next((s for s in ("validation", "test") if s in splits), splits[0])


def load_math_examples(
    source: str, kind: DatasetKind | None = None, split: str | None = None, limit: int | None = None
) -> list[MathExample]:
    """Load `source`: a short name (`math`, `math500`, `competition_math`, `hendrycks_math`, `gsm8k`), a generated
    `arithmetic?...` task, a .jsonl file, a local dataset folder, or a hub id.

    `kind` picks the field names (`problem` for MATH, `question` for GSM8K); None detects it per record.
    `split` applies to short names, folders and hub ids; None is the source's evaluation split
    (`evaluation_split`). `limit` keeps the first N (evaluations take `spread_subset` of the whole instead).
    """
    if source in HUB_DATASETS:
        rows = load_named(source, split or HUB_DATASETS[source].eval_split)
        kind = kind or ("gsm8k" if source == "gsm8k" else "math")
    elif is_arithmetic(source):
        rows, kind = arithmetic_records(source, split or "test"), "gsm8k"
    elif Path(source).is_file():
        rows = read_jsonl(Path(source))
    elif is_folder_or_hub_id(source):
        rows = load_hub(source, None, split or evaluation_split(source))
    else:
        raise unknown_source(source)
    examples = [to_example(record, kind, where) for where, record in rows[:limit]]
    if not examples:
        raise ValueError(f"dataset {source!r} has no examples")
    return examples
