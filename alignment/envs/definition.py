"""What an `--env` source gives: how to build a fresh environment, its rows, and optionally its system prompt."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alignment.envs.base import Environment


@dataclass
class EnvironmentDefinition:
    """An environment source's environments (`make`, one per episode), rows (or `settings -> (train, validation)`)."""

    make: Callable[[], Environment]
    rows: Any = None
    system_prompt: str | None = None
