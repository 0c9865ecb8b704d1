"""An environment's rows, training and validation, each the dict one episode's `reset` receives.

Rows come as a one-turn task's do (alignment/tasks/definition.py RowsSource): a list of dicts, a file, folder or hub
id `datasets` reads, a function of the run's settings returning rows, (training rows, validation rows) or ChosenRows,
or a TaskDefinition whose rows (and renamed fields) are used. An environment with no rows plays seeds: `{"seed": i}`,
training seeds drawn from the run's --seed and validation seeds from a fixed stream of their own, so validation is
the same games in every run.
"""

from typing import Any

from alignment.data.splits import TRAINING_SPLIT
from alignment.tasks.definition import ChosenRows, Row, TaskDefinition
from alignment.tasks.rows import read_rows

VALIDATION_SEEDS = 1_000_000_007  # validation games are seeds from here on, training seeds stay below it
HOLDOUT_SHARE = 5  # rows without validation rows hold out a fifth of themselves (at most --n-eval-examples)


def seed_rows(n_train: int, n_validation: int, seed: int) -> tuple[list[Row], list[Row]]:
    """`n_train` training seeds from run seed `seed` and the `n_validation` validation seeds every run shares."""
    start = seed * n_train
    if start + n_train >= VALIDATION_SEEDS:
        raise ValueError(f"--seed {seed} with --n-train-prompts {n_train} reaches the validation seeds")
    train = [{"seed": start + i} for i in range(n_train)]
    return train, [{"seed": VALIDATION_SEEDS + i} for i in range(n_validation)]


def _as_rows(value: Any, where: str) -> list[Row]:
    if isinstance(value, str):  # a file, folder or hub id, read as a one-turn task's rows are
        splits = read_rows(value, where)
        value = splits.get(TRAINING_SPLIT) or next(iter(splits.values()))
    rows = list(value)
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{where}: rows must be dicts (one per episode), got {type(rows[0]).__name__}")
    return rows


def _renamed(rows: list[Row], fields: dict[str, str]) -> list[Row]:
    """Each row with the task's names for its renamed fields ({name the task uses: name in the data})."""
    return [row | {name: row[column] for name, column in fields.items() if column in row} for row in rows]


def source_rows(
    rows: Any, validation_rows: Any, settings: Any, n_validation: int, where: str
) -> tuple[list[Row], list[Row]]:
    """(training rows, validation rows) of a rows source; without validation rows, a held-out slice of the rows
    (a fifth, at most `n_validation`). `where` names the source in errors."""
    fields: dict[str, str] = {}
    if isinstance(rows, TaskDefinition):
        rows, validation_rows, fields = rows.rows, validation_rows or rows.validation_rows, rows.fields
    if callable(rows):
        rows = rows(settings)
    if isinstance(rows, ChosenRows):  # a task's own choice (the built-in keyword task's)
        rows, validation_rows = rows.train, rows.validation
    if isinstance(rows, tuple) and len(rows) == 2:
        rows, validation_rows = rows
    train = _as_rows(rows, where)
    if validation_rows is not None:
        validation = _as_rows(validation_rows(settings) if callable(validation_rows) else validation_rows, where)
    else:
        held = min(n_validation, len(train) // HOLDOUT_SHARE)
        if held < 1:
            raise ValueError(f"{where}: {len(train)} rows are too few to hold out validation rows; give some")
        train, validation = train[:-held], train[-held:]
    if not train:
        raise ValueError(f"{where}: no training rows")
    return _renamed(train, fields), _renamed(validation[:n_validation] if n_validation else validation, fields)


def row_text(row: Row) -> str:
    """What the logs show as a row's prompt: its question, prompt or seed, else the row."""
    for key in ("question", "prompt", "seed"):
        if key in row:
            return str(row[key])
    return str(row)
