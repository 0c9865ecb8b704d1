"""Rollouts and grading for the sharded learner (alignment/distributed/sharding.py): each rank does its share, every
rank gets all.

Each rank samples a contiguous share of the prompts with its in-process engine over the sharded policy, its
weights gathered for the whole call, and grades a contiguous share of the responses in its own grader pool;
the results are gathered in rank order, so every rank holds the same prompt-major rollouts and scores, exactly
what one process would have (up to which random numbers each rank drew: rank r samples with a call seed of its own,
prompt_seed(seed, r), not seed + r, which is the next step's call seed).
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

from alignment.distributed.sharding import ShardGroup, gathered
from alignment.rollout.interface import Prompt, Rollout, RolloutEngine, SamplingConfig, prompt_seed


class ShardedRollouts:
    """The RolloutEngine interface over an in-process engine whose model is the sharded policy."""

    def __init__(self, engine: RolloutEngine, group: ShardGroup) -> None:
        self.engine, self.group = engine, group
        self.model = engine.model  # type: ignore[attr-defined]  # the policy itself: weight pushes are no-ops

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, positions: Sequence[int] | None = None
    ) -> list[Rollout]:
        seed = None if sampling.seed is None else prompt_seed(sampling.seed, self.group.rank)
        own = dataclasses.replace(sampling, seed=seed)

        def sample(share: slice) -> list[Rollout]:  # prompt indices shifted from the share to the whole list
            return [
                dataclasses.replace(r, prompt_index=r.prompt_index + share.start)
                for r in self.engine.generate(prompts[share], n, own, None if positions is None else positions[share])
            ]

        with gathered(self.model):  # every rank, even one without prompts: gathering is a collective
            return self.group.split_work(len(prompts), sample)


class ShardedGrader:
    """A grader (texts, truths) -> scores whose every call grades this rank's share and gathers the rest."""

    def __init__(self, grader: Any, group: ShardGroup) -> None:
        self.grader, self.group = grader, group

    def __call__(self, texts: Sequence[str], truths: Sequence[str]) -> list[dict[str, float]]:
        return self.group.split_work(len(texts), lambda share: self.grader(list(texts[share]), list(truths[share])))

    def close(self) -> None:
        self.grader.close()
