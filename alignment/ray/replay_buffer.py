"""A bounded buffer of scored rollout groups for off-policy GRPO: generators add, the learner samples.

An entry is one question's whole group (group_size rollouts and their scores), never a lone rollout, so
group-normalized advantages stay computable from what is sampled. Each entry records the policy version that
produced it; staleness is the learner's version minus that. When full, the oldest entry is evicted.

Sampling policies:
- uniform (the default): entries drawn uniformly without replacement within a draw, and kept, so a group may train
  again in later steps until it is evicted: the reuse of stale rollouts that makes a replay buffer (UW CSE599-O A3
  v1 problem 14, Variant B);
- newest: the most recently added entries, kept;
- fifo: the oldest entries, removed as they are sampled (each group trains once, in arrival order); with one
  batch added and one drawn per step this trains exactly the batches one-behind does.
"""

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from alignment.rollout.interface import Rollout

SAMPLING_POLICIES = ("uniform", "newest", "fifo")


@dataclass
class Group:
    question: int  # index into the task's questions
    rollouts: list[Rollout]
    scores: list[dict[str, float]]
    version: int  # policy version that generated the rollouts


class ReplayBuffer:
    def __init__(self, capacity: int, policy: str = "uniform", seed: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"--buffer-capacity must be >= 1, got {capacity}")
        if policy not in SAMPLING_POLICIES:
            raise ValueError(f"--buffer-policy {policy!r} is not one of {', '.join(SAMPLING_POLICIES)}")
        self.capacity, self.policy = capacity, policy
        self.entries: deque[Group] = deque()
        self.evicted = 0
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, groups: Sequence[Group]) -> None:
        for group in groups:
            if len(self.entries) == self.capacity:
                self.entries.popleft()
                self.evicted += 1
            self.entries.append(group)

    def sample(self, count: int) -> list[Group]:
        if count > len(self.entries):
            raise ValueError(f"asked for {count} groups but the buffer holds {len(self.entries)}")
        if self.policy == "fifo":
            return [self.entries.popleft() for _ in range(count)]
        if self.policy == "newest":
            return list(self.entries)[len(self.entries) - count :]
        return self.rng.sample(list(self.entries), count)

    def state_dict(self) -> dict[str, Any]:
        """The buffer as JSON values (checkpoints hold no pickles)."""
        return {"entries": [asdict(g) for g in self.entries], "evicted": self.evicted, "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.entries = deque(
            Group(g["question"], [Rollout(**r) for r in g["rollouts"]], g["scores"], g["version"])
            for g in state["entries"]
        )
        self.evicted = state["evicted"]
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))


def staleness(groups: Sequence[Group], version: int) -> dict[str, float]:
    """How many policy versions behind `version` the sampled groups were generated."""
    ages = [version - g.version for g in groups]
    return {"staleness_mean": sum(ages) / len(ages), "staleness_max": float(max(ages))}
