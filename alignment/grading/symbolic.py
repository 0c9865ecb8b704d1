"""Symbolic answer equivalence (math-verify over sympy), and the course grader's sympy check, in a child process that
is killed on a deadline.

sympy can spend minutes, or all memory, on inputs like 10^{10^{10}} inside C code that no signal
interrupts, and math-verify's own alarm-based timeout only works on the main thread. So the check runs in a
worker forked from a fork server (one per calling process, started on first use) that has imported
math-verify and run a few checks, so that sympy's lazy set-up (about 1.5 s on the first polynomial) is
done once, before any fork; a check that misses its deadline kills its worker and counts as not equal, and
the next check gets a fresh warm fork in milliseconds.
"""

import atexit
import threading

from alignment.grading.worker_process import WorkerProcess, serve

_WORKER_MEMORY_BYTES = 4 * 1024**3
# One of each common kind of answer: polynomials, fractions, radicals, tuples, intervals, sets, pi.
_WARM_UP = [
    ("x^2+2x+1", "(x+1)^2"),
    ("\\frac{1}{2}", "0.5"),
    ("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2"),
    ("(1,2)", "(1, 2)"),
    ("[0,1)", "[0, 1)"),
    ("\\{1,2\\}", "\\{2,1\\}"),
    ("2\\pi", "2 \\pi"),
]


def _equal(gold: str, prediction: str) -> bool:
    from math_verify import parse, verify

    try:
        # Timeouts off: they rely on SIGALRM; the parent enforces the deadline by killing this process.
        gold_parsed = parse(f"${gold}$", parsing_timeout=None)
        pred_parsed = parse(f"${prediction}$", parsing_timeout=None)
        return bool(gold_parsed) and bool(pred_parsed) and verify(gold_parsed, pred_parsed, timeout_seconds=None)
    except (Exception, MemoryError, RecursionError):
        return False


def _difference_is_zero(expression: str) -> bool:
    """The course grader's test: sympy parses the plain-text difference (`^` as a power, implicit products) and
    simplifies it to 0."""
    from sympy import simplify
    from sympy.parsing.sympy_parser import implicit_multiplication_application, parse_expr, standard_transformations

    try:
        parsed = parse_expr(
            expression.replace("^", "**"),
            transformations=(*standard_transformations, implicit_multiplication_application),
        )
        return bool(simplify(parsed) == 0)
    except (Exception, MemoryError, RecursionError):
        return False


def latex_text(latex: str) -> str | None:
    """The course grader's LaTeX-to-text step (pylatexenc, then its symbols as names: √ sqrt, π pi, ∞ inf, ∪ U,
    · and × *); None where pylatexenc fails. Exponential in unclosed braces: call `latex_text_within` for those."""
    import logging

    from pylatexenc.latex2text import LatexNodes2Text

    logging.getLogger("pylatexenc").setLevel(logging.ERROR)  # it warns about every macro it cannot fill
    latex = latex.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    try:
        text = LatexNodes2Text().latex_to_text(latex)
    except (Exception, RecursionError):
        return None
    for symbol, name in (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*")):
        text = text.replace(symbol, name)
    return text.strip()


def _answer(request: list[str]) -> bool | str | None:
    kind, *arguments = request
    if kind == "equivalent":
        return _equal(*arguments)
    return latex_text(*arguments) if kind == "latex_text" else _difference_is_zero(*arguments)


def _serve() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_WORKER_MEMORY_BYTES, _WORKER_MEMORY_BYTES))
    for pair in _WARM_UP:  # before "ready": start-up is not charged to a check, and every fork inherits it
        _equal(*pair)
    _difference_is_zero("((x+1)^2)-(x^2+2x+1)")
    serve(_answer)


_worker = WorkerProcess("alignment.grading.symbolic", "_serve")
_lock = threading.Lock()
atexit.register(_worker.close)


def symbolically_equal(gold: str, prediction: str, timeout_s: float = 2.0) -> bool:
    """Whether two LaTeX/plain-math answers are equivalent per math-verify, within `timeout_s` seconds."""
    with _lock:
        return _worker.request(["equivalent", gold, prediction], timeout_s) is True


def latex_text_within(latex: str, timeout_s: float = 2.0) -> str | None:
    """`latex_text` in the worker, None when it fails or misses the deadline."""
    with _lock:
        text = _worker.request(["latex_text", latex], timeout_s)
    return text if isinstance(text, str) else None


def sympy_difference_is_zero(expression: str, timeout_s: float = 2.0) -> bool:
    """Whether sympy simplifies the plain-text `expression` to 0 within `timeout_s` (the course grader's check)."""
    with _lock:
        return _worker.request(["difference", expression], timeout_s) is True
