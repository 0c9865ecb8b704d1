"""A small arithmetic evaluator for the calculator tool: model text is parsed here, never handed to eval or exec.

Grammar (recursive descent, exact rational arithmetic with fractions.Fraction):
    expression := term (('+' | '-') term)*
    term       := power (('*' | '/' | '%') power)*
    power      := unary ('**' | '^') power | unary       (right-associative)
    unary      := ('-' | '+') unary | atom
    atom       := NUMBER | '(' expression ')'
NUMBER is digits with an optional decimal part and thousands commas (1,234.5). Anything else, a division by zero,
an exponent that is not a small integer, a result past MAX_DIGITS digits or nesting past MAX_DEPTH is an
ArithmeticError whose message the tool returns to the model.
"""

import re
from fractions import Fraction

MAX_CHARS = 200  # longer expressions are refused before parsing
MAX_DEPTH = 32  # parentheses and unary signs nested deeper are refused (no recursion blow-up)
MAX_EXPONENT = 64  # |exponent| of **
MAX_DIGITS = 60  # of any intermediate numerator or denominator

_TOKEN = re.compile(r"\s*(?:(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)|(\*\*|[-+*/%^()]))")


class CalculatorError(ArithmeticError):
    """An expression the calculator refuses; str() is the message shown to the model."""


def tokenize(expression: str) -> list[str]:
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"expression longer than {MAX_CHARS} characters")
    tokens, position, text = [], 0, expression.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise CalculatorError(f"unexpected {text[position:].strip()[:10]!r}")
        tokens.append(match.group(1).replace(",", "") if match.group(1) else match.group(2))
        position = match.end()
    if not tokens:
        raise CalculatorError("empty expression")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.position, self.depth = tokens, 0, 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise CalculatorError("expression ends too early")
        self.position += 1
        return token

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalculatorError(f"nested deeper than {MAX_DEPTH}")

    def expression(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = checked(value + self.term() if self.take() == "+" else value - self.term())
        return value

    def term(self) -> Fraction:
        value = self.power()
        while self.peek() in ("*", "/", "%"):
            operator, right = self.take(), self.power()
            if operator != "*" and right == 0:
                raise CalculatorError("division by zero")
            value = checked(value * right if operator == "*" else value / right if operator == "/" else value % right)
        return value

    def power(self) -> Fraction:
        base = self.unary()
        if self.peek() not in ("**", "^"):
            return base
        self.take()
        self.nested()
        exponent = self.power()
        self.depth -= 1
        if exponent.denominator != 1 or abs(exponent) > MAX_EXPONENT:
            raise CalculatorError(f"exponents must be whole numbers within +-{MAX_EXPONENT}")
        if base == 0 and exponent < 0:
            raise CalculatorError("division by zero")
        # the result's size is known before computing it: refuse what would pass MAX_DIGITS
        if max(len(str(abs(base.numerator))), len(str(base.denominator))) * abs(int(exponent)) > MAX_DIGITS + 1:
            raise CalculatorError(f"result longer than {MAX_DIGITS} digits")
        return checked(base ** int(exponent))

    def unary(self) -> Fraction:
        if self.peek() in ("-", "+"):
            sign = self.take()
            self.nested()
            value = self.unary()
            self.depth -= 1
            return -value if sign == "-" else value
        return self.atom()

    def atom(self) -> Fraction:
        token = self.take()
        if token == "(":
            self.nested()
            value = self.expression()
            self.depth -= 1
            if self.take() != ")":
                raise CalculatorError("missing ')'")
            return value
        if token[0].isdigit() or token[0] == ".":
            return checked(Fraction(token))
        raise CalculatorError(f"unexpected {token!r}")


def checked(value: Fraction) -> Fraction:
    if len(str(abs(value.numerator))) > MAX_DIGITS or len(str(value.denominator)) > MAX_DIGITS:
        raise CalculatorError(f"result longer than {MAX_DIGITS} digits")
    return value


def evaluate(expression: str) -> Fraction:
    """The exact value of `expression`; CalculatorError when it is not one the grammar accepts."""
    parser = _Parser(tokenize(expression))
    value = parser.expression()
    if parser.peek() is not None:
        raise CalculatorError(f"unexpected {parser.peek()!r}")
    return value


def format_value(value: Fraction) -> str:
    """An integer as digits, anything else as a decimal of at most 6 places, trailing zeros dropped."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")
