"""Symbolic answer equivalence (math-verify over sympy) in a child process that is killed on a deadline.

sympy can spend minutes, or all memory, on inputs like 10^{10^{10}} inside C code that no signal
interrupts, and math-verify's own alarm-based timeout only works on the main thread. So the check runs in a
long-lived worker process (one per calling process, started on first use); a check that misses its
deadline kills the worker and counts as not equal.
"""

import atexit
import threading

from alignment.worker_process import WorkerProcess, serve

_WORKER_MEMORY_BYTES = 4 * 1024**3


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
    import math_verify  # noqa: F401  (imported before "ready", so start-up is not charged to a check)

    serve(_equal)


_worker = WorkerProcess("alignment.symbolic", "_serve")
_lock = threading.Lock()
atexit.register(_worker.close)


def symbolically_equal(gold: str, prediction: str, timeout_s: float = 2.0) -> bool:
    """Whether two LaTeX/plain-math answers are equivalent per math-verify, within `timeout_s` seconds."""
    with _lock:
        return _worker.request([gold, prediction], timeout_s) is True
