"""Rollouts and grading for the sharded learner (alignment/sharding.py): each rank does its share, every rank gets all.

Each rank samples a contiguous share of the prompts with its in-process engine over the sharded policy, its
weights gathered for the whole call, and grades a contiguous share of the responses in its own grader pool;
the results are gathered in rank order, so every rank holds the same prompt-major rollouts and scores, exactly
what one process would have (up to which random numbers each rank drew: rank r samples with seed + r).
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from alignment.rollout import Rollout, RolloutEngine, SamplingConfig
from alignment.sharding import ShardGroup, gathered, my_slice


class ShardedRollouts:
    """The RolloutEngine interface over an in-process engine whose model is the sharded policy."""

    def __init__(self, engine: RolloutEngine, group: ShardGroup) -> None:
        self.engine, self.group = engine, group
        self.model = engine.model  # type: ignore[attr-defined]  # the policy itself: weight pushes are no-ops

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig) -> list[Rollout]:
        share = my_slice(len(prompts), self.group)
        mine: list[Rollout] = []
        seed = None if sampling.seed is None else sampling.seed + self.group.rank
        with gathered(self.model):  # every rank, even one without prompts: gathering is a collective
            if share.start < share.stop:
                mine = self.engine.generate(prompts[share], n, dataclasses.replace(sampling, seed=seed))
        # every rank's rollouts, prompt indices shifted from its share to the whole list
        starts = [my_slice(len(prompts), ShardGroup(rank, self.group.size)).start for rank in range(self.group.size)]
        return [dataclasses.replace(r, prompt_index=r.prompt_index + start)
                for start, part in zip(starts, self.group.gather(mine)) for r in part]


class ShardedGrader:
    """A grader (texts, truths) -> scores whose every call grades this rank's share and gathers the rest."""

    def __init__(self, grader: Any, group: ShardGroup) -> None:
        self.grader, self.group = grader, group

    def __call__(self, texts: Sequence[str], truths: Sequence[str]) -> list[dict[str, float]]:
        share = my_slice(len(texts), self.group)
        mine = self.grader(list(texts[share]), list(truths[share])) if share.start < share.stop else []
        return [score for part in self.group.gather(mine) for score in part]

    def close(self) -> None:
        self.grader.close()
