"""The r1_zero and question_only graders on hand-picked cases (each expectation decided by hand), in both modes:
`course` (the course's drgrpo_grader verdicts, without its false positives) and `lenient` (math equivalence)."""

import time

import pytest

from alignment.grader import GRADER_MODES, grade_answer, question_only_reward_fn, r1_zero_reward_fn, reward_fn_for
from alignment.grading.answers import gsm8k_ground_truth, last_boxed
from alignment.grading.symbolic import symbolically_equal

RIGHT = {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}
WRONG = {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}
UNFORMATTED = {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


def r1(answer: str) -> str:
    return f"Let me compute. </think> <answer>{answer}</answer>"


def course(answer, truth, **kwargs) -> float:
    return r1_zero_reward_fn(r1(answer), truth, **kwargs)["reward"]


def lenient(answer, truth) -> float:
    return r1_zero_reward_fn(r1(answer), truth, grader="lenient")["reward"]


EQUIVALENT = [  # right in both modes
    ("18", "18"),
    (" 18 ", "18"),
    ("18.0", "18"),
    ("18.00", "18"),
    ("$18", "18"),
    ("\\$18.00", "18"),
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
    ("(x+1)^2", "x^2+2x+1"),
    ("(1, 2)", "(1,2)"),
    ("\\left( 3, \\frac{1}{2} \\right)", "(3,\\frac{1}{2})"),
    ("[0, 1)", "[0,1)"),
    ("1e3", "1000"),
    ("3\\sqrt{3}", "\\sqrt{27}"),
    ("0.3333333333", "0.3333333333"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),  # spacing only
    ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"),
    ("y=3, x=2", "y=3, x=2"),
    ("2 hr", "2 \\text{ hours}"),  # a unit spelled two ways
]
# Right by value, refused by the course's grader on purpose: an integer needs an integer, a fraction must be
# reduced, sympy sees at most 2 letters, sets and tuples are ordered, and only MathQA's unit words are dropped
COURSE_REFUSES = [
    ("18 dollars", "18"),
    ("The answer is 18", "18"),
    ("17 + 1", "18"),
    ("2 \\times 10^3", "2000"),
    ("10^6", "1000000"),
    ("\\frac{10}{4}", "\\frac{5}{2}"),
    ("6/8", "3/4"),
    ("\\pi r^2", "r^2\\pi"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("3, 1", "1, 3"),
    ("y=3, x=2", "x=2, y=3"),
    ("1\\,125", "1125"),
    ("90°", "90^\\circ"),
]
# Right by the course's rules and not by the lenient grader's
COURSE_ONLY = [
    ("1 1/2", "\\frac{3}{2}"),  # a mixed number
    ("3.0000000001", "3"),  # within 1e-7 of an integer
]

DIFFERENT = [  # wrong in both modes
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
    # the lenient grader's own false positives, fixed: named values by name, matrix rows kept, units and words
    ("x=3, y=2", "x=2, y=3"),
    ("a=2, b=1, c=3", "a=1, b=2, c=3"),
    ("\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"),
    ("3x", "3"),
    ("2n", "2"),
    ("4i", "4"),
    ("4 i", "4"),
    ("2 pi", "2"),
    ("3 x", "3"),
    ("2a", "2c"),
    ("2x", "2y"),
    ("105 is wrong", "105"),
    ("106 not 105", "105"),
    ("10 m", "10 cm"),
    ("5 more", "5 less"),
    # the course grader's own false positives, refused by both modes
    ("t^2+1", "s^2+1"),
    ("a+1", "c+1"),
    ("\\frac{a}{2}", "\\frac{c}{2}"),
    ("(a)", "(c)"),
    ("a^2+b^2", "c^2+b^2"),
    ("x+a", "x+c"),
    ("m+1", "s+1"),
    ("\\sqrt{a}", "\\sqrt{d}"),
    ("\\begin{pmatrix} 1 & 2 \\end{pmatrix}", "\\begin{pmatrix} 2 & 1 \\end{pmatrix}"),
    ("\\begin{pmatrix} 0 & 3 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\end{pmatrix}"),
    ("minute", "\\text{second}"),
    ("", "\\text{second}"),
    ("10 meters", "10 \\text{ cm}"),
]


@pytest.mark.parametrize("grader", GRADER_MODES)
@pytest.mark.parametrize("answer,truth", EQUIVALENT)
def test_equivalent_forms_are_correct(answer, truth, grader):
    assert r1_zero_reward_fn(r1(answer), truth, grader=grader) == RIGHT


@pytest.mark.parametrize("answer,truth", COURSE_REFUSES)
def test_course_mode_refuses_what_the_course_refuses(answer, truth):
    assert course(answer, truth) == 0.0
    assert lenient(answer, truth) == 1.0


@pytest.mark.parametrize("answer,truth", COURSE_ONLY)
def test_course_mode_accepts_what_the_course_accepts(answer, truth):
    assert course(answer, truth) == 1.0
    assert lenient(answer, truth) == 0.0


@pytest.mark.parametrize("grader", GRADER_MODES)
@pytest.mark.parametrize("answer,truth", DIFFERENT)
def test_wrong_answers_keep_format_reward_only(answer, truth, grader):
    assert r1_zero_reward_fn(r1(answer), truth, grader=grader) == WRONG


def test_course_mode_rules_by_hand():
    # the answer is everything after the last <answer>: text after </answer> stays part of it
    assert r1_zero_reward_fn("x </think> <answer>18</answer> ok", "18")["reward"] == 0.0
    assert r1_zero_reward_fn("x </think> <answer>18</answer> ok", "18", grader="lenient")["reward"] == 1.0
    # a left-hand side of at most 2 characters is dropped, a longer one is not
    assert course("k = 3", "3") == 1.0 and course("x=3", "y=3") == 1.0 and course("area = 3", "3") == 0.0
    # MathQA unit words go (whole words only), other words stay
    assert course("5 cm", "5") == 1.0 and course("5 \\text{ cm}", "5") == 1.0 and course("5 apples", "5") == 1.0
    assert course("5 dollars", "5") == 0.0
    # a unit may be left out, not exchanged
    assert course("12", "12 \\text{ ways}") == 1.0 and course("12 cm", "12 \\text{ ways}") == 0.0
    # only \\boxed{...} is read as a box; \\fbox is text, an unclosed box scores 0 with format 1
    assert course("\\boxed{3} then \\boxed{4}", "4") == 1.0
    assert r1_zero_reward_fn(r1("\\boxed{3"), "3") == WRONG
    assert r1_zero_reward_fn(r1("\\boxed 3"), "3") == WRONG
    # both fractions: the same string; a fraction against a decimal: sympy
    assert course("\\frac{6}{8}", "0.75") == 1.0 and course("\\frac{3}{4}", "\\frac{3}{4}") == 1.0
    # at most 2 distinct letters reach sympy; no braced or two-digit powers
    assert course("(a+b)^2", "a^2+2ab+b^2") == 1.0 and course("x+y+z+w", "w+z+y+x") == 0.0
    assert course("2^{10}", "2^{10}") == 1.0 and course("x^{2}", "x^2") == 1.0
    # the ground truth's own box is opened; lists are alternatives, numbers strings
    assert course("3", "\\boxed{3}") == 1.0 and course("3", ["4", "3"]) == 1.0 and course("3", 3) == 1.0
    # cells of a matrix compared as written: spacing does not matter, order does
    assert (
        course("\\begin{pmatrix} \\frac{1}{2} \\\\ -3\\end{pmatrix}", "\\begin{pmatrix} 1/2 \\\\ -3 \\end{pmatrix}")
        == 1.0
    )
    assert (
        course("\\begin{pmatrix} 3 \\\\ 2 \\\\ 1 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\\\ 3 \\end{pmatrix}")
        == 0.0
    )


def test_course_fast_keyword_and_modes():
    # students call the course's signature: r1_zero_reward_fn(response, ground_truth, fast=True)
    assert r1_zero_reward_fn(r1("18"), "18", fast=True) == RIGHT
    assert r1_zero_reward_fn(r1("18"), "18", True) == RIGHT
    # fast=False adds the lenient verdict to the course's (the course adds math-verify's)
    assert r1_zero_reward_fn(r1("18 dollars"), "18", fast=False)["reward"] == 1.0
    assert question_only_reward_fn("so \\boxed{18 dollars}", "18", fast=False)["reward"] == 1.0
    with pytest.raises(ValueError, match="grader must be one of course, lenient"):
        r1_zero_reward_fn(r1("18"), "18", grader="strict")
    with pytest.raises(ValueError, match="--grader must be one of"):
        reward_fn_for("r1_zero", "strict")
    assert reward_fn_for("r1_zero", "lenient")(r1("18 dollars"), "18")["reward"] == 1.0
    assert reward_fn_for("question_only", "course")("\\boxed{18}", "18")["reward"] == 1.0


@pytest.mark.parametrize("grader", GRADER_MODES)
@pytest.mark.parametrize("truth", [None, object(), {"answer": "3"}])
def test_a_ground_truth_of_another_type_is_an_error_naming_it(truth, grader):
    # the course's grader fails with UnboundLocalError here; a tuple is a list of alternatives
    with pytest.raises(TypeError, match=type(truth).__name__):
        r1_zero_reward_fn(r1("3"), truth, grader=grader)
    assert r1_zero_reward_fn(r1("3"), ("4", "3"), grader=grader) == RIGHT


def test_overlong_answers_score_zero_in_course_mode():
    long_answer = "3" + " " * 1000
    assert course(long_answer, "3") == 0.0
    assert course("3" + " " * 900, "3") == 1.0


BAD_FORMAT = [
    "The answer is 18.",
    "<answer>18</answer>",  # no </think> before it
    "</think><answer>18</answer>",  # the handouts' format has a space between the tags
    "reasoning </think> <answer>18",  # never closed
    "reasoning </think>\n<answer>18</answer>",
    "",
]


@pytest.mark.parametrize("grader", GRADER_MODES)
@pytest.mark.parametrize("response", BAD_FORMAT)
def test_bad_format_gets_nothing(response, grader):
    assert r1_zero_reward_fn(response, "18", grader=grader) == UNFORMATTED


@pytest.mark.parametrize("grader", GRADER_MODES)
def test_r1_zero_uses_last_answer_block_and_list_truths(grader):
    assert r1_zero_reward_fn("a </think> <answer>3</answer> <answer>18</answer>", "18", grader=grader) == RIGHT
    assert r1_zero_reward_fn(r1("4"), ["3", "4"], grader=grader)["reward"] == 1.0
    assert r1_zero_reward_fn(r1("18"), 18, grader=grader)["reward"] == 1.0
    assert r1_zero_reward_fn(r1("0.25"), 0.25, grader=grader)["reward"] == 1.0
    assert r1_zero_reward_fn(r1("\\boxed{3"), "3", grader=grader) == WRONG


@pytest.mark.parametrize("grader", GRADER_MODES)
@pytest.mark.parametrize(
    "response,truth,expected",
    [
        ("So the total is \\boxed{18}.", "18", 1.0),
        ("First \\boxed{3}, then corrected: \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("\\boxed{17}", "18", 0.0),
        ("The answer is 18.", "18", 0.0),
    ],
)
def test_question_only(response, truth, expected, grader):
    result = question_only_reward_fn(response, truth, grader=grader)
    assert result["reward"] == expected
    assert result["format_reward"] == float("\\boxed" in response)


def test_question_only_reads_fbox_only_when_lenient():
    assert question_only_reward_fn("so \\fbox{18}", "18") == UNFORMATTED
    assert question_only_reward_fn("so \\fbox{18}", "18", grader="lenient") == RIGHT


def test_last_boxed_and_gsm8k_truth():
    assert last_boxed("\\boxed{a} and \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed 7$") == "7"
    assert last_boxed("\\fbox{x}") == "x"
    assert last_boxed("no box") is None
    assert gsm8k_ground_truth("3 + 4 = <<3+4=7>>7\n#### 1,007") == "1007"
    with pytest.raises(ValueError, match="####"):
        gsm8k_ground_truth("no final line")


ADVERSARIAL = [
    "9^{9^{9^{9^{9}}}}",  # once 5 s per call
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
