"""The r1_zero and question_only graders on hand-picked cases (each expectation decided by hand)."""

import time

import pytest

from alignment.grader import grade_answer, question_only_reward_fn, r1_zero_reward_fn
from alignment.grading.answers import gsm8k_ground_truth, last_boxed
from alignment.grading.symbolic import symbolically_equal


def r1(answer: str) -> str:
    return f"Let me compute. </think> <answer>{answer}</answer>"


EQUIVALENT = [
    ("18", "18"),
    (" 18 ", "18"),
    ("18.0", "18"),
    ("18.00", "18"),
    ("$18", "18"),
    ("\\$18.00", "18"),
    ("18 dollars", "18"),
    ("180 meters", "180"),
    ("1,234", "1234"),
    ("1,234,567", "1234567"),
    ("50\\%", "50"),
    ("50%", "50"),
    ("-7", "-7"),
    ("0.5", "\\frac{1}{2}"),
    (".5", "0.5"),
    ("1/2", "\\frac{1}{2}"),
    ("\\dfrac{1}{2}", "\\frac12"),
    ("\\tfrac{3}{4}", "0.75"),
    ("-\\frac{3}{4}", "-0.75"),
    ("\\boxed{42}", "42"),
    ("The answer is \\boxed{\\frac{2}{3}}", "2/3"),
    ("x = 5", "5"),
    ("y=-2", "-2"),
    ("90^\\circ", "90"),
    ("90^{\\circ}", "90"),
    ("\\text{(B)}", "(B)"),
    ("\\sqrt{2}/2", "\\frac{\\sqrt{2}}{2}"),
    ("\\sqrt2", "\\sqrt{2}"),
    ("2\\pi", "2 \\pi"),
    ("\\pi r^2", "r^2\\pi"),
    ("(x+1)^2", "x^2+2x+1"),
    ("(1, 2)", "(1,2)"),
    ("\\left( 3, \\frac{1}{2} \\right)", "(3,\\frac{1}{2})"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("[0, 1)", "[0,1)"),
    ("2 \\times 10^3", "2000"),
    ("1e3", "1000"),
    ("\\frac{10}{4}", "\\frac{5}{2}"),
    ("3\\sqrt{3}", "\\sqrt{27}"),
    ("0.3333333333", "0.3333333333"),
]

DIFFERENT = [
    ("17", "18"),
    ("18", "180"),
    ("-18", "18"),
    ("1,2", "12"),  # a pair, not a thousands separator
    ("0.333", "\\frac{1}{3}"),
    ("\\frac{1}{2}", "\\frac{2}{1}"),
    ("x+1", "x-1"),
    ("(1, 2)", "(2, 1)"),
    ("[0, 1)", "[0, 1]"),
    ("2\\pi", "\\pi"),
    ("\\sqrt{2}", "2"),
    ("A", "B"),
    ("", "5"),
    ("   ", "5"),
    ("five", "6"),
    ("\\boxed{}", "3"),
]


@pytest.mark.parametrize("answer,truth", EQUIVALENT)
def test_equivalent_forms_are_correct(answer, truth):
    assert r1_zero_reward_fn(r1(answer), truth) == {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}


@pytest.mark.parametrize("answer,truth", DIFFERENT)
def test_wrong_answers_keep_format_reward_only(answer, truth):
    assert r1_zero_reward_fn(r1(answer), truth) == {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}


BAD_FORMAT = [
    "The answer is 18.",
    "<answer>18</answer>",  # no </think> before it
    "</think><answer>18</answer>",  # the handouts' format has a space between the tags
    "reasoning </think> <answer>18",  # never closed
    "reasoning </think>\n<answer>18</answer>",
    "",
]


@pytest.mark.parametrize("response", BAD_FORMAT)
def test_bad_format_gets_nothing(response):
    assert r1_zero_reward_fn(response, "18") == {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


def test_r1_zero_uses_last_answer_block_and_list_truths():
    assert r1_zero_reward_fn("a </think> <answer>3</answer> <answer>18</answer>", "18")["reward"] == 1.0
    assert r1_zero_reward_fn(r1("4"), ["3", "4"])["reward"] == 1.0
    assert r1_zero_reward_fn(r1("18"), 18)["reward"] == 1.0
    assert r1_zero_reward_fn(r1("0.25"), 0.25)["reward"] == 1.0
    unclosed_box = r1_zero_reward_fn(r1("\\boxed{3"), "3")
    assert unclosed_box == {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}


@pytest.mark.parametrize(
    "response,truth,expected",
    [
        ("So the total is \\boxed{18}.", "18", 1.0),
        ("First \\boxed{3}, then corrected: \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{17}", "18", 0.0),
        ("The answer is 18.", "18", 0.0),
    ],
)
def test_question_only(response, truth, expected):
    result = question_only_reward_fn(response, truth)
    assert result["reward"] == expected
    assert result["format_reward"] == float("\\boxed" in response)


def test_last_boxed_and_gsm8k_truth():
    assert last_boxed("\\boxed{a} and \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed 7$") == "7"
    assert last_boxed("\\fbox{x}") == "x"
    assert last_boxed("no box") is None
    assert gsm8k_ground_truth("3 + 4 = <<3+4=7>>7\n#### 1,007") == "1007"
    with pytest.raises(ValueError, match="####"):
        gsm8k_ground_truth("no final line")


ADVERSARIAL = [
    "9^{9^{9^{9^{9}}}}",  # issue 14: once 5 s per call
    "\\frac{" * 5000,
    "10^{10^{10}}",
    "9^{9^{9^{9}}}",
    "2^{10^{7}}",
    "1" * 1_000_000,
    "10^" + "1" * 100,
    "(" * 20000 + ")" * 20000,
    "\\sqrt{" * 3000 + "}" * 3000,
    "1e99999999",
    "10000!!",
    "\\binom{10^{9}}{10^{8}}",
    "(x+1)^{5000}",
    "(1+\\sqrt{2})^{1000}",
    "e^{e^{e^{e^{e}}}}",
]


@pytest.mark.parametrize("answer", ADVERSARIAL, ids=lambda a: a[:12])
def test_pathological_input_is_bounded_and_wrong(answer):
    start = time.perf_counter()
    assert r1_zero_reward_fn(r1(answer), "5", timeout_s=1.0)["reward"] == 0.0
    assert grade_answer(answer, "x+1", timeout_s=1.0) is False
    # one symbolic deadline per call plus, at most, a worker restart after a kill
    assert time.perf_counter() - start < 2 * (1.0 + 5.0)


def test_grader_recovers_after_a_timeout():
    assert symbolically_equal("7", "10^{10^{10}}", timeout_s=0.5) is False  # sympy itself, killed at the deadline
    assert grade_answer("(x+1)^2", "x^2+2x+1")
    assert symbolically_equal("x^2+2x+1", "(x+1)^2", timeout_s=0.5)  # the fresh fork is warm
