"""A small OpenEnv environment server: guess a number from 1 to 10, told "higher" or "lower" after each guess.

    uv run python examples/openenv_guess_server.py --port 8011
    uv run scripts/train_grpo.py --env openenv:http://127.0.0.1:8011 --model smollm2-135m ...

An episode is reset with a seed (the number is the seed's draw); each action is the model's turn as text, in the
action's one text field, `guess`. The first integer in it is the guess: 1.0 and done when right, else
0.5 * (1 - distance / 9) (closer is better) and a hint; a turn with no integer gets 0 and a reminder. Served with
openenv-core's `create_app` and uvicorn, one environment instance per WebSocket session.
"""

import random
import re
from typing import Any

import typer
import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

HIGHEST = 10


class GuessAction(Action):
    guess: str  # the model's turn; its first integer is the guess


class GuessObservation(Observation):
    prompt: str = ""


class GuessEnvironment(Environment):
    """One episode per reset: a number drawn from the seed, guessed until right (the trainer caps the turns)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(step_count=0)
        self.target = 1

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> GuessObservation:
        self.target = random.Random(seed).randint(1, HIGHEST)
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(prompt=f"I picked a whole number from 1 to {HIGHEST}. Guess it: reply with a number.")

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        found = re.search(r"-?\d+", action.guess)
        if found is None:
            return GuessObservation(prompt="Reply with a whole number.", reward=0.0)
        guess = int(found.group())
        if guess == self.target:
            return GuessObservation(prompt="Right!", reward=1.0, done=True)
        closeness = 0.5 * max(0.0, 1 - abs(guess - self.target) / (HIGHEST - 1))
        return GuessObservation(prompt="Higher." if guess < self.target else "Lower.", reward=closeness)

    @property
    def state(self) -> State:
        return self._state


def make_app(sessions: int = 256) -> Any:
    """The server's ASGI app: at most `sessions` episodes at once (one WebSocket session, one instance each)."""
    return create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=sessions)


def main(
    port: int = typer.Option(8011, help="Port on 127.0.0.1."),
    sessions: int = typer.Option(256, help="Episodes the server plays at once (a batch's episodes need one each)."),
) -> None:
    uvicorn.run(make_app(sessions), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    typer.run(main)
