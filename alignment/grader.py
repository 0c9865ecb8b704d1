"""Reward functions for math answers: the r1_zero format + answer reward and the question_only variant.

Both return {"format_reward", "answer_reward", "reward"} in {0.0, 1.0} and grade in one of two modes:

- `course` (the default): the verdicts of the course's `drgrpo_grader` in fast mode, the grader the handouts tell
  students to use (alignment/grading/course.py), without the false positives it has (docs/concepts/grader.md);
- `lenient`: math equivalence: an answer is right when it matches a ground truth after normalization (see
  alignment/grading/answers.py), as an exact number, or symbolically per math-verify, named values by name.

Pathological input scores 0 in both: overlong answers, huge numbers and steep powers before sympy sees them (see
magnitude), anything else after at most `timeout_s` (its worker is then replaced by a warm fork).
"""

import re
from collections.abc import Callable, Sequence
from functools import partial
from numbers import Real
from typing import Literal

from alignment.grading.answers import (
    answer_unit,
    clean_answer,
    last_boxed,
    parse_number,
    strip_presentation,
    strip_unit,
    unit_key,
)
from alignment.grading.course import boxed_answer, course_grade
from alignment.grading.magnitude import too_big_for_sympy
from alignment.grading.symbolic import symbolically_equal

RewardFn = Callable[..., dict[str, float]]
GroundTruth = str | int | float | Sequence[str | int | float]
GraderMode = Literal["course", "lenient"]
GRADER_MODES: tuple[GraderMode, ...] = ("course", "lenient")

_MAX_SYMBOLIC_CHARS = 500  # real final answers are short; longer ones are not worth a sympy parse
DEFAULT_TIMEOUT_S = 2.0
_NAMED_VALUE = re.compile(r"^\s*([a-zA-Z](?:_\{?\w+\}?)?)\s*=\s*(.+?)\s*$")
_LATEX_COMMAND = re.compile(r"\\[a-zA-Z]+")
_WORD = re.compile(r"[a-zA-Z]{2,}")


def answer_words(answer: str) -> set[str]:
    """The words of an answer outside LaTeX commands, one name per unit ("Hours" and "hr" are "hour")."""
    return {unit_key(word) for word in _WORD.findall(_LATEX_COMMAND.sub(" ", strip_presentation(answer)))}


def named_values(answer: str) -> list[tuple[str, str]] | None:
    """`x = 2, y = 3` as [("x", "2"), ("y", "3")]: two or more comma-separated `name = value` parts; else None."""
    parts = answer.split(",")
    if len(parts) < 2:
        return None
    matches = [_NAMED_VALUE.match(part) for part in parts]
    if not all(matches):
        return None
    return [(m[1], m[2]) for m in matches if m]


def _grade_named(prediction: str, ground_truth: str, timeout_s: float) -> bool | None:
    """Named values are compared by name (`y=3, x=2` is `x=2, y=3`; `x=3, y=2` is not); a bare list against
    named values in order. None when neither side names two or more values."""
    pred, gold = named_values(strip_presentation(prediction)), named_values(strip_presentation(ground_truth))
    if pred is None and gold is None:
        return None
    if pred is not None and gold is not None:
        pred_by_name, gold_by_name = dict(pred), dict(gold)
        if len(pred_by_name) != len(pred) or pred_by_name.keys() != gold_by_name.keys():
            return False
        return all(grade_answer(pred_by_name[name], value, timeout_s) for name, value in gold_by_name.items())
    values = [v for _, v in (pred or gold or [])]
    bare = [v.strip() for v in strip_presentation(ground_truth if pred is not None else prediction).split(",")]
    if len(bare) != len(values):
        return False
    pairs = zip(values, bare) if pred is not None else zip(bare, values)
    return all(grade_answer(p, g, timeout_s) for p, g in pairs)


def grade_answer(prediction: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `prediction` states the same final answer as `ground_truth` (the lenient mode)."""
    named = _grade_named(prediction, ground_truth, timeout_s)
    if named is not None:
        return named
    pred_unit, gold_unit = answer_unit(prediction), answer_unit(ground_truth)
    if pred_unit and gold_unit and pred_unit != gold_unit:
        return False  # a unit may be left out, not exchanged: "10 m" is not "10 cm"
    pred_words, gold_words = answer_words(prediction), answer_words(ground_truth)
    if not (pred_words <= gold_words or gold_words <= pred_words):
        return False  # words may be left out or added, not exchanged: "5 more" is not "5 less"
    pred_clean, gold_clean = strip_unit(clean_answer(prediction)), strip_unit(clean_answer(ground_truth))
    pred, gold = "".join(pred_clean.split()), "".join(gold_clean.split())  # canonical_answer, cleaned once
    if not pred or not gold:
        return False
    if pred == gold:
        return True
    pred_number, gold_number = parse_number(pred), parse_number(gold)
    if pred_number is not None and gold_number is not None:
        return pred_number == gold_number
    if max(len(pred_clean), len(gold_clean)) > _MAX_SYMBOLIC_CHARS:
        return False
    if too_big_for_sympy(pred_clean) or too_big_for_sympy(gold_clean):  # nor do they need huge exact algebra
        return False
    return symbolically_equal(gold_clean, pred_clean, timeout_s)


def _truths(ground_truth: GroundTruth) -> list[str]:
    """Every accepted answer as a string: a string or number is one, a list or tuple any of several."""
    truths = ground_truth if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    for truth in truths:
        if not isinstance(truth, (str, Real)):
            raise TypeError(
                f"ground truth must be a string, a number or a list of them, got {type(truth).__name__}: {truth!r}"
            )
    return [str(truth) for truth in truths]


def _matches(answer: str, ground_truth: GroundTruth, grader: GraderMode, fast: bool, timeout_s: float) -> bool:
    if grader not in GRADER_MODES:
        raise ValueError(f"grader must be one of {', '.join(GRADER_MODES)}, got {grader!r}")
    if grader == "lenient":
        return any(grade_answer(answer, truth, timeout_s) for truth in _truths(ground_truth))
    slow = partial(grade_answer, timeout_s=timeout_s)  # what fast=False adds
    return any(course_grade(answer, truth, timeout_s, fast, slow) for truth in _truths(ground_truth))


def _reward(format_ok: bool, answer_ok: bool) -> dict[str, float]:
    return {"format_reward": float(format_ok), "answer_reward": float(answer_ok), "reward": float(answer_ok)}


def r1_zero_reward_fn(
    response: str,
    ground_truth: GroundTruth,
    fast: bool = True,
    *,
    grader: GraderMode = "course",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, float]:
    """Reward for the r1_zero format `... </think> <answer> ANSWER </answer>`.

    Format needs the literal `</think> <answer>` and a closing `</answer>`; the answer is the text of the last
    <answer> block (its last \\boxed{} when it has one). A well-formatted wrong answer gets format 1, reward 0.
    The course's grader keeps any text after `</answer>` in the answer; the lenient one reads up to it.
    `fast` is the course's argument: False adds the lenient verdict to the course's (its slow mode adds
    math-verify's); the lenient mode ignores it.
    """
    if "</think> <answer>" not in response or "</answer>" not in response:
        return _reward(False, False)
    answer = response.rsplit("<answer>", 1)[1]
    answer = answer.replace("</answer>", "") if grader == "course" else answer.split("</answer>", 1)[0]
    if "\\boxed" in answer:
        answer = boxed_answer(answer) if grader == "course" else last_boxed(answer)
        if answer is None:
            return _reward(True, False)
    return _reward(True, _matches(answer, ground_truth, grader, fast, timeout_s))


def question_only_reward_fn(
    response: str,
    ground_truth: GroundTruth,
    fast: bool = True,
    *,
    grader: GraderMode = "course",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, float]:
    """Reward for a free-form response whose final answer is its last \\boxed{}; format = a box exists."""
    answer = boxed_answer(response) if grader == "course" else last_boxed(response)  # lenient: \\fbox{} too
    if answer is None:
        return _reward(False, False)
    return _reward(True, _matches(answer, ground_truth, grader, fast, timeout_s))


def lenient_r1_zero_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """r1_zero_reward_fn with grader="lenient" (a module-level function: grading workers import it by name)."""
    return r1_zero_reward_fn(response, ground_truth, grader="lenient")


def lenient_question_only_reward_fn(response: str, ground_truth: GroundTruth) -> dict[str, float]:
    """question_only_reward_fn with grader="lenient"."""
    return question_only_reward_fn(response, ground_truth, grader="lenient")


REWARD_FNS = {"r1_zero": r1_zero_reward_fn, "question_only": question_only_reward_fn}
LENIENT_REWARD_FNS = {"r1_zero": lenient_r1_zero_reward_fn, "question_only": lenient_question_only_reward_fn}


def reward_fn_for(kind: str, grader: GraderMode) -> RewardFn:
    """The reward function of a prompt kind (`r1_zero`, `question_only`) graded in `grader` mode."""
    if grader not in GRADER_MODES:
        raise ValueError(f"--grader must be one of {', '.join(GRADER_MODES)}, got {grader!r}")
    return (REWARD_FNS if grader == "course" else LENIENT_REWARD_FNS)[kind]
