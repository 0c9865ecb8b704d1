"""A child Python process that answers JSON lines, with a deadline per answer.

The child runs `python -c "import module; module.function()"`, so it imports only what it needs: not the
caller's main module (as multiprocessing's spawn and forkserver do) and not a fork of a process running
torch threads. A reply that misses its deadline kills the child; a fresh one starts at once.
"""

import json
import os
import select
import subprocess
import sys
from collections.abc import Callable
from typing import Any

_READY = "ready"


def serve(handle: Callable[[Any], Any]) -> None:
    """Child side: announce readiness, then answer every JSON line on stdin with handle(request)."""
    out = sys.stdout
    out.write(_READY + "\n")
    out.flush()
    for line in sys.stdin:
        out.write(json.dumps(handle(json.loads(line))) + "\n")
        out.flush()


class WorkerProcess:
    """Parent side of one child running `module.function()`, which must call serve()."""

    def __init__(self, module: str, function: str, startup_timeout_s: float = 60.0) -> None:
        self._command = [sys.executable, "-c", f"import {module}; {module}.{function}()"]
        self._startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._ready = False
        self.timeouts = 0

    def _spawn(self) -> None:
        self._ready = False
        self._proc = subprocess.Popen(
            self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )

    def _read_line(self, timeout_s: float) -> str | None:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        return self._proc.stdout.readline().strip() if ready else None

    def _ensure_started(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._spawn()
        if not self._ready:
            if self._read_line(self._startup_timeout_s) != _READY:
                self.close()
                raise RuntimeError(f"worker process {' '.join(self._command[2:])!r} failed to start")
            self._ready = True

    def send(self, request: Any) -> bool:
        """Start the child if needed and hand it a request; False if it died since the last request."""
        self._ensure_started()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            return True
        except BrokenPipeError:
            self.close()
            return False

    def receive(self, timeout_s: float) -> Any | None:
        """The reply to the last request, or None if none came in time (the child is then replaced)."""
        line = self._read_line(timeout_s)
        if not line:  # missed the deadline, or died (e.g. out of memory)
            self.timeouts += line is None
            self.close()
            self._spawn()  # its start-up overlaps the caller's next work
            return None
        return json.loads(line)

    def request(self, request: Any, timeout_s: float) -> Any | None:
        return self.receive(timeout_s) if self.send(request) else None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
