"""Extracting and normalizing final answers to math problems (pure string functions, linear time)."""

import re
from fractions import Fraction

# A number followed by one to three plain words is a number with a unit ("18 dollars", "5 cm", "3 apples"), unless a
# word is a variable, a constant or part of a sentence ("3x", "2 pi", "105 is wrong", "5 more")
_UNIT_TAIL = re.compile(r"^(-?[\d.,/]+)(\s*)([a-zA-Z]+\.?(?:\s+[a-zA-Z]+\.?){0,2})$")
_ABBREVIATED_UNITS = frozenset(
    "cm mm km m kg g mg lb lbs oz ft yd mi ml l s sec min h hr hrs mph kph kmh".split()
)  # these may follow a number without a space ("10cm"); other words need one ("18 dollars")
_SPACED_LETTER_UNITS = frozenset("m g s h".split())  # the only one-letter words read as units ("10 m")
_NOT_UNITS = frozenset(
    "is are was were be not no or and than then so that this it more less fewer greater smaller larger bigger "
    "wrong right correct incorrect true false pi sqrt times plus minus over divided by of to the an approximately "
    "about roughly exactly at least most only".split()
)
# Names of one unit: a unit may be left out of an answer, but not exchanged for another one
UNIT_ALIASES = {
    "hr": "hour", "h": "hour", "min": "minute", "minw": "minute", "sec": "second", "s": "second", "yr": "year",
    "ft": "foot", "feet": "foot", "metre": "meter", "m": "meter", "mt": "meter", "mtr": "meter", "cm": "centimeter",
    "mm": "millimeter", "km": "kilometer", "dm": "decimeter", "litre": "liter", "l": "liter", "lt": "liter",
    "g": "gram", "gm": "gram", "kg": "kilogram", "lb": "pound", "deg": "degree", "gal": "gallon", "kmh": "kmph",
    "kph": "kmph", "in": "inch", "inche": "inch", "rs": "rupee", "yd": "yard", "mi": "mile", "hrs": "hour",
}  # fmt: skip
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

_ROW_BREAK = "\\\\"  # `\\` ends a matrix row; dropping `\ ` (a control space) must not eat its second half
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
    end = closing_brace(text, i)
    return None if end is None else text[i + 1 : end]


def closing_brace(text: str, i: int) -> int | None:
    """The index of the `}` that closes the `{` at text[i], or None when text[i] is not `{` or it is never closed."""
    if i >= len(text) or text[i] != "{":
        return None
    depth = 0
    for j in range(i, len(text)):
        depth += (text[j] == "{") - (text[j] == "}")
        if depth == 0:
            return j
    return None


def gsm8k_ground_truth(answer: str) -> str:
    """The final answer of a GSM8K solution: the text after its last `####`, thousands commas removed."""
    if "####" not in answer:
        raise ValueError(f"GSM8K answer has no '#### N' line: {answer[-80:]!r}")
    return answer.rsplit("####", 1)[1].strip().replace(",", "")


def strip_presentation(answer: str) -> str:
    """Strip presentation from an answer, keeping it valid LaTeX (spaces kept) for symbolic parsing.

    Removes \\boxed, $ and \\( \\) delimiters, \\text{} wrappers, \\left/\\right, spacing commands (not a row
    break `\\\\`), degree and percent signs, thousands separators and a trailing period; rewrites
    \\dfrac/\\tfrac as \\frac and shorthand like \\frac12 or \\sqrt2 with braces. Unit words stay
    (`strip_unit` removes them).
    """
    s = answer.strip()
    boxed = last_boxed(s)
    if boxed is not None:
        s = boxed
    for _ in range(3):  # \text{} wrappers nest rarely and shallowly
        s = _TEXT_WRAPPER.sub(r"\1", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    pieces = s.split(_ROW_BREAK)
    for token in _DROPPED:
        pieces = [piece.replace(token, "") for piece in pieces]
    s = _ROW_BREAK.join(pieces)
    s = _FRAC_SHORTHAND.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_HALF_SHORTHAND.sub(r"\\frac{\1}", s)
    s = _SQRT_SHORTHAND.sub(r"\\sqrt{\1}", s)
    return _THOUSANDS_COMMA.sub("", s).strip().rstrip(".").strip()


def clean_answer(answer: str) -> str:
    """`strip_presentation` and a leading `x =` (one name); a leading `.` becomes `0.`."""
    s = _SINGLE_VAR_LHS.sub("", strip_presentation(answer))
    if s.startswith("."):
        s = "0" + s
    return s


def unit_key(word: str) -> str:
    """One name per unit: lower case, singular, abbreviations spelled out ("Hrs" -> "hour", "inches" -> "inch")."""
    word = word.lower().rstrip(".")
    if len(word) > 3 and word.endswith(("ches", "shes", "xes")):
        word = word[:-2]
    elif len(word) > 2 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return UNIT_ALIASES.get(word, word)


def _unit_tail(answer: str) -> tuple[str, str] | None:
    """(number, unit words) of a cleaned answer that is a number with a unit; None otherwise."""
    match = _UNIT_TAIL.match(answer) if len(answer) <= _MAX_UNIT_CHARS else None
    if match is None:
        return None
    number, space, tail = match.groups()
    words = [word.rstrip(".") for word in tail.split()]
    if not space and words[0].lower() not in _ABBREVIATED_UNITS:
        return None  # "3x", "2n", "4i": a product, not a unit
    for word in words:
        lower = word.lower()
        if lower in _NOT_UNITS or (len(lower) == 1 and lower not in _SPACED_LETTER_UNITS):
            return None
    return number, " ".join(unit_key(word) for word in words)


def strip_unit(answer: str) -> str:
    """A cleaned answer without its unit words ("18 dollars" -> "18"); anything else unchanged."""
    tail = _unit_tail(answer)
    return answer if tail is None else tail[0]


def answer_unit(answer: str) -> str | None:
    """The unit an answer names after its number ("10 cm" -> "centimeter"), or None."""
    tail = _unit_tail(clean_answer(answer))
    return None if tail is None else tail[1]


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
