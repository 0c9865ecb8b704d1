"""Extracting and normalizing final answers to math problems (pure string functions, linear time)."""

import re
from fractions import Fraction

# A number followed only by a few plain words is a number with a unit ("18 dollars", "5 cm", "3 apples").
_UNIT_TAIL = re.compile(r"^(-?[\d.,/]+)\s*(?:[a-zA-Z]+\.?\s*){1,3}$")
_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SINGLE_VAR_LHS = re.compile(r"^[a-zA-Z]\s*=\s*(?=\S)")
_FRAC_SHORTHAND = re.compile(r"\\frac\s*(\d)\s*(\d)")
_FRAC_HALF_SHORTHAND = re.compile(r"\\frac\s*(\d)\s*(?=\{)")
_SQRT_SHORTHAND = re.compile(r"\\sqrt\s*(\d+|[a-zA-Z])")
_LATEX_FRAC = re.compile(r"^(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}$")
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d{1,3})?$")
_PLAIN_FRACTION = re.compile(r"^([-+]?\d+)/([-+]?\d+)$")
_MAX_NUMBER_CHARS = 400  # longer numerals are never an intended answer; Fraction() on them is slow
_MAX_UNIT_CHARS = 80  # _UNIT_TAIL may backtrack polynomially, so it only sees short answers

_DROPPED = (
    "\\left",
    "\\right",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "~",
    "\\displaystyle",
    "^{\\circ}",
    "^\\circ",
    "\\circ",
    "°",
    "\\degree",
    "\\%",
    "%",
    "\\$",
    "$",
    "\\(",
    "\\)",
    "\\[",
    "\\]",
)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in `text`, braces matched; None if absent or unclosed.

    Also accepts the brace-less form `\\boxed 5`.
    """
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    if i < len(text) and text[i] == " ":
        rest = text[i + 1 :].lstrip()
        return rest.split("$")[0].split()[0] if rest.strip() else None
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j]
    return None


def gsm8k_ground_truth(answer: str) -> str:
    """The final answer of a GSM8K solution: the text after its last `####`, thousands commas removed."""
    if "####" not in answer:
        raise ValueError(f"GSM8K answer has no '#### N' line: {answer[-80:]!r}")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def clean_answer(answer: str) -> str:
    """Strip presentation from an answer, keeping it valid LaTeX (spaces kept) for symbolic parsing.

    Removes \\boxed, $ and \\( \\) delimiters, \\text{} wrappers, \\left/\\right, spacing commands, degree
    and percent signs, thousands separators, a trailing period, a leading `x =`, and unit words after a
    number; rewrites \\dfrac/\\tfrac as \\frac and shorthand like \\frac12 or \\sqrt2 with braces.
    """
    s = answer.strip()
    boxed = last_boxed(s)
    if boxed is not None:
        s = boxed
    for _ in range(3):  # \text{} wrappers nest rarely and shallowly
        s = _TEXT_WRAPPER.sub(r"\1", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for token in _DROPPED:
        s = s.replace(token, "")
    s = _FRAC_SHORTHAND.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_HALF_SHORTHAND.sub(r"\\frac{\1}", s)
    s = _SQRT_SHORTHAND.sub(r"\\sqrt{\1}", s)
    s = _THOUSANDS_COMMA.sub("", s).strip().rstrip(".").strip()
    s = _SINGLE_VAR_LHS.sub("", s)
    unit = _UNIT_TAIL.match(s) if len(s) <= _MAX_UNIT_CHARS else None
    if unit:
        s = unit.group(1)
    if s.startswith("."):
        s = "0" + s
    return s


def canonical_answer(answer: str) -> str:
    """`clean_answer` without whitespace: the form compared as a string."""
    return "".join(clean_answer(answer).split())


def parse_number(answer: str) -> Fraction | None:
    """Exact value of a canonical answer that is a plain number, a/b, or \\frac{a}{b}; else None."""
    s = answer.replace(" ", "")
    if not s or len(s) > _MAX_NUMBER_CHARS:
        return None
    try:
        if _PLAIN_NUMBER.match(s):
            return Fraction(s)
        fraction = _PLAIN_FRACTION.match(s)
        if fraction:
            return Fraction(int(fraction.group(1)), int(fraction.group(2)))
        latex = _LATEX_FRAC.match(s)
        if latex:
            value = Fraction(int(latex.group(2)), int(latex.group(3)))
            return -value if latex.group(1) else value
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None
