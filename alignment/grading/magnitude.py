"""Answers too big for exact symbolic algebra, found from their text in microseconds.

sympy evaluates `9^{9^{9}}`, `(10^{4})!` or `(x+1)^{5000}` exactly, in C code or long expansions that no
deadline can stop short of killing its process. Two bounds flag them before sympy sees them:
- a power, factorial or binomial of numbers whose value has more than `max_digits` decimal digits;
- a power of anything that is not a number (a symbol, `e`, `\\pi`, a sum) with a numeric exponent above
  `max_degree`, or in a tower four or more powers high (`e^{e^{e^{e}}}` is about 10^{1,656,521}).
Numbers are carried as log10 of their value (a tower overflows to inf); symbolic values as None.
"""

import math
import re

_TOKEN = re.compile(r"\d+(?:\.\d*)?|\\[a-zA-Z]+|\S")
_OPEN_CLOSE = {"{": "}", "(": ")", "[": "]"}
_BINOMIALS = {"\\binom", "\\dbinom", "\\tbinom"}
_OPERATORS = {  # commands that join atoms rather than being one
    "\\cdot",
    "\\times",
    "\\div",
    "\\pm",
    "\\mp",
    "\\le",
    "\\leq",
    "\\ge",
    "\\geq",
    "\\ne",
    "\\neq",
    "\\approx",
    "\\to",
    "\\in",
    "\\cup",
    "\\cap",
    "\\quad",
    "\\qquad",
}
_SIZING = {"\\left", "\\right", "\\big", "\\Big", "\\bigg", "\\Bigg"}  # presentation only


def _log10_numeral(numeral: str) -> float:
    digits = numeral.split(".")[0].lstrip("0")
    if not digits:
        return 0.0  # below 1: no power or factorial of it grows
    head = digits[:15]
    return math.log10(int(head)) + len(digits) - len(head)


def _log10_power(log_base: float, log_exponent: float) -> float:
    if log_base <= 0.0:
        return 0.0
    return math.inf if log_exponent > 300 else log_base * 10.0**log_exponent


def _log10_factorial(log_n: float) -> float:
    return math.inf if log_n > 300 else log_n * 10.0**log_n  # log10(n!) <= n log10(n)


def _log10_binomial(log_n: float, log_k: float) -> float:
    return min(_log10_power(log_n, log_k), _log10_power(math.log10(2.0), log_n))  # C(n, k) <= min(n^k, 2^n)


class _Parser:
    """chain := atom ('!')* ('^' chain)?; an atom is a numeral, a bracketed group, \\sqrt, \\frac, a binomial,
    a letter or a command. Records the largest numeric value seen and whether a steep symbolic power was."""

    def __init__(self, latex: str, max_degree: int) -> None:
        self.tokens = [token for token in _TOKEN.findall(latex) if token not in _SIZING]
        self._chains: dict[int, tuple[float | None, int, int] | None] = {}
        self.group_end = self._match_brackets()
        self.log_max_degree = math.log10(max_degree)
        self.largest = 0.0
        self.steep = False

    def _token(self, i: int) -> str:
        return self.tokens[i] if i < len(self.tokens) else ""

    def _match_brackets(self) -> dict[int, int]:
        """Index of each opening bracket -> index of the bracket that closes it (unclosed ones are absent)."""
        ends, stack = {}, []
        for j, token in enumerate(self.tokens):
            if token in _OPEN_CLOSE:
                stack.append(j)
            elif stack and token == _OPEN_CLOSE[self.tokens[stack[-1]]]:
                ends[stack.pop()] = j
        return ends

    def chain(self, i: int) -> tuple[float | None, int, int] | None:
        """(log10 value or None when symbolic, tower height, next index), or None when no atom starts at i."""
        if i not in self._chains:  # every start is parsed once, so scanning all starts stays linear
            self._chains[i] = self._parse_chain(i)
        return self._chains[i]

    def _parse_chain(self, i: int) -> tuple[float | None, int, int] | None:
        atom = self.atom(i)
        if atom is None:
            return None
        value, height, i = atom
        while value is not None and self._token(i) == "!":
            value, i = _log10_factorial(value), i + 1
        if self._token(i) == "^" and (exponent := self.chain(i + 1)) is not None:
            power, exponent_height, i = exponent
            height += exponent_height
            if value is not None and power is not None:
                value = _log10_power(value, power)
            else:
                symbolic_degree = value is None and power is not None and power > self.log_max_degree
                self.steep |= symbolic_degree or height >= 4
                value = None
        if value is not None:
            self.largest = max(self.largest, value)
        return value, height, i

    def atom(self, i: int) -> tuple[float | None, int, int] | None:
        """(log10 value or None, tower height, next index); a group that is one chain keeps its value and height."""
        token = self._token(i)
        if not token:
            return None
        if token[0].isdigit():
            return _log10_numeral(token), 1, i + 1
        if token in _OPEN_CLOSE:
            end = self.group_end.get(i)
            if end is None:
                return None
            inner = self.chain(i + 1)
            return (inner[0], inner[1], end + 1) if inner is not None and inner[2] == end else (None, 1, end + 1)
        if token in ("\\sqrt", "\\frac") or token in _BINOMIALS:
            first = self.atom(i + 1)
            if first is None:
                return None
            if token == "\\sqrt":
                return (None if first[0] is None else first[0] / 2), 1, first[2]
            second = self.atom(first[2])
            if second is None:
                return None
            if first[0] is None or second[0] is None:
                return None, 1, second[2]
            return (first[0] if token == "\\frac" else _log10_binomial(first[0], second[0])), 1, second[2]
        if token.isalpha() or (token.startswith("\\") and token not in _OPERATORS):
            return None, 1, i + 1
        return None


def too_big_for_sympy(latex: str, max_digits: float = 1e6, max_degree: int = 64) -> bool:
    """Whether `latex` holds a number of over `max_digits` digits or a steep symbolic power (module docstring)."""
    if "^" not in latex and "!" not in latex and "binom" not in latex:
        return False
    parser = _Parser(latex, max_degree)
    try:
        for start in range(len(parser.tokens)):
            parser.chain(start)
    except RecursionError:
        return True  # nesting deeper than any real answer
    return parser.steep or parser.largest > max_digits
