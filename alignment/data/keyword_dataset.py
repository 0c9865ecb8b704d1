"""A keyword-inclusion dataset: prompts from templates x keywords, answers sampled from a model through any
rollout engine and kept only when they earn reward 1, split 80% / 20% into train.jsonl and validation.jsonl.

Each line is {"prompt": the instruction, "answer": a rewarded response, "keywords": [words]}. Every random
choice draws from one seed, so the same seed, model and engine give byte-identical files.
"""

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alignment.data.keywords import (
    TEMPLATES,
    KeywordRewardFn,
    keyword_inclusion_reward_fn,
    keyword_instruction,
    keyword_word_reward_fn,
)
from alignment.data.task import Task
from alignment.prompts import format_prompt
from alignment.rollout.interface import RolloutEngine, SamplingConfig
from alignment.utils.atomic import atomic_write_jsonl

TRAIN_FILE, VALIDATION_FILE = "train.jsonl", "validation.jsonl"
VALIDATION_FRACTION = 0.2


def dataset_prompts(
    words: Sequence[str], keyword_counts: Sequence[int], prompts_per_count: int, seed: int
) -> list[tuple[str, list[str]]]:
    """(instruction, keywords) pairs: for each k in keyword_counts, up to prompts_per_count distinct
    (template, keyword set) combinations with k keywords, fewer when fewer exist."""
    words = list(dict.fromkeys(words))
    rng = random.Random(seed)
    pairs: list[tuple[str, list[str]]] = []
    for k in keyword_counts:
        if not 1 <= k <= len(words):
            raise ValueError(f"keywords per prompt must be in [1, {len(words)}] (the number of words), got {k}")
        seen: set[tuple[str, frozenset[str]]] = set()
        target = min(prompts_per_count, len(TEMPLATES) * math.comb(len(words), k))
        while len(seen) < target:
            template, chosen = rng.choice(TEMPLATES), rng.sample(words, k)
            if (template, frozenset(chosen)) not in seen:
                seen.add((template, frozenset(chosen)))
                pairs.append((keyword_instruction(template, chosen), chosen))
    return pairs


def build_keyword_dataset(
    engine: RolloutEngine,
    template: str,
    words: Sequence[str],
    keyword_counts: Sequence[int],
    prompts_per_count: int,
    samples_per_prompt: int,
    sampling: SamplingConfig,
    seed: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, validation) records. Each prompt (wrapped in `template`, which contains {question}) gets
    samples_per_prompt responses; the first one the stricter whole-word rule rewards becomes its answer (so that it
    passes either rule), and a prompt without one is dropped. The kept records are shuffled and round(20%) of them go
    to validation."""
    pairs = dataset_prompts(words, keyword_counts, prompts_per_count, seed)
    rollouts = engine.generate([format_prompt(template, q) for q, _ in pairs], samples_per_prompt, sampling)
    answers: dict[int, str] = {}
    for r in rollouts:
        if (
            r.prompt_index not in answers
            and keyword_word_reward_fn(r.text, pairs[r.prompt_index][1])["reward"] == 1  # the stricter rule
        ):
            answers[r.prompt_index] = r.text.strip()
    records = [{"prompt": q, "answer": answers[i], "keywords": k} for i, (q, k) in enumerate(pairs) if i in answers]
    random.Random(seed).shuffle(records)
    n_validation = round(len(records) * VALIDATION_FRACTION)
    return records[n_validation:], records[:n_validation]


def existing_dataset_files(directory: Path) -> list[str]:
    return [name for name in (TRAIN_FILE, VALIDATION_FILE) if (Path(directory) / name).exists()]


def write_keyword_dataset(
    directory: Path, train: list[dict[str, Any]], validation: list[dict[str, Any]], overwrite: bool = False
) -> None:
    """train.jsonl and validation.jsonl in `directory`; existing files are replaced only with overwrite."""
    existing = existing_dataset_files(directory)
    if existing and not overwrite:
        raise FileExistsError(f"{directory} already holds {', '.join(existing)}; pass overwrite to replace them")
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_jsonl(directory / TRAIN_FILE, train)
    atomic_write_jsonl(directory / VALIDATION_FILE, validation)


def read_keyword_records(path: Path) -> list[dict[str, Any]]:
    """The records of one file; a bad one is an error naming file:line and the field."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing")
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a JSON object")
        for field in ("prompt", "answer"):
            if not isinstance(record.get(field), str) or not record[field].strip():
                raise ValueError(f"{where}: field {field!r} must be a non-empty string")
        keywords = record.get("keywords")
        if (
            not isinstance(keywords, list)
            or not keywords
            or not all(isinstance(k, str) and k.isalpha() for k in keywords)
        ):
            raise ValueError(
                f"{where}: field 'keywords' must be a non-empty list of words (letters only), got {keywords!r}"
            )
        if keyword_inclusion_reward_fn(record["answer"], keywords)["reward"] != 1:
            raise ValueError(f"{where}: field 'answer' does not contain every keyword of {keywords}")
        records.append(record)
    if not records:
        raise ValueError(f"{path}: no records")
    return records


def load_keyword_dataset(
    directory: Path, template: str = "{question}", reward_fn: KeywordRewardFn = keyword_inclusion_reward_fn
) -> tuple[Task, Task]:
    """(train, validation) keyword tasks graded by `reward_fn` from a built dataset folder. `template` wraps each
    prompt; pass the policy's chat template (as keyword_tasks gets it) to train a chat model."""
    if "{question}" not in template:
        raise ValueError(f"template must contain {{question}}, got {template!r}")
    tasks = []
    for name in (TRAIN_FILE, VALIDATION_FILE):
        records = read_keyword_records(Path(directory) / name)
        questions, keywords = [r["prompt"] for r in records], [r["keywords"] for r in records]
        tasks.append(Task(questions, keywords, template, reward_fn))
    return tasks[0], tasks[1]
