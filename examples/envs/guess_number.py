"""An environment of your own in one file: guess a secret number from "higher"/"lower" hints.

Train on it with `--env examples/envs/guess_number.py:guess_number` (docs/guides/own_environment.md). The
class alone works too (`--env examples/envs/guess_number.py:GuessNumber`): it then plays seeds, `{"seed": i}` rows,
and draws its secret from the seed.
"""

import random
import re
from typing import Any

from alignment.envs import EnvironmentDefinition, EnvStep

HIGHEST = 16


class GuessNumber:
    """One game: the model guesses, the environment says higher or lower; reward 1 for finding the number, and
    partial credit for the last guess's closeness when the turns run out."""

    name = "guess_number"
    max_turns = 5
    context = [
        {
            "role": "system",
            "content": f"Find my secret number between 1 and {HIGHEST}. Answer each turn with one number.",
        }
    ]

    def reset(self, row: dict[str, Any]) -> str:
        self.secret = row["secret"] if "secret" in row else random.Random(row["seed"]).randint(1, HIGHEST)
        self.turns = 0
        return "Your first guess?"

    def step(self, action: str) -> EnvStep:
        self.turns += 1
        numbers = re.findall(r"\d+", action)
        if not numbers:
            return EnvStep("Answer with a number.", 0.0, self.turns >= self.max_turns)
        guess = int(numbers[0])
        if guess == self.secret:
            return EnvStep("", 1.0, True, {"found": 1.0})
        closeness = 1 - abs(guess - self.secret) / HIGHEST
        done = self.turns >= self.max_turns
        return EnvStep("higher" if guess < self.secret else "lower", 0.5 * closeness if done else 0.0, done)


def secrets(settings: Any) -> tuple[list[dict], list[dict]]:
    """Training secrets drawn from the run's seed; validation: every number once."""
    rng = random.Random(settings.seed)
    train = [{"secret": rng.randint(1, HIGHEST)} for _ in range(settings.n_train_prompts)]
    return train, [{"secret": n} for n in range(1, HIGHEST + 1)]


guess_number = EnvironmentDefinition(make=GuessNumber, rows=secrets)
