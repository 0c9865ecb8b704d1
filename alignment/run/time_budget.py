"""A wall-clock budget for a training run (CS336 A5 §9's leaderboard: the best validation accuracy within 4 hours).

The run's clock starts with its loop (after the model loads) and goes on from a checkpoint's seconds when resumed.
With a budget, no step starts unless it, the validation and checkpoint due after it and the final validation still
fit, each at the pace measured so far; the run then ends as it would after its last step: the final validation, the
last checkpoint, policy/. The final validation of a budgeted run covers the whole validation set, as the leaderboard
reports accuracy on all of it. One process only: under torchrun each rank would read its own clock.

    clock = RunClock(parse_duration("4h"))
    while step < n_steps and clock.room_for_step(questions=len(final.questions)):  # + a validation due after it
        with clock.timing_step():
            ...
"""

import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager as ContextManager
from contextlib import contextmanager

from alignment.data.task import Task

UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)")
RECENT_STEPS = 5  # the next step is expected to last as long as the longest of these (responses grow in RL)


def validates_whole(settings: object) -> bool:
    """Whether a run's validation Task holds its whole validation set: under --time-budget, whose final validation
    takes every row (the periodic ones --n-eval-examples of them: budget_validations)."""
    return getattr(settings, "time_budget", None) is not None


def parse_duration(text: str | float, flag: str = "--time-budget") -> float:
    """Seconds in `text`: seconds (5400), or a number with unit s, m or h (90m, 1.5h, 4h); a ValueError naming
    `flag` otherwise, or when it is not > 0."""
    match = DURATION.fullmatch(str(text).strip().lower())
    if match is None:
        raise ValueError(f"{flag} {text!r}: expected seconds or a number with s, m or h (e.g. 5400, 90m, 1.5h)")
    seconds = float(match[1]) * UNITS[match[2]]
    if not seconds > 0:
        raise ValueError(f"{flag} {text!r}: must be more than 0 seconds")
    return seconds


class RunClock:
    """Seconds since the run's loop started (`elapsed_s` already spent by the run it resumes), and with a budget,
    whether the next step, what follows it and the final validation still fit in it. `now` is the time source."""

    def __init__(
        self, budget_s: float | None, elapsed_s: float = 0.0, now: Callable[[], float] = time.perf_counter
    ) -> None:
        self.budget_s, self.now = budget_s, now
        self.started = now() - elapsed_s
        self.step_s: list[float] = []
        self.seconds_per_question = 0.0  # none reserved until a validation has been timed
        self.checkpoint_s = 0.0  # likewise until a checkpoint has

    def elapsed(self) -> float:
        return self.now() - self.started

    @contextmanager
    def _timing(self, record: Callable[[float], None]) -> Iterator[None]:
        start = self.now()
        yield
        record(self.now() - start)

    def timing_step(self) -> ContextManager[None]:
        return self._timing(self.step_s.append)

    def timing_validation(self, questions: int) -> ContextManager[None]:
        return self._timing(lambda seconds: setattr(self, "seconds_per_question", seconds / max(1, questions)))

    def timing_checkpoint(self) -> ContextManager[None]:
        return self._timing(lambda seconds: setattr(self, "checkpoint_s", seconds))

    def room_for_step(self, questions: int, checkpoint: bool = False) -> bool:
        """Whether one more step (as long as the longest of the last few), validations of `questions` questions in
        all (at the last validation's pace) and, with `checkpoint`, a checkpoint (as long as the last) end within
        the budget; always true without one."""
        if self.budget_s is None:
            return True
        step = max(self.step_s[-RECENT_STEPS:], default=0.0)
        after = self.seconds_per_question * questions + (self.checkpoint_s if checkpoint else 0.0)
        return self.elapsed() + step + after <= self.budget_s


def budget_validations(validation: Task, n_questions: int, budgeted: bool) -> tuple[Task, Task]:
    """(the periodic validations' task, the final one's) from the run's validation set: without a budget both are
    `validation`; with one the periodic validations take `n_questions` of it (spread, fixed seed: the questions an
    unbudgeted run validates on) and the final one all of it."""
    if not budgeted:
        return validation, validation
    total = len(validation.questions)
    print(f"time budget: validations on {min(n_questions, total)} of the {total} validation questions, the last on all")
    return validation.subset(n_questions), validation
