"""The task contract: what a user writes to train on a problem of their own, with no edit of alignment/.

A task file holds a `TaskDefinition` (or a function of the run's settings returning one) and `--task file.py:NAME`
names it. The built-in tasks are written the same way (alignment/tasks/builtin.py).

    from alignment.tasks import Reward, TaskDefinition

    def exact_date(completion: str, row: dict) -> float:
        return float(row["date"] in completion)

    task = TaskDefinition(
        rows="data/dates.jsonl",
        prompt="Extract the date from: {text}\\nAnswer as JSON.",
        rewards=[exact_date, Reward(valid_json, weight=0.5)],
    )
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]
# A reward scores one completion of a row: a number, None ("does not apply": left out of its mean), or a dict of
# numbers whose "reward" is the score and whose other keys are logged beside it (the math grader's format/answer).
RewardValue = float | int | bool | None | Mapping[str, float]
# Rows, or what gives them: a file or folder `datasets` reads, a hub id, a list of dicts, or a function of the
# run's settings returning rows, (training rows, validation rows) or ChosenRows.
RowsSource = str | Sequence[Row] | Callable[[Any], Any]


@dataclass
class ChosenRows:
    """What a rows function returns when it picks the run's rows itself (the built-in math task's --dataset,
    --validation-dataset, --n-train-examples and --n-eval-examples): its training and validation rows are taken as
    they are, with no held-out slice, subset or overlap check of the generic ones, and `notes`, the lines saying what
    it chose, are printed in place of theirs. An evaluation_rows function may return one for its notes: its
    `validation` rows are the ones evaluated (its `train` rows, empty, are not read)."""

    train: Sequence[Row]
    validation: Sequence[Row]
    notes: Sequence[str] = ()


@dataclass
class Reward:
    """One reward function with its weight in the sum GRPO trains on.

    `fn(completion: str, row: dict)` scores one completion; with `batched=True`, `fn(completions: list[str],
    rows: list[dict])` scores a batch and returns a list. Either may be `async def`. A reward may read any field of
    its row (after the task's field renames) and returns a RewardValue. `name` (default: the function's name) is
    what the logs call it: `train_reward_<name>`, `eval_reward_<name>`. `log_apart=False` leaves that per-function
    score out, for a task's one reward whose dict already logs its parts beside the sum (the built-in math grader's
    format_reward and answer_reward).
    """

    fn: Callable[..., Any]
    weight: float = 1.0
    name: str | None = None
    batched: bool = False
    log_apart: bool = True

    @property
    def label(self) -> str:
        return self.name or getattr(self.fn, "__name__", type(self.fn).__name__)


@dataclass
class TaskDefinition:
    """A one-turn task: rows, how a row becomes a prompt, and the rewards of a completion.

    rows             where the rows come from (see RowsSource); `validation_rows` the held-out ones (default: the
                     source's validation or test split, else a held-out slice of the rows)
    evaluation_rows  the rows scripts/eval_zero_shot.py and best_of_n.py evaluate, whole (default: the validation
                     rows): a source's validation or test split, or what a function returns (ChosenRows: its
                     validation rows, its notes printed). The training rows are then not read: an evaluation
                     script's settings have no training settings (the math task's --dataset-split)
    prompt           the prompt as a template over the row's fields (`"Solve: {question}"`); None: the row's
                     `prompt` field, a string or a list of chat messages (TRL's conversational rows)
    system_prompt    a system message before the prompt (chat only)
    chat             wrap the prompt in the model's chat template (a model without one gets the bare prompt)
    rewards          reward functions or Reward(fn, weight, name, batched); a plain function has weight 1
    fields           renames, {name the task uses: name in the data}, so a dataset with other field names serves
                     (`--task-fields` adds to them)
    answer_field     the field logged as a rollout's ground truth (default: the whole row)
    question_field   the field logged as a rollout's question (default: its prompt)
    category_field   a field evaluations break their reward down by (`eval_reward@<value>`)
    stop             strings that end a completion (included in it)
    """

    rows: RowsSource
    rewards: Sequence[Callable[..., Any] | Reward]
    prompt: str | None = None
    validation_rows: RowsSource | None = None
    system_prompt: str | None = None
    chat: bool = True
    fields: dict[str, str] = field(default_factory=dict)
    answer_field: str | None = None
    category_field: str | None = None
    stop: tuple[str, ...] = ()
    question_field: str | None = None
    evaluation_rows: RowsSource | None = None

    def reward_list(self) -> list[Reward]:
        return [r if isinstance(r, Reward) else Reward(r) for r in self.rewards]
