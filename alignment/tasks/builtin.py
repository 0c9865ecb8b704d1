"""The built-in tasks written as TaskDefinitions, as a user's task is (`--task math`, `keywords`, `arithmetic`).

Every entry point builds them as it builds a user's (alignment/tasks/building.py run_tasks). Math and keywords pick
their own rows (ChosenRows), so that their questions, order, splits and printed notes stay the course's: math's
are alignment/data/splits.py `run_data`'s (and, for the evaluation scripts, `evaluation_examples`': --dataset's
test or validation split, whole), keywords' are generated from --keywords-file or read from a --keywords-dataset
folder. Their one reward returns the course graders' dict (format_reward, answer_reward,
reward), logged as it is (no `reward_<name>` beside it).
"""

from pathlib import Path
from typing import Any

from alignment.data import arithmetic as arithmetic_data
from alignment.data.keywords import DEFAULT_KEYWORDS, KEYWORD_REWARD_FNS, keyword_tasks, load_keywords
from alignment.data.math_datasets import MathExample
from alignment.data.splits import evaluation_examples, run_data
from alignment.grader import r1_zero_reward_fn, reward_fn_for
from alignment.prompts import check_prompt, format_prompt, load_prompt, prompt_kind, stop_strings
from alignment.run.time_budget import validates_whole
from alignment.tasks.definition import ChosenRows, Reward, Row, TaskDefinition

# GRPO's keyword settings and their defaults, for a run whose settings lack them (an evaluation script's)
KEYWORD_COUNTS = {"n_train_prompts": 1024, "n_eval_examples": 1024, "keywords_per_prompt": 2, "seed": 0}


def math_row(example: MathExample, template: str) -> Row:
    """A math example as the math task's row: its question, its answer (what the grader compares and rollouts.jsonl
    logs) and its prompt, the question in `template`."""
    return {"question": example.question, "answer": example.answer, "prompt": format_prompt(template, example.question)}


def math_rows(settings: Any, whole_validation: bool = False) -> ChosenRows:
    """The math task's rows, as run_data picks them from --dataset and --validation-dataset: --n-train-examples
    training rows and --n-eval-examples validation rows (all of them with `whole_validation`), with its notes."""
    check_prompt(settings.prompt)
    data = run_data(
        settings.dataset,
        settings.dataset_split,
        settings.validation_dataset,
        None if whole_validation else settings.n_eval_examples,
        settings.allow_validation_overlap,
        allow_evaluation_split=settings.train_on_evaluation_split,
        n_train=settings.n_train_examples,
    )
    template = load_prompt(settings.prompt)
    return ChosenRows(
        [math_row(e, template) for e in data.train], [math_row(e, template) for e in data.validation], data.notes
    )


def math_evaluation_rows(settings: Any) -> ChosenRows:
    """What evaluating --dataset means, as the course evaluates (alignment/data/splits.py evaluation_examples: its
    test or validation split, whole), as math rows in the --prompt template, with its note (a source with only a
    training split gives the tenth a training run holds out)."""
    try:
        examples, note = evaluation_examples(settings.dataset)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--dataset: {err}") from None
    template = load_prompt(settings.prompt)
    return ChosenRows([], [math_row(e, template) for e in examples], [note] if note else [])


def math(settings: Any) -> TaskDefinition:
    """Graded answers to --dataset in the --prompt template, scored by --prompt's kind of grader in --grader mode;
    the reward's dict is the grader's (format_reward, answer_reward, reward). Training validates on the rows
    run_data picks; under --time-budget they are all of the validation set (the budget's last validation takes every
    one, the others --n-eval-examples of them: alignment/run/time_budget.py). The evaluation scripts evaluate
    --dataset's test or validation split whole (math_evaluation_rows), reading no training row."""
    prompt = getattr(settings, "prompt", "r1_zero")
    check_prompt(prompt)
    grade = reward_fn_for(prompt_kind(prompt), getattr(settings, "grader", "course"))

    def graded(completion: str, row: Row) -> dict[str, float]:
        return grade(completion, row["answer"])

    return TaskDefinition(
        rows=lambda s: math_rows(s, whole_validation=validates_whole(s)),
        evaluation_rows=math_evaluation_rows,
        rewards=[Reward(graded, name="math", log_apart=False)],
        chat=False,
        answer_field="answer",
        question_field="question",
        stop=stop_strings(prompt),
    )


def keyword_rows(settings: Any) -> ChosenRows:
    """Keyword rows {"prompt": the instruction, "keywords": [words]}: a built dataset folder's (--keywords-dataset:
    its train.jsonl, the first --n-eval-examples of its validation.jsonl), else generated from --keywords-file, the
    validation prompts from keywords never trained on."""
    folder = getattr(settings, "keywords_dataset", None)
    counts = {name: getattr(settings, name, default) for name, default in KEYWORD_COUNTS.items()}
    if folder is not None:
        # imported here: it imports the rollout interface (torch), which the grading workers loading this module to
        # rebuild a task's rewards need not import
        from alignment.data.keyword_dataset import TRAIN_FILE, VALIDATION_FILE, read_keyword_records

        folder = Path(folder)
        validation = read_keyword_records(folder / VALIDATION_FILE)[: counts["n_eval_examples"]]
        return ChosenRows(read_keyword_records(folder / TRAIN_FILE), validation)
    words = load_keywords(getattr(settings, "keywords_file", None) or DEFAULT_KEYWORDS)
    parts = keyword_tasks("{question}", words, *counts.values())
    train, validation = ([{"prompt": q, "keywords": k} for q, k in zip(t.questions, t.truths)] for t in parts)
    return ChosenRows(train, validation)


def keywords(settings: Any) -> TaskDefinition:
    """Prompts asking for --keywords-per-prompt words of --keywords-file (or a --keywords-dataset folder's), in the
    model's chat turn, graded by --keyword-match's rule."""
    rule = KEYWORD_REWARD_FNS[getattr(settings, "keyword_match", "substring")]

    def included(completion: str, row: Row) -> dict[str, float]:
        return rule(completion, row["keywords"])

    return TaskDefinition(
        rows=keyword_rows, rewards=[Reward(included, name="keywords", log_apart=False)], answer_field="keywords"
    )


def arithmetic(settings: Any) -> TaskDefinition:
    """Generated arithmetic word problems (alignment/data/arithmetic.py, its default difficulty), one turn, in the
    r1_zero template: the final number in <answer> tags graded."""
    template = load_prompt("r1_zero")

    def split(name: str) -> list[Row]:
        records = [record for _, record in arithmetic_data.arithmetic_records(arithmetic_data.NAME, name)]
        return [
            r | {"prompt": format_prompt(template, r["question"]), "final": r["answer"].rpartition("####")[2].strip()}
            for r in records
        ]

    def answer(completion: str, row: Row) -> dict[str, float]:
        return r1_zero_reward_fn(completion, row["final"])

    return TaskDefinition(
        rows=lambda s: (split("train"), split("test")),
        rewards=[Reward(answer, name="answer")],
        chat=False,
        answer_field="final",
        stop=stop_strings("r1_zero"),
    )
