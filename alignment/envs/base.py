"""The environment interface: `reset(task)` gives the first observation, `step(action)` answers a model turn.

An environment sees text only: the model's turn as decoded text, and it answers with the text of its observation.
Turning that text into tokens (the chat template's user or tool turn around the observation) is the episode
runner's job, which appends the observation's tokens after the model's sampled tokens and never re-tokenizes what
the model produced, so the learner scores exactly the tokens the sampler drew.
"""

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class EnvStep:
    """What an environment answers to one model turn."""

    observation: str  # the text the model sees next ("" when done and nothing more is shown)
    reward: float  # this turn's reward; an episode's final reward is the reward of its last turn
    done: bool  # the episode ends here (an answer given, a budget spent, an unrecoverable error)
    info: dict[str, Any] = field(default_factory=dict)  # logged, never shown to the model


class Environment(Protocol):
    """One episode at a time: `reset` then `step` until `done`. A runner holds one instance per live episode.

    `reset` and `step` may be coroutine functions (an environment that talks to a service); the runner calls every
    live episode's environment at once either way, each call under a deadline (alignment/envs/calls.py).

    Optional: a `stop` attribute, the strings that end a model turn (e.g. a tool call's closing tag; default: none,
    the turn ends at EOS or the token limit); see `stop_strings`. A `context` attribute, chat messages placed
    before the first observation (a system prompt, demonstration turns; default: none); see `context_messages`. A
    `close()` method (sync or async), called once its episode's batch is played, to release what the environment
    holds (a connection, a server session).
    """

    name: str
    max_turns: int  # model turns per episode; the runner ends the episode after this many

    def reset(self, task: dict[str, Any]) -> str:
        """Start an episode on `task` (one row of the environment's dataset); returns the first user message."""
        ...

    def step(self, action: str) -> EnvStep:
        """Answer the model's turn `action` (its decoded text, stop string included)."""
        ...


class EnvironmentUnavailable(RuntimeError):
    """The service an environment plays against is gone (after its retries): the run stops before any update, with
    this one-line message naming the service and the error. Any other error of `reset` or `step` ends only its
    episode (alignment/envs/runner.py)."""


def stop_strings(env: Environment) -> tuple[str, ...]:
    """The strings that end a model turn in `env`: its optional `stop` attribute, else none."""
    return tuple(getattr(env, "stop", ()))


def context_messages(env: Environment) -> list[dict[str, str]]:
    """The chat messages before `env`'s first observation: its optional `context` attribute, else none."""
    return list(getattr(env, "context", ()))
