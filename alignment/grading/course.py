"""The course grader's verdicts: the rules of `drgrpo_grader.grade(answer, truth, fast=True)` (CS336 A5, UW CSE599-O
A3 and PKU NLPDL HW3 ship the same file), written here from what that function does, so that a reported accuracy
is comparable with the course's.

An answer matches when either of two normal forms agrees with the ground truth's:
- Hendrycks' MATH form (`hendrycks_form`): `\\text{}` wrapper, line breaks, `\\!`, `\\left`/`\\right`, a trailing
  `\\text{...}` and about 150 unit words (MathQA's) dropped, `tfrac`/`dfrac` read as `frac`, matrices as pmatrix,
  `^\\circ`, `\\$`, `\\%` dropped, a left-hand side of at most 2 characters dropped, `\\sqrt3`, `\\frac12`, `0.5`
  and `a/b` rewritten, spaces removed; the strings must be equal.
- The sympy form (`sympy_form`): 16 unit words dropped (without word boundaries), `million` etc. as powers of ten,
  LaTeX turned into text (pylatexenc), "a b" read as the mixed number a+b, braces and spaces dropped, lower case.
  Equal strings match; otherwise tuples and intervals `(..)`/`[..]` are compared element by element: two
  fractions must be the same string (an unreduced fraction is wrong), an integer ground truth needs an integer
  answer, anything else must simplify to a zero difference under sympy, when it has at most 2 distinct letters
  and no `^{`, `^(` or two-digit exponent.

Where the course's grader accepts a wrong answer, this one does not (docs/concepts/grader.md lists each case):
- a unit word may be left out but not exchanged for another: "10 m" is not "10 cm", "5 more" is not "5 less",
  and single letters that the course deletes as units ("t", "a", "s", ...) are read the same way, so `t^2+1` is
  not `s^2+1` and `(a)` is not `(c)`;
- a matrix row's cells stay apart (`&` is read as a comma), where the course reads a row as the sum of its cells;
- an answer that normalizes to nothing matches nothing (the course lets "minute" match `\\text{second}`);
- a ground truth that is not a string, a number or a list/tuple of them is a TypeError naming its type (the course
  fails with an UnboundLocalError).
Sympy runs in a worker process under a deadline (alignment/grading/symbolic.py), where the course runs it unbounded,
and an answer of over MAX_ANSWER_CHARS characters scores 0 (the course's rules take up to a minute on one).
"""

import re
from collections import Counter
from collections.abc import Callable

from alignment.grading.answers import closing_brace, unit_key
from alignment.grading.symbolic import latex_text, latex_text_within, sympy_difference_is_zero

# MathQA's unit words, in the order the course removes them (order matters: "sq m" before "sq" and "m"); each is a
# regular expression ("." is any character), removed between non-word characters; then each plural.
_UNIT_WORDS = (
    "east", "degree", "mph", "kmph", "ft", "m sqaure", " m east", "sq m", "deg", "mile", "q .", "monkey", "prime",
    "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per", "dm", "lt", "gain", "ab", "way", "west",
    "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .", "t", "a", "h", "no change", "men", "soldier", "pie", "bc",
    "excess", "st", "inches", "noon", "percent", "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th", "π r 2",
    "sq", "mark", "l", "toy", "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women", "feet", "am", "pm",
    "hr", "cu cm", "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm", "number", "kmph",
    "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt", "sq inch", "mp", "∏ cm ³",
    "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g", "month", "km", "m", "cm", "mm",
    "apple", "liter", "loss", "yard", "pure", "year", "increase", "decrease", "d", "less", "Surface", "litre",
    "pi sq m", "s .", "metre", "meter", "inch",
)  # fmt: skip
_UNIT_PATTERNS = [
    re.compile(rf"(?P<before>^|\W)(?P<unit>{word})(?P<after>$|\W)")
    for word in (*_UNIT_WORDS, *(word + "s" for word in _UNIT_WORDS))
]
# The sympy form's unit words, removed wherever they occur, with a plural and a power
_SYMPY_UNIT_WORDS = (
    "degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month", "year",
    "foot", "feet", "inch", "yard",
)  # fmt: skip
_SYMPY_UNIT_PATTERNS = [(word, re.compile(rf"{word}(es)?(s)? *(\^[0-9]+)?")) for word in _SYMPY_UNIT_WORDS]

_WRAPPED_TEXT = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_TRAILING_TEXT = re.compile(r"\\text{.*?}$")
_ARRAY_BEGIN = re.compile(r"\\begin\{array\}\{.*?\}")
_MATRIX = re.compile(r"\\begin\{(?:[pbvBV]?matrix|smallmatrix|array)\}")
_WORD = re.compile(r"[^\W\d_]+")
_MIXED_NUMBER = re.compile(r"([0-9]) +([0-9])")
_FORMATTED_COMMA = re.compile(r"(\d)(,)(\d\d\d)($|\D)")
_FRACTION = re.compile(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
_STEEP_POWERS = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))
_TUPLE_CHARS = "()[]"
_MAX_LATEX_DEPTH = 40  # pylatexenc recurses about 8 frames a brace level
MAX_ANSWER_CHARS = 1000  # longer answers score 0: no real final answer is that long, and the rules take seconds on them


class _Unparsed(Exception):
    """The Hendrycks rewriting met a form it cannot rewrite (`\\frac` or `\\sqrt` at the end, two trailing
    `\\text{ ...}`): the course then compares the answer as it stands."""


def _words(text: str) -> list[str]:
    return _WORD.findall(text.replace("\\text", " "))


def units_compatible(units: list[str], other: list[str]) -> bool:
    """Units of two answers agree, or one answer has none (a unit may be left out, not exchanged)."""
    return not units or not other or Counter(map(unit_key, units)) == Counter(map(unit_key, other))


# ---- Hendrycks' MATH form -----------------------------------------------------------------------------------------


def _fix_sqrt(s: str) -> str:
    head, *rest = s.split("\\sqrt")
    for part in rest:
        if not part:
            raise _Unparsed
        head += "\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:])
    return head


def _fix_fracs(s: str) -> str:
    head, *rest = s.split("\\frac")
    for part in rest:
        if not part:
            raise _Unparsed
        head += "\\frac"
        if part[0] == "{":
            head += part
        elif len(part) < 2:
            return s
        elif part[1] == "{":
            head += "{" + part[0] + "}" + part[1:]
        else:
            head += "{" + part[0] + "}{" + part[1] + "}" + part[2:]
    return head


def _fix_slash(s: str) -> str:
    if s.count("/") != 1:
        return s
    numerator, denominator = s.split("/")
    try:
        a, b = int(numerator), int(denominator)
    except ValueError:
        return s
    return f"\\frac{{{a}}}{{{b}}}" if s == f"{a}/{b}" else s


def _remove_units(s: str, units: list[str]) -> str:
    for _ in range(2):
        for pattern in _UNIT_PATTERNS:
            removed: list[str] = []
            kept = pattern.sub(lambda m: removed.append(m["unit"]) or m["before"] + m["after"], s)
            if kept:  # a removal that would leave nothing is not made
                s = kept
                units += removed
    return s


def _hendrycks_rewrite(s: str, units: list[str]) -> str:
    s = s.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    s = _ARRAY_BEGIN.sub(r"\\begin{pmatrix}", s).replace("\\end{array}", "\\end{pmatrix}").replace("bmatrix", "pmatrix")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\neq", "\\ne").replace("\\leq", "\\le").replace("\\geq", "\\ge")
    s = s.replace("\\left", "").replace("\\right", "")
    tail = _TRAILING_TEXT.search(s)
    kept = (s[: tail.start()] if tail else s).strip()
    if kept and kept != s:
        units += _words(s[tail.start() :]) if tail else []
        s = kept
    s = _remove_units(s, units)
    s = s.replace("^{\\circ}", "").replace("^\\circ", "").replace("\\$", "")
    if "\\text{ " in s:
        parts = s.split("\\text{ ")
        if len(parts) != 2:
            raise _Unparsed
        s = parts[0]
        units += _words(parts[1])
    s = s.replace("\\%", "").replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    s = _fix_fracs(_fix_sqrt(s).replace(" ", ""))
    return _fix_slash("\\frac{1}{2}" if s == "0.5" else s)


def hendrycks_form(answer: str | None) -> tuple[str | None, list[str]]:
    """Hendrycks' normal form of an answer (None stays None) and the unit words it dropped."""
    if answer is None:
        return None, []
    answer = answer.strip()
    wrapped = _WRAPPED_TEXT.search(answer)
    if wrapped:
        answer = wrapped["text"].strip()
    units: list[str] = []
    try:
        return _hendrycks_rewrite(answer, units), units
    except _Unparsed:
        return answer, []


# ---- the sympy form ------------------------------------------------------------------------------------------------


def _float_or_none(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _near_integer(x: float) -> bool:
    try:
        return abs(x - int(round(x))) <= 1e-7
    except (OverflowError, ValueError):
        return False


def _strip_formatted_commas(s: str) -> str:
    while True:
        stripped = _FORMATTED_COMMA.sub(r"\1\3\4", s)
        if stripped == s:
            return s
        s = stripped


def _integer_string(s: str) -> bool:
    value = _float_or_none(_strip_formatted_commas(s))
    return value is not None and _near_integer(value)


def _brace_depth(s: str) -> int | None:
    """The deepest brace nesting of s, or None when its braces do not balance."""
    depth = deepest = 0
    for c in s:
        depth += (c == "{") - (c == "}")
        if depth < 0:
            return None
        deepest = max(deepest, depth)
    return deepest if depth == 0 else None


def _latex_to_text(s: str, timeout_s: float) -> str | None:
    """pylatexenc's text of s: here for balanced braces; in the worker under a deadline for unbalanced ones, which
    cost it time exponential in the braces left open; None (s kept, as the course keeps it) past a nesting depth
    that pylatexenc's recursion cannot take."""
    depth = _brace_depth(s)
    if depth is None:
        return latex_text_within(s, timeout_s)
    return latex_text(s) if depth <= _MAX_LATEX_DEPTH else None


def sympy_form(answer: str | None, timeout_s: float = 2.0) -> tuple[str | None, list[str]]:
    """The sympy-side normal form of an answer (None stays None) and the unit words it dropped."""
    if answer is None:
        return None, []
    units: list[str] = []
    wrapped = _WRAPPED_TEXT.search(answer)
    s = wrapped["text"] if wrapped else answer
    s = s.replace("\\%", "%").replace("\\$", "$").replace("$", "").replace("%", "")
    s = s.replace(" or ", " , ").replace(" and ", " , ")
    s = s.replace("million", "*10^6").replace("billion", "*10^9").replace("trillion", "*10^12")
    for word, pattern in _SYMPY_UNIT_PATTERNS:
        s, count = pattern.subn("", s)
        units += [word] * count
    s = re.sub(r"\^ *\\circ", "", s)
    if s and s[0] == "{" and s[-1] == "}":
        s = s[1:-1]
    s = re.sub(r",\\! *", "", s)
    value = _float_or_none(s)
    if value is not None and _near_integer(value):
        s = str(int(round(value)))
    if "\\" in s:
        if _MATRIX.search(s):
            s = s.replace("&", ",")  # a row's cells stay apart (the course sums them as a mixed number)
        text = _latex_to_text(s, timeout_s)
        s = s if text is None else text  # where pylatexenc fails, the course keeps the text
    s = re.sub("- *", "-", s)
    s = _MIXED_NUMBER.sub(r"\1+\2", s)
    s = s.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _integer_string(s):
        s = str(int(float(s.replace(",", ""))))
    return s, units


def split_tuple(s: str) -> list[str]:
    """Elements of a tuple or interval wrapped in ()/[] without inner brackets; else the whole answer."""
    s = _strip_formatted_commas(s)
    if not s:
        return []
    if len(s) > 2 and s[0] in _TUPLE_CHARS and s[-1] in _TUPLE_CHARS and not any(c in s[1:-1] for c in _TUPLE_CHARS):
        return [element.strip() for element in s[1:-1].split(",")]
    return [s]


def may_simplify(expression: str) -> bool:
    """The course lets sympy see a difference of at most 2 distinct letters and no steep or braced powers."""
    letters = {c for c in expression.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or "^{" in expression or "^(" in expression:
        return False
    return not any(pattern.search(expression) for pattern in _STEEP_POWERS)


def _elements_equal(truth: str, given: str, timeout_s: float) -> bool:
    if _FRACTION.search(truth) and _FRACTION.search(given):
        return truth == given  # an unreduced fraction is not the reduced one
    if _integer_string(truth) != _integer_string(given):
        return False  # an integer ground truth needs an integer answer
    difference = f"({truth})-({given})"
    return may_simplify(difference) and sympy_difference_is_zero(difference, timeout_s)


def sympy_equal(given: str, truth: str | None, timeout_s: float) -> bool:
    truth_form, truth_units = sympy_form(truth, timeout_s)
    given_form, given_units = sympy_form(given, timeout_s)
    if not truth_form or not given_form or not units_compatible(truth_units, given_units):
        return False
    if truth_form == given_form:
        return True
    truth_elements, given_elements = split_tuple(truth_form), split_tuple(given_form)
    if len(truth_elements) > 1 and (truth_form[0] != given_form[0] or truth_form[-1] != given_form[-1]):
        return False  # the brackets of a tuple or interval must agree
    if len(truth_elements) != len(given_elements):
        return False
    return all(_elements_equal(t, g, timeout_s) for t, g in zip(truth_elements, given_elements))


def hendrycks_equal(given: str, truth: str | None) -> bool:
    truth_form, truth_units = hendrycks_form(truth)
    given_form, given_units = hendrycks_form(given)
    return bool(truth_form) and truth_form == given_form and units_compatible(truth_units, given_units)


# ---- answers and verdicts ------------------------------------------------------------------------------------------


def boxed_answer(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (braces matched), or None when it is unclosed or not `\\boxed{`."""
    start = text.rfind("\\boxed")
    if not text.startswith("\\boxed{", start):
        return None
    end = closing_brace(text, start + len("\\boxed"))
    return None if end is None else text[start + len("\\boxed{") : end]


def course_grade(
    given: str, truth: str, timeout_s: float, fast: bool = True, slow_check: Callable[[str, str], bool] | None = None
) -> bool:
    """Whether `given` answers `truth` by the course's rules (see the module docstring). With fast=False the course
    also asks math-verify; here `slow_check(given, truth)` is asked."""
    truth_answer = boxed_answer(truth) if "\\boxed" in truth else truth
    if len(given) > MAX_ANSWER_CHARS:
        return False
    correct = hendrycks_equal(given, truth_answer) or sympy_equal(given, truth_answer, timeout_s)
    if not correct and not fast and slow_check is not None and truth_answer is not None:
        correct = slow_check(given, truth_answer)
    return correct
