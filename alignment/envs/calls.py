"""A turn's environment calls, run at once with a deadline each, so one slow environment does not hold the batch.

A synchronous call (`reset`, `step`, `close` of a plain environment) runs in a thread of its own; an async one (a
coroutine function, e.g. a client of a remote service) runs on one event loop the calls share, started on first
use, so an environment's connections stay on one loop for all its calls. At most `concurrency` calls run at once (0:
all). A call that outlives its deadline is abandoned: a coroutine is cancelled, but a Python thread cannot be killed,
so a hung synchronous call keeps its thread until it returns. Its threads are daemon threads, and nothing waits for
them: neither the next turn nor the end of the run (a ThreadPoolExecutor would join them at interpreter exit). The
caller must not use that environment again.

Results come back in the order of the calls, whatever order they finished in.
"""

import asyncio
import inspect
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any


class CallTimeout(Exception):
    """A call that gave no answer within its deadline (it was abandoned, not stopped)."""


class EnvCalls:
    """Runs batches of calls concurrently, `timeout_s` seconds at most each; `close()` stops the event loop (a context
    manager does so on exit)."""

    def __init__(self, timeout_s: float, concurrency: int = 0) -> None:
        if not timeout_s > 0:
            raise ValueError(f"an environment call's deadline must be > 0 seconds, got {timeout_s}")
        if concurrency < 0:
            raise ValueError(f"environment calls at once must be >= 0 (0: all), got {concurrency}")
        self.timeout_s, self.concurrency = timeout_s, concurrency
        self._loop: asyncio.AbstractEventLoop | None = None

    def __enter__(self) -> "EnvCalls":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the event loop (without waiting for it: a coroutine stuck in blocking code would hold it)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None

    def __call__(self, calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """Each `(function, args)` called; per call its result, or the exception it raised, or a CallTimeout."""
        results: list[Any] = [None] * len(calls)
        waiting = deque(range(len(calls)))
        running: dict[Future, tuple[int, float]] = {}  # future -> (call, deadline)
        while waiting or running:
            while waiting and (self.concurrency == 0 or len(running) < self.concurrency):
                i = waiting.popleft()
                running[self._start(*calls[i])] = (i, time.monotonic() + self.timeout_s)
            first_deadline = min(deadline for _, deadline in running.values())
            done, _ = wait(running, timeout=max(0.0, first_deadline - time.monotonic()), return_when=FIRST_COMPLETED)
            for future in done:
                i, _ = running.pop(future)
                error = future.exception()
                results[i] = future.result() if error is None else error
            now = time.monotonic()
            for future, (i, deadline) in list(running.items()):
                if deadline <= now:
                    future.cancel()  # cancels a coroutine; a running thread's future refuses, and the thread is left
                    del running[future]
                    results[i] = CallTimeout(f"no answer within {self.timeout_s:g} s")
        return results

    def _start(self, function: Callable[..., Any], args: tuple[Any, ...]) -> Future:
        if inspect.iscoroutinefunction(function):
            return asyncio.run_coroutine_threadsafe(function(*args), self._event_loop())
        future: Future = Future()
        future.set_running_or_notify_cancel()  # from here cancel() refuses: the thread alone settles it

        def run() -> None:
            try:
                future.set_result(function(*args))
            except BaseException as error:  # handed to the caller, which flags the episode
                future.set_exception(error)

        threading.Thread(target=run, name="env-call", daemon=True).start()
        return future

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()

            def serve() -> None:
                loop.run_forever()
                loop.close()  # stopped by close(): what is still pending was abandoned

            threading.Thread(target=serve, name="env-calls-loop", daemon=True).start()
            self._loop = loop
        return self._loop
