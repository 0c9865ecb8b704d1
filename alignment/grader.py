"""Reward functions for math answers: the r1_zero format + answer reward and the question_only variant.

Both return {"format_reward", "answer_reward", "reward"} in {0.0, 1.0}. An answer is right when it matches
a ground truth after normalization (see math_answers), as an exact number, or symbolically per math-verify
within a time bound; pathological input scores 0: overlong answers, huge numbers and steep powers before
sympy sees them (see magnitude), anything else after at most `timeout_s` (its worker is then replaced by a
warm fork).
"""

from collections.abc import Callable, Sequence

from alignment.grading.answers import clean_answer, last_boxed, parse_number
from alignment.grading.magnitude import too_big_for_sympy
from alignment.grading.symbolic import symbolically_equal

RewardFn = Callable[..., dict[str, float]]
GroundTruth = str | int | float | Sequence[str | int | float]

_MAX_SYMBOLIC_CHARS = 500  # real final answers are short; longer ones are not worth a sympy parse
DEFAULT_TIMEOUT_S = 2.0


def grade_answer(prediction: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `prediction` states the same final answer as `ground_truth`."""
    pred_clean, gold_clean = clean_answer(prediction), clean_answer(ground_truth)
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


def _matches(prediction: str, ground_truth: GroundTruth, timeout_s: float) -> bool:
    truths = ground_truth if isinstance(ground_truth, (list, tuple)) else [ground_truth]
    return any(grade_answer(prediction, str(truth), timeout_s) for truth in truths)


def _reward(format_ok: bool, answer_ok: bool) -> dict[str, float]:
    return {"format_reward": float(format_ok), "answer_reward": float(answer_ok), "reward": float(answer_ok)}


def r1_zero_reward_fn(
    response: str, ground_truth: GroundTruth, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, float]:
    """Reward for the r1_zero format `... </think> <answer> ANSWER </answer>`.

    Format needs the literal `</think> <answer>` and a closing `</answer>`; the answer is the text of the last
    <answer> block (its last \\boxed{} when it has one). A well-formatted wrong answer gets format 1, reward 0.
    """
    if "</think> <answer>" not in response or "</answer>" not in response:
        return _reward(False, False)
    answer = response.rsplit("<answer>", 1)[1].replace("</answer>", "")
    if "\\boxed" in answer:
        answer = last_boxed(answer)
        if answer is None:
            return _reward(True, False)
    return _reward(True, _matches(answer, ground_truth, timeout_s))


def question_only_reward_fn(
    response: str, ground_truth: GroundTruth, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, float]:
    """Reward for a free-form response whose final answer is its last \\boxed{}; format = a box exists."""
    answer = last_boxed(response)
    if answer is None:
        return _reward(False, False)
    return _reward(True, _matches(answer, ground_truth, timeout_s))


REWARD_FNS = {"r1_zero": r1_zero_reward_fn, "question_only": question_only_reward_fn}
