"""Multi-turn episodes under --strategy async: a streaming generator plays each handed-out unit's episodes turn by
turn (alignment/envs/runner.py), all of the unit's running episodes in one engine call per turn, and yields each
question's group as soon as that group's last episode has ended, while the unit's other episodes play on.

Weights. Between two turns (two engine calls) the newest weights offered to the generator's feed are loaded, with
--partial-rollouts; without, only between units, so each episode finishes on the weights it started with. A turn
is never split: the engine call that samples it runs on one version, and its prompt (the episode so far) is
prefilled under that version, so --inflight-kv has nothing to choose. Each episode's `versions` holds one version
per sampled token (sampled_mask 1), in order: that of the call that sampled its turn. Observation tokens carry no
version, as they carry log-prob 0 and mask 0; each turn's log-probs are the behaviour log-probs of the weights that
sampled it, which is what the learner's off-policy correction divides by.

Groups whole. A group leaves the generator only once every one of its episodes has ended, so a generator lost
mid-unit has delivered whole groups (trained once) and takes only unfinished ones with it, which the driver tracks
per group and hands out again whole (alignment/ray/async_driver.py); no partial episode or group is ever trained.
A group with an episode its environment failed streams all the same: the driver drops it.

Seeds. A unit's episodes are seeded by its rollout batch and each ticket's place in it, not by their positions in a
turn's engine call (alignment/envs/runner.py `places`): a group handed out again, or a ticket that replaces a
dropped one, never draws the random numbers of another group of its batch.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from alignment.envs.episode import Episode
from alignment.rollout.interface import Prompt, Rollout, RolloutEngine, SamplingConfig
from alignment.rollout.streaming import Barrier, StreamFeed

Apply = Callable[[dict[str, torch.Tensor], int], None]


@dataclass(frozen=True)
class EpisodeUnit:
    """Tickets of rollout batch `unit` (whose sampling seed they share) asking `questions` (indices into the run's
    task), at `places` in that batch (which seed their episodes); not started on weights older than version
    `floor`."""

    keys: tuple[int, ...]
    questions: tuple[int, ...]
    unit: int
    places: tuple[int, ...]
    floor: int = 0


@dataclass
class FinishedEpisodes:
    key: int
    episodes: list[Episode]  # the question's group_size episodes, each with per-sampled-token versions
    scores: list[dict[str, float]]  # as the environment scored them


class TurnEngine:
    """A generator's engine as an episode's turns reach it: before every call but a unit's first, the newest weights
    offered are loaded (when `between_turns`); each call's prompts are remembered with the version that sampled
    them, from which `stamp` gives every turn of an episode its version."""

    def __init__(self, engine: RolloutEngine, feed: StreamFeed, apply: Apply, between_turns: bool) -> None:
        self.engine, self.feed, self.apply, self.between_turns = engine, feed, apply, between_turns
        self.calls = 0  # engine calls of the unit being played (0: none under way)
        self.sampled_by: dict[tuple[int, ...], int] = {}  # a turn's prompt ids -> the version that sampled it

    @property
    def model(self) -> object:  # EpisodeSampler sets the policy to eval mode through it
        return getattr(self.engine, "model", None)

    def begin(self) -> None:
        self.calls, self.sampled_by = 0, {}

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, positions: Sequence[int] | None = None
    ) -> list[Rollout]:
        if self.calls > 0 and self.between_turns:  # between two turns of the unit's episodes
            self.feed.load(self.apply)
        self.calls += 1
        for prompt in prompts:
            self.sampled_by[tuple(prompt)] = self.feed.version  # type: ignore[arg-type]
        return self.engine.generate(prompts, n, sampling, positions)

    def load_policy_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        self.engine.load_policy_weights(state_dict)

    def stamp(self, episode: Episode) -> Episode:
        """The episode with `versions`: each sampled token's, from the call that sampled its turn."""
        prompt, ids, bounds = (
            episode.prompt_ids or [],
            episode.token_ids,
            [*episode.turn_starts, len(episode.token_ids)],
        )
        mask = episode.sampled_mask or [1] * len(ids)
        versions = []
        for start, end in zip(bounds, bounds[1:]):
            version = self.sampled_by[tuple(prompt + ids[:start])]
            versions += [version] * sum(mask[start:end])
        return replace(episode, versions=versions)


Play = Callable[[Sequence[int], int, Sequence[int]], Iterable[tuple[int, Sequence[Episode], list[dict[str, float]]]]]


def stream_episodes(feed: StreamFeed, turns: TurnEngine, play: Play) -> Iterator[FinishedEpisodes | Barrier]:
    """Play the feed's episode units as they come, yielding each question's group as soon as its episodes have all
    ended, and each barrier between units; returns when the feed is stopped. `play(questions, unit, places)` plays
    the groups of the questions through `turns`, seeded by rollout batch `unit` and their places in it, giving (i,
    the group of questions[i], its scores) as each group ends."""
    while (item := feed.next_item()) is not None:
        if not feed.load(turns.apply, item.floor):  # a unit starts on the newest weights
            return
        if not isinstance(item, EpisodeUnit):
            yield item
            continue
        turns.begin()
        for i, episodes, scores in play(item.questions, item.unit, item.places):
            yield FinishedEpisodes(item.keys[i], [replace(turns.stamp(e), prompt_index=0) for e in episodes], scores)
        turns.begin()
