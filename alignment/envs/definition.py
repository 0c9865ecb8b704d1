"""The environment contract: what a user writes to train on a multi-turn problem of their own, with no edit of
alignment/.

`--env file.py:NAME` (or `package.module:NAME`) names one of:

- an Environment class (alignment/envs/base.py): built with no arguments, or with the run's settings when its
  constructor takes one argument; a fresh instance per episode;
- a function of the run's settings returning an Environment (called once per episode) or an EnvironmentDefinition;
- an EnvironmentDefinition: how to make an environment, and its rows.

    from alignment.envs import EnvStep, EnvironmentDefinition

    class Guess:
        name, max_turns = "guess", 6

        def reset(self, row: dict) -> str:
            self.secret = row["secret"]
            return "Guess my number between 1 and 100. Answer with the number alone."

        def step(self, action: str) -> EnvStep:
            guess = int(action.strip()) if action.strip().isdigit() else -1
            if guess == self.secret:
                return EnvStep("", 1.0, True)
            return EnvStep("higher" if guess < self.secret else "lower", 0.0, False)

    guess = EnvironmentDefinition(make=Guess, rows=[{"secret": s} for s in range(1, 101)])

Rows, each handed to `reset`, come from `--task` when it is given beside `--env`, else from the environment's own
(`rows` of a definition, or a `rows`/`task` attribute of the class), else they are seeds `{"seed": i}`, distinct
between training and validation.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from alignment.envs.base import Environment
from alignment.tasks.definition import RowsSource, TaskDefinition


@dataclass
class EnvironmentDefinition:
    """An environment and its rows.

    make             () -> a fresh Environment (a class works); one per episode
    rows             the rows `reset` receives, as a one-turn task's (RowsSource: a list of dicts, a data file or
                     hub id, a function of the run's settings returning rows or (training rows, validation rows)),
                     or a TaskDefinition whose rows to use; None: seeds
    validation_rows  held-out rows (default: the source's validation rows, else a held-out slice of the rows)
    system_prompt    a system message before the first observation (when the environment has no `context`)
    context          chat messages before the first observation (a system prompt, demonstration turns)
    """

    make: Callable[[], Environment]
    rows: RowsSource | TaskDefinition | None = None
    validation_rows: RowsSource | None = None
    system_prompt: str | None = None
    context: Sequence[dict[str, str]] = field(default_factory=tuple)

    def context_messages(self) -> list[dict[str, str]]:
        """The chat messages the definition puts before the first observation (none when it names none)."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + list(self.context)
