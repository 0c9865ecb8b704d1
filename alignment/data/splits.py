"""Training and validation questions for a run: which split of which source trains and which validates, a held-out
slice when a source has a single split, and the check that validation questions are not also trained on.

    data = run_data("math", "train", None, n_validation=1024)   # MATH's 7,500 train, 1,024 of its 5,000 test
    data = run_data("competition_math", "train", None, 1024)      # one split: 1,250 held out, 11,250 trained on
    for line in data.notes: print(line)

Questions are compared as exact text after whitespace normalization; more than 1% of the validation questions in
the training data stops the run (naming both sources) unless overlap is allowed on purpose.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alignment.data.math_datasets import (
    HUB_DATASETS,
    DatasetKind,
    MathExample,
    dataset_splits,
    evaluation_split,
    load_math_examples,
    spread_subset,
)

MAX_OVERLAP = 0.01
HOLDOUT_SHARE = 10  # a single-split source holds out a tenth of itself for validation


@dataclass(frozen=True)
class RunData:
    train: list[MathExample]
    validation: list[MathExample]
    notes: list[str]  # what was chosen, to print at the start of a run


def normalize_question(text: str) -> str:
    return " ".join(text.split())


def overlap(train_questions: Iterable[str], validation_questions: Sequence[str]) -> int:
    """How many validation questions appear, after whitespace normalization, among the training questions."""
    seen = {normalize_question(q) for q in train_questions}
    return sum(normalize_question(q) in seen for q in validation_questions)


def check_overlap(
    train_questions: Iterable[str],
    validation_questions: Sequence[str],
    train_name: str,
    validation_name: str,
    allow: bool,
) -> str:
    """A note with the overlap count; ValueError naming both sources when over 1% of validation and not `allow`."""
    count, total = overlap(train_questions, validation_questions), len(validation_questions)
    note = f"overlap: {count} of {total} validation questions also appear in the training data"
    if count > MAX_OVERLAP * total and not allow:
        raise ValueError(
            f"{count} of {total} validation questions ({validation_name}) are also training questions ({train_name}), "
            f"more than {MAX_OVERLAP:.0%}: choose a disjoint --validation-dataset (or leave it unset for a held-out "
            "slice of --dataset), or pass --allow-validation-overlap to validate on trained questions on purpose"
        )
    return note


def source_splits(source: str) -> list[str]:
    """A source's splits; short names list theirs without asking the hub."""
    hub = HUB_DATASETS.get(source)
    if hub is not None:
        return list(dict.fromkeys(s for s in (hub.train_split, hub.eval_split) if s is not None))
    return dataset_splits(source)


def training_split(source: str, split: str, notes: list[str]) -> str | None:
    """The split to train on: `split` when the source has it, else its only split; None for a .jsonl file."""
    if Path(source).is_file():
        return None
    splits = source_splits(source)
    if split in splits:
        return split
    if len(splits) == 1:
        notes.append(f"{source} has one split ({splits[0]}): training on it")
        return splits[0]
    raise ValueError(f"--dataset-split {split!r}: {source} has splits {', '.join(splits)}")


def holdout(examples: list[MathExample], size: int) -> tuple[list[MathExample], list[MathExample]]:
    """(train, held out): `size` examples spread over the source by a fixed seed, and the rest."""
    held = set(spread_subset(list(range(len(examples))), size))
    return [e for i, e in enumerate(examples) if i not in held], [examples[i] for i in sorted(held)]


def evaluation_examples(dataset: str) -> tuple[list[MathExample], str | None]:
    """What evaluating `dataset` means: its test or validation split; for a source with one split (which a training
    run trains on), the tenth a training run holds out of it (the same questions), with a note saying so."""
    examples = load_math_examples(dataset)
    if Path(dataset).is_file() or len(source_splits(dataset)) != 1:
        return examples, None
    size = max(1, len(examples) // HOLDOUT_SHARE)
    held = holdout(examples, size)[1]
    note = (
        f"{dataset} has one split: evaluating the {size} of its {len(examples)} questions that a training run holds "
        "out for validation (a tenth, fixed seed), not the questions it trains on"
    )
    return held, note


def run_data(
    dataset: str,
    split: str,
    validation_dataset: str | None,
    n_validation: int | None,
    allow_overlap: bool = False,
    kind: DatasetKind | None = None,
) -> RunData:
    """Training examples from `dataset` and `n_validation` validation examples (None: all) that are not trained on.

    Validation comes from `validation_dataset` when given, else from `dataset`'s evaluation split when it is not
    the training split, else from a held-out tenth of the training data.
    """
    notes: list[str] = []
    try:
        train_split = training_split(dataset, split, notes)
        train = load_math_examples(dataset, kind, split=train_split)
        eval_split = None if Path(dataset).is_file() else evaluation_split(dataset)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--dataset: {err}") from None
    where = dataset if train_split is None else f"{dataset} [{train_split}]"
    if validation_dataset is not None:
        try:
            validation = spread_subset(load_math_examples(validation_dataset, kind), n_validation)
        except (FileNotFoundError, ValueError) as err:
            raise ValueError(f"--validation-dataset: {err}") from None
        validation_name = validation_dataset
    elif eval_split is not None and eval_split != train_split:
        pool = load_math_examples(dataset, kind, split=eval_split)
        validation, validation_name = spread_subset(pool, n_validation), f"{dataset} [{eval_split}]"
    else:  # a tenth whatever n_validation is, so that a resumed run changing it trains on the same questions
        size = max(1, len(train) // HOLDOUT_SHARE)
        train, held = holdout(train, size)
        validation, validation_name = spread_subset(held, n_validation), f"held-out slice of {where}"
        notes.append(
            f"{where} has no separate validation split: {size} of its {size + len(train)} questions held "
            f"out (a tenth, fixed seed), {len(train)} trained on"
        )
    notes.insert(
        0, f"training on {len(train)} questions of {where}; validating on {len(validation)} of {validation_name}"
    )
    notes.append(
        check_overlap(
            (e.question for e in train), [e.question for e in validation], where, validation_name, allow_overlap
        )
    )
    return RunData(train, validation, notes)
