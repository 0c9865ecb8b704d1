"""Crash points for fault tests that drive the real command line: kill -9 at a named point, deterministically.

Set ALIGNMENT_FAULT=<point>[:<n>][@<rank>] in a process's environment and it SIGKILLs itself the n-th time
(default the first) that `fault_point("<point>")` is reached; with @<rank>, only the torchrun process of that RANK
does. Unset, a fault point costs one dictionary lookup.
Child processes and Ray actors inherit the variable, so a point inside an actor kills that actor. Points:
`rollout` (a decoding loop, after its first token), `optimizer_step` (weights updated, the step not yet
recorded), `checkpoint_write` (policy and optimizer tensors written, state.json and the completion marker
not), `checkpoint_swap` (old checkpoint moved aside, new one not yet in place), `ray_step` (the Ray
driver, after a step is logged and checkpointed), `async_stream` (a streaming generator of --strategy async, as it
hands over a finished group).
"""

import os
import signal
from collections import Counter

ENV_VAR = "ALIGNMENT_FAULT"
_reached: Counter[str] = Counter()


def fault_point(name: str) -> None:
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    spec, _, rank = spec.partition("@")
    point, _, nth = spec.partition(":")
    if point != name or (rank and os.environ.get("RANK") != rank):
        return
    _reached[name] += 1
    if _reached[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
