"""The text-only bound that keeps huge numbers and steep powers away from sympy."""

import pytest

from alignment.grading.magnitude import too_big_for_sympy

TOO_BIG = [
    "9^{9^{9^{9^{9}}}}",
    "10^{10^{10}}",
    "9^{9^{9}}",  # 369,693,100 digits
    "2^{10^{7}}",  # 3,010,300 digits
    "10^" + "1" * 100,
    "10000!!",
    "(10^{6})!",
    "\\binom{10^{9}}{10^{8}}",
    "9^9^9^9",
    "{9^9}^{9^{9}}",
    "(x+1)^{5000}",  # a symbolic power above degree 64
    "(1+\\sqrt{2})^{1000}",
    "e^{e^{e^{e^{e}}}}",  # a tower four or more high with a symbol in it
    "\\pi^{\\pi^{\\pi^{\\pi}}}",
    "x^{y^{z^{w}}}",
    "2^" * 400 + "2",  # deeper than the parser recurses
]

FINE = [
    "2^{2^{2^{2^{2}}}}",  # 19,729 digits: sympy takes it in stride
    "2^{10^{5}}",
    "1000!",
    "\\binom{100}{50}",
    "(x+1)^2",
    "x^{64}",
    "2 \\times 10^3",
    "10^{-3}",
    "e^{2x}",
    "e^{x^{2}}",
    "x^{y^{z}}",
    "\\sqrt{2}^{100}",
    "\\left(\\frac{2}{3}\\right)^{100}",
    "2^{x}",
    "\\pi r^2",
    "a^2+b^2=c^2",
    "\\frac{\\sqrt{3}}{2}",
    "1e99999999",
    "(1, 2)",
    "{" * 3000,
    "",
]


@pytest.mark.parametrize("latex", TOO_BIG, ids=lambda s: s[:16])
def test_huge_numbers_and_steep_powers_are_flagged(latex):
    assert too_big_for_sympy(latex)


@pytest.mark.parametrize("latex", FINE, ids=lambda s: s[:16])
def test_ordinary_answers_pass(latex):
    assert not too_big_for_sympy(latex)


def test_the_bounds_are_the_arguments():
    assert too_big_for_sympy("2^{10^{5}}", max_digits=1e4)  # 30,103 digits
    assert not too_big_for_sympy("2^{10^{7}}", max_digits=1e7)
    assert too_big_for_sympy("x^{10}", max_degree=8) and not too_big_for_sympy("x^{8}", max_degree=8)
