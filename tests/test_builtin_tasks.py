"""The built-in math and keyword tasks, built through the task contract as a user's task is, give what the course's
pipelines gave: the same questions in the same order, prompts, splits and printed notes, the same ground truths in
the logs and the same reward dicts. "Before" is computed here from the pieces those pipelines were made of (run_data,
the --prompt template and its grader; keyword_tasks and load_keyword_dataset with the --keyword-match rule), on the
repository's GSM8K and sample MATH files and the shipped word lists."""

import contextlib
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from alignment.data.keyword_dataset import load_keyword_dataset
from alignment.data.keywords import DEFAULT_KEYWORDS, KEYWORD_REWARD_FNS, UW_KEYWORDS, keyword_tasks, load_keywords
from alignment.data.splits import evaluation_examples, run_data
from alignment.data.task import Task
from alignment.evaluation import evaluate_task
from alignment.grader import reward_fn_for
from alignment.grading.parallel import ParallelGrader
from alignment.grpo.config import GRPOConfig
from alignment.grpo.sampler import Drawn, rollout_stats
from alignment.grpo_run import train_examples
from alignment.prompts import format_prompt, load_prompt, prompt_kind, stop_strings, user_turn
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.tasks.building import evaluation_task, needs_chat_template, run_tasks, task_stop
from scripts.eval_zero_shot import EvalConfig

REPO = Path(__file__).resolve().parents[1]
SAMPLE_MATH = str(REPO / "data" / "sample_math.jsonl")


def built(config: GRPOConfig, template_for=None) -> tuple[Task, Task, list[str]]:
    """run_tasks's (training, validation) Tasks and the lines it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        train, validation = run_tasks(config, template_for)
    return train, validation, printed.getvalue().splitlines()


def prompts(task: Task) -> list[str]:
    return [format_prompt(task.template, q) for q in task.questions]


def math_responses(answer: str) -> list[str]:
    """Graded differently by the kinds and modes: formatted right, formatted wrong, boxed, fboxed, text after."""
    return [
        f"x </think> <answer>{answer}</answer>",
        "x </think> <answer>none</answer>",
        f"So it is \\boxed{{{answer}}}.",
        f"\\fbox{{{answer}}}",
        f"x </think> <answer>{answer}</answer> done",
        "",
    ]


MATH_RUNS = {
    "gsm8k, r1_zero": dict(dataset="gsm8k", n_train_examples=40, n_eval_examples=12),
    "gsm8k, question_only_boxed, lenient": dict(
        dataset="gsm8k", n_train_examples=24, n_eval_examples=8, prompt="question_only_boxed", grader="lenient"
    ),
    "gsm8k file, validation file, question_only": dict(
        dataset=str(REPO / "data/gsm8k/train.jsonl"),
        validation_dataset=SAMPLE_MATH,
        n_train_examples=16,
        n_eval_examples=3,
        prompt="question_only",
    ),
    "one file held out, three shot": dict(dataset=SAMPLE_MATH, n_eval_examples=4, prompt="r1_zero_three_shot_gsm8k"),
}


@pytest.mark.parametrize("settings", MATH_RUNS.values(), ids=MATH_RUNS)
def test_math_through_the_contract_is_the_courses_math(settings):
    config = GRPOConfig(task="math", **settings)
    data = run_data(
        config.dataset,
        config.dataset_split,
        config.validation_dataset,
        config.n_eval_examples,
        n_train=config.n_train_examples,
    )
    template, grade = load_prompt(config.prompt), reward_fn_for(prompt_kind(config.prompt), config.grader)
    train, validation, printed = built(config)
    assert printed == data.notes  # run_data's notes, nothing else
    for task, examples in ((train, data.train), (validation, data.validation)):
        assert prompts(task) == [format_prompt(template, e.question) for e in examples]
        assert [task.logged_question(i) for i in range(len(examples))] == [e.question for e in examples]
        assert [task.logged_truth(t) for t in task.truths] == [e.answer for e in examples]
        for row, example in list(zip(task.truths, examples))[:4]:
            for response in math_responses(example.answer):
                assert task.reward_fn(response, row) == grade(response, example.answer)  # the same dict, no more keys
    assert task_stop(config) == stop_strings(config.prompt) and not needs_chat_template(config)


def test_math_validates_on_the_whole_validation_set_under_a_time_budget():
    config = GRPOConfig(task="math", dataset="gsm8k", n_train_examples=8, n_eval_examples=6, time_budget="10m")
    _, validation, printed = built(config)
    whole = run_data("gsm8k", "train", None, None, n_train=8)
    questions = [validation.logged_question(i) for i in range(len(validation.questions))]
    assert printed == whole.notes and questions == [e.question for e in whole.validation]
    _, periodic, _ = built(replace(config, time_budget=None))
    assert len(periodic.questions) == 6


MATH_EVALUATIONS = {
    "gsm8k, r1_zero": dict(dataset="gsm8k"),
    "a file, question_only, lenient": dict(dataset=SAMPLE_MATH, prompt="question_only", grader="lenient"),
}


@pytest.mark.parametrize("settings", MATH_EVALUATIONS.values(), ids=MATH_EVALUATIONS)
def test_math_evaluates_the_datasets_evaluation_split_whole_through_the_contract(settings):
    """eval_zero_shot and best_of_n evaluate --task math as a user's task (evaluation_task): its evaluation_rows are
    --dataset's evaluation examples, whole, in the --prompt template, graded by the --prompt's grader in --grader mode,
    from an evaluation's settings, which hold no training setting (no --dataset-split, --n-train-examples)."""
    config = EvalConfig(task="math", **settings)
    assert not hasattr(config, "dataset_split") and not hasattr(config, "n_train_examples")
    examples, note = evaluation_examples(config.dataset)
    template, grade = load_prompt(config.prompt), reward_fn_for(prompt_kind(config.prompt), config.grader)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        task = evaluation_task(config)
    assert printed.getvalue().splitlines() == ([note] if note else [])
    assert prompts(task) == [format_prompt(template, e.question) for e in examples]  # all of them, in order
    assert [task.logged_truth(t) for t in task.truths] == [e.answer for e in examples]
    for row, example in list(zip(task.truths, examples))[:4]:
        for response in math_responses(example.answer):
            assert task.reward_fn(response, row) == grade(response, example.answer)  # the grader's dict as it is
    assert task_stop(config) == stop_strings(config.prompt) and not needs_chat_template(config)


def test_math_rollouts_and_metrics_keep_their_names():
    """rollouts.jsonl's question and ground_truth are the question and answer strings; the metrics of a step and of
    a validation are the course's (format and answer rewards) with no per-function reward beside them."""
    train, _, _ = built(GRPOConfig(task="math", dataset=SAMPLE_MATH, n_eval_examples=2))
    row = train.truths[1]
    texts = [f"x </think> <answer>{row['answer']}</answer>", "no answer"]
    rollouts = [Rollout(0, text, [1, 2], [-0.5, -0.5], "stop") for text in texts]
    scores = [train.reward_fn(text, row) for text in texts]
    logged = train_examples(train, Drawn([1], rollouts, scores, {}))
    assert [(r["question"], r["ground_truth"]) for r in logged] == [(row["question"], row["answer"])] * 2
    assert set(logged[0]) == {"question", "response", "ground_truth", "format_reward", "answer_reward", "reward"}
    assert [r["answer_reward"] for r in logged] == [1.0, 0.0]
    assert not [key for key in rollout_stats(rollouts, scores, 8) if key.startswith("train_reward_")]

    class Engine:  # answers every prompt with the row's answer
        def generate(self, prompts, n, sampling):
            return [Rollout(i, texts[0], [1], [-1.0], "stop") for i in range(len(prompts))]

    validation = replace(train, questions=train.questions[1:2], truths=[row])
    with ParallelGrader(validation.reward_fn, 1) as grader:
        summary, examples = evaluate_task(Engine(), validation, grader, SamplingConfig(max_tokens=4))
    assert summary == {"eval_reward": 1.0, "eval_format_reward": 1.0, "eval_answer_reward": 1.0}
    assert examples[0]["truth"] == row["answer"] and examples[0]["prompt"] == prompts(train)[1]


def test_math_grades_in_the_worker_pool_as_in_this_process():
    """The math task's rewards travel to the grading workers by name (the run's settings) and grade there as here."""
    config = GRPOConfig(task="math", dataset="gsm8k", n_train_examples=20, n_eval_examples=4, prompt="question_only")
    train, _, _ = built(config)
    rows = train.truths[:8]
    responses = [r for row in rows for r in math_responses(row["answer"])[:3]]
    repeated = [row for row in rows for _ in range(3)]
    with ParallelGrader(train.reward_fn, 2) as pool:
        assert pool(responses, repeated) == [train.reward_fn(r, row) for r, row in zip(responses, repeated)]


def chat(messages: list[dict[str, str]]) -> str:
    """A stand-in chat template: what a tokenizer's would render (the keyword prompts go in the model's turn)."""
    return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"


KEYWORD_RUNS = {
    "stand-in words, substring": dict(n_train_prompts=24, n_eval_examples=6),
    "UW words, one a prompt, word rule": dict(
        n_train_prompts=10, n_eval_examples=5, keywords_per_prompt=1, keywords_file=UW_KEYWORDS, keyword_match="word"
    ),
}


@pytest.mark.parametrize("settings", KEYWORD_RUNS.values(), ids=KEYWORD_RUNS)
def test_keywords_through_the_contract_are_the_courses_keywords(settings):
    config = GRPOConfig(task="keywords", seed=3, **settings)
    rule = KEYWORD_REWARD_FNS[config.keyword_match]
    words = load_keywords(config.keywords_file or DEFAULT_KEYWORDS)
    counts = (config.n_train_prompts, config.n_eval_examples, config.keywords_per_prompt, config.seed)
    for template_for in (None, chat):
        template = "{question}" if template_for is None else template_for(user_turn())
        before = keyword_tasks(template, words, *counts, rule)
        *after, printed = built(config, template_for)
        assert printed == []  # the keyword runs print nothing
        for task, old in zip(after, before):
            assert prompts(task) == prompts(old) and task.questions == old.questions
            assert [task.logged_truth(t) for t in task.truths] == old.truths
            for row, keywords in list(zip(task.truths, old.truths))[:6]:
                for response in (" ".join(keywords), keywords[0] + "s", keywords[0].upper(), ""):
                    assert task.reward_fn(response, row) == rule(response, keywords)
    assert task_stop(config) == () and needs_chat_template(config)


def test_keywords_from_a_built_dataset_folder(tmp_path):
    train_records = [
        {"prompt": "Use apple and river.", "answer": "An apple in the river.", "keywords": ["apple", "river"]},
        {"prompt": "Use lantern.", "answer": "A lantern.", "keywords": ["lantern"]},
    ]
    validation_records = [
        {"prompt": f"Use {w}.", "answer": f"The {w}.", "keywords": [w]} for w in ("moon", "sun", "tree", "sky")
    ]
    for name, records in (("train.jsonl", train_records), ("validation.jsonl", validation_records)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    config = GRPOConfig(task="keywords", keywords_dataset=tmp_path, n_eval_examples=3, time_budget="10m")
    old_train, old_validation = load_keyword_dataset(tmp_path, chat(user_turn()), KEYWORD_REWARD_FNS["substring"])
    # the first --n-eval-examples of validation.jsonl, under a time budget too (the whole set is those)
    train, validation, printed = built(config, chat)
    assert printed == [] and prompts(train) == prompts(old_train)
    assert prompts(validation) == prompts(old_validation)[:3]
    assert [validation.logged_truth(t) for t in validation.truths] == old_validation.truths[:3]
    assert train.reward_fn("the moon", validation.truths[0]) == {"format_reward": 1, "answer_reward": 1, "reward": 1}
