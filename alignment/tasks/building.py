"""`--task` compiled into the run's training and validation Tasks, the same way for every entry point and every
task, the built-in ones (alignment/tasks/builtin.py) as a user's.

    train, validation = run_tasks(config)                               # before any model loads: data and rewards
    train, validation = run_tasks(config, chat_renderer(tokenizer))     # again, in the model's chat turn
    task = evaluation_task(config)                                      # what the evaluation scripts evaluate

A TaskDefinition's rows (or --task-data's) are read, renamed (fields, --task-fields), split (the source's
validation or test split, else a held-out tenth, seed 0, as alignment/data/splits.py splits math), cut to
--n-train-examples and --n-eval-examples, checked for overlap, and turned into prompts; a rows function that picks
them itself (ChosenRows: the built-in math and keyword tasks) gives them split and cut, with its own notes. The
definition's rewards become one RewardSet (weights from --reward-weights), each called through it once, on an empty
completion of the first training row, before any model loads. The evaluation scripts evaluate a definition's
evaluation_rows, whole, where it names them (math's: --dataset's test or validation split), else its validation rows.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from alignment.data.math_datasets import spread_subset
from alignment.data.splits import EVALUATION_SPLITS, HOLDOUT_SHARE, MAX_OVERLAP, TRAINING_SPLIT, holdout, overlap
from alignment.data.task import Task
from alignment.prompts import user_turn
from alignment.run.time_budget import validates_whole
from alignment.tasks.definition import ChosenRows, Row, TaskDefinition
from alignment.tasks.loading import definition_for, reward_set
from alignment.tasks.rewards import RewardSet
from alignment.tasks.rows import read_rows

Renderer = Callable[[list[dict[str, str]]], str]  # chat messages -> the model's prompt (prompts.chat_renderer)


def parse_pairs(text: str | None, flag: str) -> dict[str, str]:
    """`A=B,C=D` as {A: B, C: D}; a ValueError naming `flag` for an item without `=`."""
    pairs: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, equals, value = item.partition("=")
        if not equals or not name.strip() or not value.strip():
            raise ValueError(f"{flag}: {item.strip()!r} is not NAME=VALUE")
        pairs[name.strip()] = value.strip()
    return pairs


def _splits(source: Any, settings: Any, what: str) -> dict[str, list[Row]] | ChosenRows:
    """The rows a RowsSource gives, by split name (a list or a function's single return: one split), or the rows a
    function chose itself."""
    if isinstance(source, str):
        return read_rows(source, what)
    if callable(source):
        source = source(settings)
        if isinstance(source, ChosenRows):
            return source
        if isinstance(source, tuple) and len(source) == 2:
            return {TRAINING_SPLIT: list(source[0]), "validation": list(source[1])}
    if not isinstance(source, Sequence):
        raise ValueError(f"{what}: rows are a path, a list of dicts or a function returning them, not {source!r}")
    return {"rows": list(source)}


def _training_split(splits: dict[str, list[Row]], what: str) -> str:
    if TRAINING_SPLIT in splits:
        return TRAINING_SPLIT
    if len(splits) == 1:
        return next(iter(splits))
    raise ValueError(f"{what}: no {TRAINING_SPLIT!r} split to train on among {', '.join(splits)}")


def _evaluation_split(splits: dict[str, list[Row]], exclude: str | None = None) -> str | None:
    return next((s for s in EVALUATION_SPLITS if s in splits and s != exclude), None)


def renamed(rows: list[Row], fields: Mapping[str, str], task: str) -> list[Row]:
    """Rows with field NAME added from column COLUMN for each rename; a row without COLUMN is a one-line error."""
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"task {task}: row {i} is a {type(row).__name__}, not a dict of fields")
        row = dict(row)
        for name, column in fields.items():
            if column not in row:
                raise ValueError(
                    f"task {task}: field {name!r} is column {column!r}, which row {i} lacks "
                    f"(its fields: {', '.join(map(str, row))})"
                )
            row[name] = row[column]
        out.append(row)
    return out


def prompt_of(definition: TaskDefinition, row: Row, index: int, task: str) -> str | list[dict[str, str]]:
    """Row `index`'s prompt: the definition's template over its fields, or its own `prompt` (text or messages)."""
    if definition.prompt is not None:
        try:
            return definition.prompt.format_map(row)
        except KeyError as error:
            raise ValueError(
                f"task {task}: the prompt names field {error.args[0]!r}, which row {index} lacks "
                f"(its fields: {', '.join(map(str, row))})"
            ) from None
        except (IndexError, ValueError) as error:
            raise ValueError(f"task {task}: the prompt is not a template over row fields ({error})") from None
    prompt = row.get("prompt")
    is_chat = isinstance(prompt, list) and all(isinstance(m, Mapping) and "content" in m for m in prompt)
    if isinstance(prompt, str) or (is_chat and prompt):
        return prompt
    raise ValueError(
        f"task {task}: row {index} has no prompt: give the TaskDefinition a prompt template, or rows a 'prompt' "
        f"field (text or chat messages); its fields: {', '.join(map(str, row))}"
    )


def _text(messages: list[dict[str, str]]) -> str:
    return "\n".join(str(m["content"]) for m in messages)


def build_task(
    definition: TaskDefinition,
    rows: list[Row],
    rewards: RewardSet,
    name: str,
    template_for: Renderer | None,
) -> Task:
    """Rows as a runtime Task. Text prompts go into the chat template's `{question}` (chat) or stand as they are;
    chat-message prompts are rendered whole per row. Without `template_for` (no tokenizer yet) prompts are bare."""
    prompts = [prompt_of(definition, row, i, name) for i, row in enumerate(rows)]
    system = [] if definition.system_prompt is None else [{"role": "system", "content": definition.system_prompt}]
    template = "{question}"
    if not definition.chat or template_for is None:
        questions = [p if isinstance(p, str) else _text(p) for p in prompts]
    elif all(isinstance(p, str) for p in prompts):
        template, questions = template_for(user_turn(definition.system_prompt)), list(prompts)
    else:  # chat messages: each row's rendered whole
        turns = [[{"role": "user", "content": p}] if isinstance(p, str) else p for p in prompts]
        questions = [template_for(system + t) for t in turns]
    categories = None
    if definition.category_field is not None:
        field = definition.category_field
        missing = next((i for i, row in enumerate(rows) if field not in row), None)
        if missing is not None:
            raise ValueError(
                f"task {name}: category_field {field!r} is missing from row {missing} "
                f"(its fields: {', '.join(map(str, rows[missing]))})"
            )
        categories = [str(row[field]) for row in rows]
    return Task(
        questions, rows, template, rewards, categories, name, definition.answer_field, definition.question_field
    )


def preflight(rewards: RewardSet, row: Row) -> None:
    """Every reward called once on an empty completion of `row`: one that raises or returns no number fails here,
    before any model loads, with the RewardError's line (task, function, row)."""
    rewards.grade_batch([""], [row])


def definition_rows(
    definition: TaskDefinition, settings: Any, name: str, whole_validation: bool = False
) -> tuple[list[Row], list[Row], list[str], bool]:
    """(training rows, validation rows, notes, whether the task chose them itself) of a definition under the run's
    settings."""
    data = getattr(settings, "task_data", None)
    what = "--task-data" if data else f"task {name}: rows"
    splits = _splits(data or definition.rows, settings, what)
    validation_data = getattr(settings, "task_validation_data", None)
    if isinstance(splits, ChosenRows):
        if validation_data:
            raise ValueError(
                f"--task-validation-data: task {name} chooses its validation rows itself (its rows function returns "
                "ChosenRows); give them through the task's own settings"
            )
        if not splits.train or not splits.validation:
            raise ValueError(f"{what}: {'no training' if not splits.train else 'no validation'} rows")
        return list(splits.train), list(splits.validation), list(splits.notes), True
    train_split = _training_split(splits, what)
    train = splits[train_split]
    where = data or (definition.rows if isinstance(definition.rows, str) else f"task {name}")
    notes: list[str] = []
    if validation_data or (definition.validation_rows is not None and not data):
        vwhat = "--task-validation-data" if validation_data else f"task {name}: validation_rows"
        vsplits = _splits(validation_data or definition.validation_rows, settings, vwhat)
        vsplit = _evaluation_split(vsplits) or _training_split(vsplits, vwhat)
        validation, validation_name = vsplits[vsplit], str(validation_data or "validation_rows")
    elif (vsplit := _evaluation_split(splits, train_split)) is not None:
        validation, validation_name = splits[vsplit], f"{where} [{vsplit}]"
    else:  # a tenth whatever --n-eval-examples is, so that a resumed run trains on the same rows
        size = max(1, len(train) // HOLDOUT_SHARE)
        train, validation = holdout(train, size)
        validation_name = f"held-out slice of {where}"
        notes.append(f"{where}: {size} of its {size + len(train)} rows held out to validate (a tenth, seed 0)")
    if not train or not validation:
        raise ValueError(f"{what}: {'no training' if not train else 'no validation'} rows")
    n_train = getattr(settings, "n_train_examples", None)
    if n_train is not None:
        if n_train < 1:
            raise ValueError(f"--n-train-examples must be >= 1, got {n_train}")
        train = spread_subset(train, n_train)
    if not whole_validation:
        validation = spread_subset(validation, getattr(settings, "n_eval_examples", None))
    chosen = f"training on {len(train)} rows of {where}; validating on {len(validation)} of {validation_name}"
    notes.insert(0, f"task {name}: {chosen}")
    return train, validation, notes, False


def check_prompt_overlap(train: Task, validation: Task, allow: bool) -> str:
    """The overlap note; a ValueError when more than 1% of the validation prompts are training prompts."""
    count, total = overlap(train.questions, validation.questions), len(validation.questions)
    if count > MAX_OVERLAP * total and not allow:
        raise ValueError(
            f"task {train.name}: {count} of {total} validation prompts are also training prompts, more than "
            f"{MAX_OVERLAP:.0%}: give disjoint --task-validation-data, or pass --allow-validation-overlap to "
            "validate on trained prompts on purpose"
        )
    return f"overlap: {count} of {total} validation prompts also appear in the training data"


def task_fields(definition: TaskDefinition, settings: Any) -> dict[str, str]:
    """The definition's field renames with --task-fields' added."""
    return dict(definition.fields) | parse_pairs(getattr(settings, "task_fields", None), "--task-fields")


def compile_definition(
    definition: TaskDefinition,
    settings: Any,
    name: str,
    template_for: Renderer | None = None,
    check: bool = True,
    whole_validation: bool = False,
    evaluating: bool = False,
) -> tuple[Task, Task]:
    """A TaskDefinition as (training Task, validation Task); with `check`, the rewards are preflighted and what was
    chosen is printed. `evaluating` (an evaluation of the validation rows alone) skips the overlap check."""
    fields = task_fields(definition, settings)
    rewards = reward_set(name, definition, settings)
    train_rows, validation_rows, notes, chosen = definition_rows(definition, settings, name, whole_validation)
    train_rows, validation_rows = renamed(train_rows, fields, name), renamed(validation_rows, fields, name)
    train = build_task(definition, train_rows, rewards, name, template_for)
    validation = build_task(definition, validation_rows, rewards, name, template_for)
    if evaluating:  # what a training run would train on is beside the point
        notes[:1] = [f"task {name}: evaluating its {len(validation_rows)} validation rows"]
    elif not chosen:  # rows a task chose itself were checked by it
        notes.append(check_prompt_overlap(train, validation, getattr(settings, "allow_validation_overlap", False)))
    if check:
        preflight(rewards, train_rows[0])
        for note in notes:
            print(note)
    return train, validation


def run_tasks(settings: Any, template_for: Renderer | None = None, check: bool = True) -> tuple[Task, Task]:
    """The run's (training, validation) Tasks for `--task`. Without `template_for` the prompts are bare: the call
    that checks the data and rewards before any model loads; with it, chat tasks are in the model's chat turn.
    `check` preflights the rewards and prints what was chosen. Under --time-budget the validation Task keeps every
    validation row (alignment/run/time_budget.py validates_whole; a rows function that picks its own asks the same)."""
    definition = task_definition(settings)
    return compile_definition(definition, settings, settings.task, template_for, check, validates_whole(settings))


def task_definition(settings: Any) -> TaskDefinition:
    """--task's TaskDefinition; a missing task file is a ValueError as every other bad flag (the scripts' one line)."""
    try:
        return definition_for(settings.task, settings)
    except FileNotFoundError as error:
        raise ValueError(str(error)) from None


def evaluation_rows(definition: TaskDefinition, settings: Any, name: str) -> tuple[list[Row], list[str]] | None:
    """(rows, notes) the evaluation scripts evaluate where the definition names evaluation_rows (--task-validation-data
    in their place): the source's validation or test split, whole, or what its function returns; None where it names
    none or --task-data replaces its rows (then its validation rows are evaluated). No training row is read."""
    if definition.evaluation_rows is None or getattr(settings, "task_data", None):
        return None
    validation_data = getattr(settings, "task_validation_data", None)
    what = "--task-validation-data" if validation_data else f"task {name}: evaluation_rows"
    source = validation_data or definition.evaluation_rows
    splits = _splits(source, settings, what)
    if isinstance(splits, ChosenRows):
        rows, notes = list(splits.validation), list(splits.notes)
    else:
        split = _evaluation_split(splits) or _training_split(splits, what)
        rows = splits[split]
        where = f"{source} [{split}]" if isinstance(source, str) else "its evaluation_rows"
        notes = [f"task {name}: evaluating the {len(rows)} rows of {where}"]
    if not rows:
        raise ValueError(f"{what}: no rows")
    return rows, notes


def evaluation_task(settings: Any, template_for: Renderer | None = None, check: bool = True) -> Task:
    """--task's rows for the evaluation scripts (scripts/eval_zero_shot.py, best_of_n.py), whole, as a Task: its
    evaluation_rows where the definition names them (math: --dataset's test or validation split, as the course
    evaluates), else its validation rows. With `check` the rewards are preflighted on the first row and what was
    chosen is printed."""
    definition = task_definition(settings)
    chosen = evaluation_rows(definition, settings, settings.task)
    if chosen is None:
        return compile_definition(definition, settings, settings.task, template_for, check, True, evaluating=True)[1]
    rewards = reward_set(settings.task, definition, settings)
    rows = renamed(chosen[0], task_fields(definition, settings), settings.task)
    task = build_task(definition, rows, rewards, settings.task, template_for)
    if check:
        preflight(rewards, rows[0])
        for note in chosen[1]:
            print(note)
    return task


def task_stop(settings: Any) -> tuple[str, ...]:
    """The strings that end a completion of --task (math's: its --prompt's)."""
    return tuple(task_definition(settings).stop)


def needs_chat_template(settings: Any) -> bool:
    """Whether the run's prompts depend on the model's chat template (then built again once its tokenizer loads)."""
    return task_definition(settings).chat
