"""The built-in tasks written as TaskDefinitions, as a user's task is (`--task math`, `keywords`, `arithmetic`).

Training on math and keywords builds their Tasks through alignment/run/setup.py (building.run_tasks), so their
questions, ground truths and graders stay exactly the course's; these definitions describe the same rows and
rewards for what reads a TaskDefinition (an evaluation of any task, a user's task composing a built-in reward).
"""

from typing import Any

from alignment.data import arithmetic as arithmetic_data
from alignment.data.keywords import DEFAULT_KEYWORDS, KEYWORD_REWARD_FNS, keyword_tasks, load_keywords
from alignment.data.splits import run_data
from alignment.grader import r1_zero_reward_fn, reward_fn_for
from alignment.prompts import format_prompt, load_prompt, prompt_kind, stop_strings
from alignment.tasks.definition import Reward, Row, TaskDefinition

# GRPO's keyword settings and their defaults, for a run whose settings lack them (an evaluation script's)
KEYWORD_COUNTS = {"n_train_prompts": 1024, "n_eval_examples": 1024, "keywords_per_prompt": 2, "seed": 0}


def math(settings: Any) -> TaskDefinition:
    """Graded answers to --dataset in the --prompt template, scored by --prompt's kind of grader in --grader mode;
    the reward's dict keeps format_reward and answer_reward beside it."""
    prompt = getattr(settings, "prompt", "r1_zero")
    grade = reward_fn_for(prompt_kind(prompt), getattr(settings, "grader", "course"))
    template = load_prompt(prompt)

    def rows(s: Any) -> tuple[list[Row], list[Row]]:
        data = run_data(
            s.dataset,
            s.dataset_split,
            s.validation_dataset,
            s.n_eval_examples,
            s.allow_validation_overlap,
            allow_evaluation_split=s.train_on_evaluation_split,
            n_train=s.n_train_examples,
        )
        as_rows = [
            [{"prompt": format_prompt(template, e.question), "answer": e.answer} for e in part]
            for part in (data.train, data.validation)
        ]
        return as_rows[0], as_rows[1]

    def graded(completion: str, row: Row) -> dict[str, float]:
        return grade(completion, row["answer"])

    return TaskDefinition(
        rows=rows, rewards=[Reward(graded, name="math")], chat=False, answer_field="answer", stop=stop_strings(prompt)
    )


def keywords(settings: Any) -> TaskDefinition:
    """Prompts asking for --keywords-per-prompt words of --keywords-file, graded by --keyword-match's rule."""
    rule = KEYWORD_REWARD_FNS[getattr(settings, "keyword_match", "substring")]

    def rows(s: Any) -> tuple[list[Row], list[Row]]:
        words = load_keywords(getattr(s, "keywords_file", None) or DEFAULT_KEYWORDS)
        counts = [getattr(s, name, default) for name, default in KEYWORD_COUNTS.items()]
        parts = keyword_tasks("{question}", words, *counts, rule)
        return tuple([{"prompt": q, "keywords": k} for q, k in zip(t.questions, t.truths)] for t in parts)

    def included(completion: str, row: Row) -> dict[str, float]:
        return rule(completion, row["keywords"])

    return TaskDefinition(rows=rows, rewards=[Reward(included, name="keywords")], answer_field="keywords")


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
