"""Multi-turn generation: every live episode's next turn in one batched engine call, token-in/token-out.

Each turn the engine gets, for every episode still running, its token ids so far (the engine feeds them as they
are), samples one continuation, and the episode's environment answers the decoded turn. An episode ends when its
environment says done, after its environment's max_turns, or at the token cap (prompt included), the last two
flagged in Episode.stopped_by; ended episodes leave the batch. Turn t's call is seeded prompt_seed(seed, t), and
episode j of the call draws from prompt_seed of that and j (the engines' rule), so every episode of a group is an
independent draw and the same seed reproduces the whole set. Given `places` (each task's place in a rollout batch
played in parts, as --strategy async hands a batch's groups out), episode k of task i draws from position
places[i] * group_size + k instead, whichever episodes share its call: two parts of a batch never draw the same
random numbers, and on an engine that seeds each prompt on its own (vLLM) a part draws exactly what it would have
drawn in the whole batch.

Groups as they end: `play_episodes` hands over each task's group as soon as its last episode has ended (its
environments closed), while the other groups' episodes play on together; `run_episodes` waits for them all. Handing
a group over early changes no draw: each turn's call holds the same running episodes either way.

The environments of a turn answer at once (alignment/envs/calls.py): every reset together, then each turn's steps
together, each under `step_timeout_s`, and their answers are read in episode order, so the episodes do not depend on
which environment answered first. An environment that raises ends its episode "env_error", one past its deadline
"env_timeout" (abandoned: never called again, not even to close), the error in info["env_error"]; the caller drops
the group of such an episode (alignment/envs/episode.py `intact_groups`). EnvironmentUnavailable (a service gone)
is raised instead: the batch is not trained at all.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from transformers import PreTrainedTokenizerBase

from alignment.envs.base import Environment, EnvironmentUnavailable, EnvStep, context_messages
from alignment.envs.calls import CallTimeout, EnvCalls
from alignment.envs.episode import ChatRendering, Episode, StoppedBy
from alignment.rollout.interface import Rollout, RolloutEngine, SamplingConfig, prompt_seed


@dataclass
class _Live:
    """An episode being played: its environment and everything after its prompt so far."""

    index: int  # position among the call's episodes
    task: int  # the task it plays
    env: Environment
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    turn_rewards: list[float] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    stopped_by: StoppedBy | None = None

    def length(self) -> int:
        return len(self.prompt_ids) + len(self.ids)

    def fail(self, error: BaseException) -> None:
        """End the episode on its environment's error or missed deadline."""
        self.stopped_by = "env_timeout" if isinstance(error, CallTimeout) else "env_error"
        self.info["env_error"] = f"{type(error).__name__}: {error}"

    def episode(self) -> Episode:
        last_reward = self.turn_rewards[-1] if self.turn_rewards else 0.0
        return Episode(
            prompt_index=self.task,
            text="".join(self.text),
            token_ids=self.ids,
            logprobs=self.logprobs,
            finish_reason="stop" if self.stopped_by == "done" else "length",
            prompt_ids=self.prompt_ids,
            sampled_mask=self.mask,
            reward=last_reward,
            turn_rewards=self.turn_rewards,
            turn_starts=self.turn_starts,
            stopped_by=self.stopped_by or "done",
            info=self.info,
        )


def cut_turn(rollout: Rollout, length: int, tokenizer: PreTrainedTokenizerBase) -> Rollout:
    """The turn's first `length` sampled tokens, as a call capped at `length` would have returned them."""
    ids = rollout.token_ids[:length]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    versions = None if rollout.versions is None else rollout.versions[:length]
    return replace(
        rollout, text=text, token_ids=ids, logprobs=rollout.logprobs[:length], finish_reason="length", versions=versions
    )


def run_episodes(
    engine: RolloutEngine,
    tokenizer: PreTrainedTokenizerBase,
    make_env: Callable[[], Environment],
    tasks: Sequence[dict[str, Any]],
    group_size: int,
    sampling: SamplingConfig,
    max_tokens: int,
    step_timeout_s: float = 60.0,
    concurrency: int = 0,
    timer: Callable[[str], AbstractContextManager[Any]] | None = None,
) -> list[Episode]:
    """`group_size` episodes of each task, task-major (episodes[i * G:(i + 1) * G] play tasks[i], prompt_index i):
    every group of `play_episodes` (same arguments), once all have ended."""
    return task_major(
        play_episodes(
            engine, tokenizer, make_env, tasks, group_size, sampling, max_tokens, step_timeout_s, concurrency, timer
        )
    )


def task_major(groups: Iterable[tuple[int, list[Episode]]]) -> list[Episode]:
    """The episodes of `play_episodes`'s groups, once all have ended, in task order."""
    return [e for _, group in sorted(groups, key=lambda g: g[0]) for e in group]


def play_episodes(
    engine: RolloutEngine,
    tokenizer: PreTrainedTokenizerBase,
    make_env: Callable[[], Environment],
    tasks: Sequence[dict[str, Any]],
    group_size: int,
    sampling: SamplingConfig,
    max_tokens: int,
    step_timeout_s: float = 60.0,
    concurrency: int = 0,
    timer: Callable[[str], AbstractContextManager[Any]] | None = None,
    places: Sequence[int] | None = None,
) -> Iterator[tuple[int, list[Episode]]]:
    """`group_size` episodes of each task, played together; yields (i, the group of tasks[i], prompt_index i) as
    soon as the group's last episode has ended and its environments are closed, the groups that end on one turn in
    task order, while the episodes still running wait for the next turn.

    `sampling` is each turn's (its max_tokens a turn's most, its stop strings the environment's); `max_tokens`
    caps an episode's whole sequence, prompt included. `step_timeout_s`: each environment call's deadline;
    `concurrency`: environment calls at once (0: every live episode's). `timer("env")` wraps the environment calls
    (e.g. a PhaseTimer: the seconds the batch waited on its environments). `places`: each task's place in its rollout
    batch, which seeds its episodes (None: the episodes' positions in each call seed them).
    """
    timed = timer or (lambda phase: nullcontext())
    chat = ChatRendering(tokenizer, context_messages(make_env()))
    episodes: list[_Live] = []
    running = [group_size] * len(tasks)  # each task's episodes not yet ended

    def ended(group: int) -> list[_Live]:
        """Count one more ended episode of `group`; all of the group's episodes when it was the last."""
        running[group] -= 1
        return episodes[group * group_size : (group + 1) * group_size] if running[group] == 0 else []

    with EnvCalls(step_timeout_s, concurrency) as calls:

        def handed_over(finished: list[_Live]) -> Iterator[tuple[int, list[Episode]]]:
            """The groups of `finished` (whole groups, task order), their environments closed first; errors closing
            are the environments' own business: the episodes are played."""
            if not finished:
                return
            closing = [e.env for e in finished if hasattr(e.env, "close") and e.stopped_by != "env_timeout"]
            with timed("env"):
                calls([(env.close, ()) for env in closing])
            for start in range(0, len(finished), group_size):
                yield finished[start].task, [e.episode() for e in finished[start : start + group_size]]

        envs = [make_env() for _ in tasks for _ in range(group_size)]
        with timed("env"):
            firsts = answers(calls, [(env.reset, (task,)) for env, task in zip(envs, tasks_of(tasks, group_size))])
        finished: list[_Live] = []
        for env, first in zip(envs, firsts):
            e = _Live(len(episodes), len(episodes) // group_size, env, [])
            episodes.append(e)
            if isinstance(first, BaseException):
                e.fail(first)
                finished += ended(e.task)  # a group whose every reset failed is over before its first turn
                continue
            e.prompt_ids = chat.prompt_ids(first)
            if len(e.prompt_ids) >= max_tokens:
                raise ValueError(
                    f"a first prompt of {len(e.prompt_ids)} tokens leaves no room in --env-max-tokens {max_tokens}"
                )
        yield from handed_over(finished)
        live = [e for e in episodes if e.stopped_by is None]
        turn = 0
        while live:
            # One call samples for the episode with the most room; each turn is then cut at its own episode's room,
            # which draws the same tokens as a call capped there would (the tokens before a cut do not depend on it).
            rooms = [max_tokens - e.length() for e in live]
            call = replace(
                sampling,
                max_tokens=min(sampling.max_tokens, max(rooms)),
                min_tokens=min(sampling.min_tokens, max(rooms)),
                seed=None if sampling.seed is None else prompt_seed(sampling.seed, turn),
            )
            prompts = [e.prompt_ids + e.ids for e in live]
            if places is None:
                turns = engine.generate(prompts, 1, call)
            else:
                positions = [places[e.task] * group_size + e.index % group_size for e in live]
                turns = engine.generate(prompts, 1, call, positions)
            for i, (e, room, rollout) in enumerate(zip(live, rooms, turns)):
                if len(rollout.token_ids) > room:
                    turns[i] = rollout = cut_turn(rollout, room, tokenizer)
                e.turn_starts.append(len(e.ids))
                e.ids += rollout.token_ids
                e.mask += [1] * len(rollout.token_ids)
                e.logprobs += rollout.logprobs
                e.text.append(rollout.text)
            with timed("env"):
                steps = answers(calls, [(e.env.step, (rollout.text,)) for e, rollout in zip(live, turns)])
            going, finished = [], []
            for e, rollout, answer in zip(live, turns, steps):
                if isinstance(answer, BaseException):
                    e.turn_rewards.append(0.0)
                    e.fail(answer)
                else:
                    play_on(e, answer, rollout, chat, tokenizer, max_tokens)
                if e.stopped_by is None:
                    going.append(e)
                else:
                    finished += ended(e.task)
            live = going
            turn += 1
            yield from handed_over(finished)


def play_on(
    e: _Live,
    answer: EnvStep,
    rollout: Rollout,
    chat: ChatRendering,
    tokenizer: PreTrainedTokenizerBase,
    max_tokens: int,
) -> None:
    """The environment's answer to the episode's turn `rollout`: the episode ends (done, its turn limit, the token cap)
    or takes the observation's tokens for its next turn."""
    e.turn_rewards.append(answer.reward)
    e.info |= answer.info
    if answer.done:
        e.stopped_by = "done"
    elif len(e.turn_starts) >= e.env.max_turns:
        e.stopped_by = "max_turns"
    elif e.length() >= max_tokens:
        e.stopped_by = "max_tokens"
    else:
        observation = chat.observation_ids(answer.observation, rollout.token_ids)
        if e.length() + len(observation) >= max_tokens:  # no room left for a model token after it
            e.stopped_by = "max_tokens"
        else:
            e.ids += observation
            e.mask += [0] * len(observation)
            e.logprobs += [0.0] * len(observation)
            e.text.append(tokenizer.decode(observation))


def tasks_of(tasks: Sequence[dict[str, Any]], group_size: int) -> list[dict[str, Any]]:
    """Each task `group_size` times, task-major: the task of every episode."""
    return [task for task in tasks for _ in range(group_size)]


def answers(calls: EnvCalls, batch: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
    """The calls' results in order (an exception or CallTimeout for a failed one); EnvironmentUnavailable raised."""
    results = calls(batch)
    for result in results:
        if isinstance(result, EnvironmentUnavailable):
            raise result
    return results
