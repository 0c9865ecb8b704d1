"""Symbolic answer equivalence (math-verify over sympy) in a child process that is killed on a deadline.

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


def _equal(request: list[str]) -> bool:
    from math_verify import parse, verify

    gold, prediction = request
    try:
        # Timeouts off: they rely on SIGALRM; the parent enforces the deadline by killing this process.
        gold_parsed = parse(f"${gold}$", parsing_timeout=None)
        pred_parsed = parse(f"${prediction}$", parsing_timeout=None)
        return bool(gold_parsed) and bool(pred_parsed) and verify(gold_parsed, pred_parsed, timeout_seconds=None)
    except (Exception, MemoryError, RecursionError):
        return False


def _serve() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_WORKER_MEMORY_BYTES, _WORKER_MEMORY_BYTES))
    for pair in _WARM_UP:  # before "ready": start-up is not charged to a check, and every fork inherits it
        _equal(list(pair))
    serve(_equal)


_worker = WorkerProcess("alignment.grading.symbolic", "_serve")
_lock = threading.Lock()
atexit.register(_worker.close)


def symbolically_equal(gold: str, prediction: str, timeout_s: float = 2.0) -> bool:
    """Whether two LaTeX/plain-math answers are equivalent per math-verify, within `timeout_s` seconds."""
    with _lock:
        return _worker.request([gold, prediction], timeout_s) is True
