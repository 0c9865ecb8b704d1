"""Symbolic answer equivalence (math-verify over sympy) in a child process that is killed on a deadline.

sympy can spend minutes, or all memory, on inputs like 10^{10^{10}} inside C code that no signal
interrupts, and math-verify's own alarm-based timeout only works on the main thread. So the check runs in a
long-lived worker process; a check that misses its deadline kills the worker (a fresh one starts at once)
and counts as not equal. Each calling process gets its own worker, started on first use.
"""

import atexit
import json
import os
import select
import subprocess
import sys
import threading

_READY = "ready"
_WORKER_MEMORY_BYTES = 4 * 1024**3
_STARTUP_TIMEOUT_S = 60.0


def _serve() -> None:
    """Worker loop: read JSON [gold, prediction] lines from stdin, answer "1" or "0" on stdout."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (_WORKER_MEMORY_BYTES, _WORKER_MEMORY_BYTES))
    from math_verify import parse, verify

    out = sys.stdout
    out.write(_READY + "\n")
    out.flush()
    for line in sys.stdin:
        gold, prediction = json.loads(line)
        try:
            # Timeouts off: they rely on SIGALRM; the parent enforces the deadline by killing us.
            gold_parsed = parse(f"${gold}$", parsing_timeout=None)
            pred_parsed = parse(f"${prediction}$", parsing_timeout=None)
            same = bool(gold_parsed) and bool(pred_parsed) and verify(gold_parsed, pred_parsed, timeout_seconds=None)
        except (Exception, MemoryError, RecursionError):
            same = False
        out.write("1\n" if same else "0\n")
        out.flush()


class _Worker:
    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self._ready = False
        self._lock = threading.Lock()
        self.timeouts = 0

    def _spawn(self) -> None:
        self._ready = False
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from alignment.symbolic import _serve; _serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )

    def _read_line(self, timeout_s: float) -> str | None:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        return self._proc.stdout.readline().strip() if ready else None

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def _ensure_started(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self._kill()
            self._spawn()
        if not self._ready:
            if self._read_line(_STARTUP_TIMEOUT_S) != _READY:
                self._kill()
                raise RuntimeError("the symbolic grading worker failed to start (is math-verify installed?)")
            self._ready = True

    def equal(self, gold: str, prediction: str, timeout_s: float) -> bool:
        with self._lock:
            self._ensure_started()
            assert self._proc is not None and self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps([gold, prediction]) + "\n")
                self._proc.stdin.flush()
            except BrokenPipeError:  # died (e.g. out of memory) since the last call
                self._kill()
                return False
            answer = self._read_line(timeout_s)
            if answer is None or answer == "":
                self.timeouts += answer is None
                self._kill()
                self._spawn()  # its start-up overlaps the caller's next work
                return False
            return answer == "1"

    def close(self) -> None:
        with self._lock:
            self._kill()


_worker = _Worker()
atexit.register(_worker.close)


def symbolically_equal(gold: str, prediction: str, timeout_s: float = 2.0) -> bool:
    """Whether two LaTeX/plain-math answers are equivalent per math-verify, within `timeout_s` seconds."""
    return _worker.equal(gold, prediction, timeout_s)
