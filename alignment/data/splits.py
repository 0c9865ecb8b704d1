"""Training and validation questions for a run: which split of which source trains and which validates, a held-out
slice when a source's one split is a training split, and the checks that keep evaluation sets out of training.

    data = run_data("math", "train", None, n_validation=1024)   # MATH's 7,500 train, 1,024 of its 5,000 test
    data = run_data("competition_math", "train", None, 1024)      # one split: 1,250 held out, 11,250 trained on
    data = run_data("gsm8k", "train", None, 1024, n_train=6400)   # CS336 2026: 6,400 of 7,473 train, 1,024 of 1,319
    for line in data.notes: print(line)

A subset of N questions (the validation set's --n-eval-examples, the training set's --n-train-examples) is always
`spread_subset`'s: Python's random.Random(0).sample of N of the source's indices, kept in file order. So the CS336
2026 handout's 6,400 training and 1,024 validation questions are those of data/gsm8k/train.jsonl (7,473) and
data/gsm8k/test.jsonl (1,319) at the indices random.Random(0).sample(range(7473), 6400) and
random.Random(0).sample(range(1319), 1024), sorted: the same questions on every machine and in every run.

A split named test or validation (a .jsonl file so named too) is an evaluation set: evaluated whole, and trained on
only when asked (--train-on-evaluation-split), so that MATH-500 or GSM8K's test split is never cut or learned by
accident. Only a source whose one split is a training split (competition_math) holds out a tenth of itself.

Questions are compared as exact text after whitespace normalization; more than 1% of the validation questions in
the training data stops the run (naming both sources) unless overlap is allowed on purpose.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alignment.data.math_datasets import (
    HUB_DATASETS,
    SUBSET_SEED,
    DatasetKind,
    MathExample,
    dataset_splits,
    evaluation_split,
    load_math_examples,
    spread_subset,
)

MAX_OVERLAP = 0.01
HOLDOUT_SHARE = 10  # a source whose one split is a training split holds out a tenth of itself for validation
TRAINING_SPLIT = "train"
EVALUATION_SPLITS = ("test", "validation")


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


def check_trainable(source: str, split: str | None, allow: bool) -> None:
    """ValueError naming --train-on-evaluation-split when `split` of `source` (for a .jsonl file: its name) is an
    evaluation set and training on it was not asked for."""
    name = Path(source).stem if Path(source).is_file() else split
    if allow or name not in EVALUATION_SPLITS:
        return
    what = f"{source} is named as a {name} split" if split is None else f"split {split!r} of {source}"
    raise ValueError(
        f"{what}: an evaluation set, evaluated whole (scripts/eval_zero_shot.py --dataset {source}) and not trained "
        "on; train on a training split or another source, or pass --train-on-evaluation-split to train on it "
        "anyway (a tenth of it then held out to validate)"
    )


def training_split(source: str, split: str, notes: list[str], allow_evaluation_split: bool = False) -> str | None:
    """The split to train on: `split` when the source has it, else its only split; None for a .jsonl file. An
    evaluation split (test, validation) is refused unless `allow_evaluation_split` (check_trainable)."""
    if Path(source).is_file():
        check_trainable(source, None, allow_evaluation_split)
        return None
    splits = source_splits(source)
    if split in splits:
        chosen = split
    elif len(splits) == 1:
        chosen = splits[0]
        notes.append(f"{source} has one split ({chosen}): training on it")
    else:
        raise ValueError(f"--dataset-split {split!r}: {source} has splits {', '.join(splits)}")
    check_trainable(source, chosen, allow_evaluation_split)
    return chosen


def holdout(examples: list[MathExample], size: int) -> tuple[list[MathExample], list[MathExample]]:
    """(train, held out): `size` examples spread over the source by a fixed seed, and the rest."""
    held = set(spread_subset(list(range(len(examples))), size))
    return [e for i, e in enumerate(examples) if i not in held], [examples[i] for i in sorted(held)]


def evaluation_examples(dataset: str, kind: DatasetKind | None = None) -> tuple[list[MathExample], str | None]:
    """What evaluating `dataset` means: its test or validation split, whole (MATH-500's 500, GSM8K's 1,319), or a
    .jsonl file whole; for a source whose one split is a training split (competition_math), the tenth a training
    run holds out of it (the same questions), with a note saying so."""
    examples = load_math_examples(dataset, kind)
    if Path(dataset).is_file() or source_splits(dataset) != [TRAINING_SPLIT]:
        return examples, None
    size = max(1, len(examples) // HOLDOUT_SHARE)
    held = holdout(examples, size)[1]
    note = (
        f"{dataset} has one split, a training split: evaluating the {size} of its {len(examples)} questions that a "
        "training run holds out for validation (a tenth, fixed seed), not the questions it trains on"
    )
    return held, note


def run_data(
    dataset: str,
    split: str,
    validation_dataset: str | None,
    n_validation: int | None,
    allow_overlap: bool = False,
    kind: DatasetKind | None = None,
    allow_evaluation_split: bool = False,
    n_train: int | None = None,
) -> RunData:
    """Training examples from `dataset` (`n_train` of them, None: all) and `n_validation` validation examples (None:
    all) that are not trained on.

    Validation comes from `validation_dataset` when given (what evaluating it means: evaluation_examples), else
    from `dataset`'s evaluation split when it is not the training split, else from a held-out tenth of the
    training data. Training on an evaluation split needs `allow_evaluation_split`.
    """
    notes: list[str] = []
    try:
        train_split = training_split(dataset, split, notes, allow_evaluation_split)
        train = load_math_examples(dataset, kind, split=train_split)
        eval_split = None if Path(dataset).is_file() else evaluation_split(dataset)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--dataset: {err}") from None
    where = dataset if train_split is None else f"{dataset} [{train_split}]"
    if validation_dataset is not None:
        try:
            pool, note = evaluation_examples(validation_dataset, kind)
        except (FileNotFoundError, ValueError) as err:
            raise ValueError(f"--validation-dataset: {err}") from None
        validation, validation_name = spread_subset(pool, n_validation), validation_dataset
        notes += [note] if note else []
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
    if n_train is not None:
        if n_train < 1:
            raise ValueError(f"--n-train-examples must be >= 1, got {n_train}")
        if n_train < len(train):
            notes.append(f"--n-train-examples {n_train}: {n_train} of the {len(train)} questions (seed {SUBSET_SEED})")
        train = spread_subset(train, n_train)
    notes.insert(
        0, f"training on {len(train)} questions of {where}; validating on {len(validation)} of {validation_name}"
    )
    notes.append(
        check_overlap(
            (e.question for e in train), [e.question for e in validation], where, validation_name, allow_overlap
        )
    )
    return RunData(train, validation, notes)
