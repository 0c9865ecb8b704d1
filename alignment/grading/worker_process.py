"""A child Python process that answers JSON lines, with a deadline per answer that costs milliseconds to enforce.

The child runs `python -c "import module; module.function()"`, so it imports only what it needs: not the
caller's main module (as multiprocessing's spawn and forkserver do) and not a fork of a process running
torch threads. That child is a fork server: after its imports it never runs a request itself, but forks a
worker that answers them and relays each request and reply under the deadline. A worker that misses its
deadline (or dies) is killed and the next request gets a fresh fork, already warm (milliseconds, where a new
interpreter re-importing sympy and math-verify takes seconds).
"""

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

_READY = "ready"
_TIMED_OUT = {"timed_out": True}
_RELAY_MARGIN_S = 5.0  # the fork server's own time per request (a fork, two pipe hops) is far below this


def _answer_forever(handle: Callable[[Any], Any], requests: TextIO, replies: TextIO) -> None:
    for line in requests:
        replies.write(json.dumps({"value": handle(json.loads(line))}) + "\n")
        replies.flush()


class _ForkedWorker:
    """Fork-server side of one forked worker: a pid and the two pipes to it."""

    def __init__(self, handle: Callable[[Any], Any]) -> None:
        request_read, request_write = os.pipe()
        reply_read, reply_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the worker: answer until the pipe closes, then leave at once, whatever happened
            try:
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # its fork server is gone: just end
                os.close(request_write)
                os.close(reply_read)
                devnull = os.open(os.devnull, os.O_RDWR)  # stray prints must not reach the fork server's caller
                os.dup2(devnull, 0)
                os.dup2(devnull, 1)
                _answer_forever(handle, os.fdopen(request_read), os.fdopen(reply_write, "w"))
            finally:
                os._exit(0)  # never back into the fork server's loop
        os.close(request_read)
        os.close(reply_write)
        self._requests = os.fdopen(request_write, "w")
        self._replies = os.fdopen(reply_read)

    def ask(self, request_line: str, timeout_s: float) -> str | None:
        """The worker's reply line, or None if it missed the deadline or died."""
        try:
            self._requests.write(request_line)
            self._requests.flush()
        except BrokenPipeError:
            return None
        ready, _, _ = select.select([self._replies], [], [], timeout_s)
        return (self._replies.readline() or None) if ready else None

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        self._requests.close()
        self._replies.close()


def serve(handle: Callable[[Any], Any]) -> None:
    """Child side: announce readiness, then answer every `[timeout_s, request]` line on stdin with
    `{"value": handle(request)}`, or `{"timed_out": true}` when a forked worker missed the deadline."""
    out = sys.stdout
    out.write(_READY + "\n")
    out.flush()
    worker: _ForkedWorker | None = None
    for line in sys.stdin:
        timeout_s, request = json.loads(line)
        worker = worker or _ForkedWorker(handle)
        reply = worker.ask(json.dumps(request) + "\n", timeout_s)
        if reply is None:
            worker.kill()
            worker = None
        out.write(reply or json.dumps(_TIMED_OUT) + "\n")
        out.flush()
    if worker is not None:
        worker.kill()


class WorkerProcess:
    """Parent side of one child running `module.function()`, which must call serve()."""

    def __init__(self, module: str, function: str, startup_timeout_s: float = 60.0) -> None:
        self._command = [sys.executable, "-c", f"import {module}; {module}.{function}()"]
        self._startup_timeout_s = startup_timeout_s
        self._proc: subprocess.Popen[str] | None = None
        self._ready = False
        self._reply_by = 0.0

    def _spawn(self) -> None:
        self._ready = False
        self._proc = subprocess.Popen(
            self._command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )

    def _read_line(self, timeout_s: float) -> str | None:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], max(0.0, timeout_s))
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

    def send(self, request: Any, timeout_s: float) -> bool:
        """Start the child if needed and hand it a request to answer within `timeout_s`; False if it died."""
        self._ensure_started()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps([timeout_s, request]) + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            self.close()
            return False
        self._reply_by = time.monotonic() + timeout_s + _RELAY_MARGIN_S
        return True

    def receive(self) -> Any | None:
        """The reply to the last request, or None if its worker missed the deadline or died."""
        line = self._read_line(self._reply_by - time.monotonic())
        if not line:  # the fork server itself is gone or stuck: replace it (the slow path)
            self.close()
            self._spawn()
            return None
        reply = json.loads(line)
        return None if reply == _TIMED_OUT else reply["value"]

    def request(self, request: Any, timeout_s: float) -> Any | None:
        return self.receive() if self.send(request, timeout_s) else None

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None
