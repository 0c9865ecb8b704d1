"""ReplayBuffer: capacity and eviction of the oldest, the three sampling policies, staleness, checkpoint state."""

import json

import pytest

from alignment.ray.config import RayGRPOConfig
from alignment.ray.replay_buffer import Group, ReplayBuffer, staleness
from alignment.rollout.interface import Rollout


def group(question: int, version: int) -> Group:
    rollout = Rollout(
        prompt_index=0, text=f"answer {question}", token_ids=[question], logprobs=[-1.0], finish_reason="stop"
    )
    return Group(question, [rollout], [{"reward": float(question % 2)}], version)


def filled(policy: str, capacity: int = 4, count: int = 6, seed: int = 0) -> ReplayBuffer:
    buffer = ReplayBuffer(capacity, policy, seed)
    buffer.add([group(q, version=q // 2) for q in range(count)])  # two groups per policy version
    return buffer


def test_capacity_evicts_the_oldest():
    buffer = filled("uniform", capacity=4, count=6)
    assert len(buffer) == 4 and buffer.evicted == 2
    assert [g.question for g in buffer.entries] == [2, 3, 4, 5]


def test_fifo_consumes_in_arrival_order():
    buffer = filled("fifo")
    assert [g.question for g in buffer.sample(3)] == [2, 3, 4]
    assert [g.question for g in buffer.entries] == [5]
    with pytest.raises(ValueError, match="asked for 2 groups but the buffer holds 1"):
        buffer.sample(2)


def test_newest_returns_the_latest_and_keeps_them():
    buffer = filled("newest")
    assert [g.question for g in buffer.sample(2)] == [4, 5]
    assert [g.question for g in buffer.sample(2)] == [4, 5] and len(buffer) == 4


def test_uniform_draws_distinct_entries_reproducibly_and_keeps_them():
    draws = [[g.question for g in filled("uniform", seed=7).sample(3)] for _ in range(2)]
    assert draws[0] == draws[1]  # same seed, same draw
    assert len(set(draws[0])) == 3 and set(draws[0]) <= {2, 3, 4, 5}
    buffer = filled("uniform", seed=7)
    seen = {g.question for _ in range(50) for g in buffer.sample(2)}
    assert seen == {2, 3, 4, 5} and len(buffer) == 4  # every entry can be drawn; none is consumed


def test_staleness_counts_versions_behind_the_learner():
    buffer = filled("newest")
    assert staleness(buffer.sample(4), version=3) == {
        "staleness_mean": 1.5,
        "staleness_max": 2.0,
    }  # versions 1, 1, 2, 2


def test_state_round_trip_continues_the_same_draws():
    buffer = filled("uniform", seed=3)
    buffer.sample(2)
    restored = ReplayBuffer(4, "uniform", seed=99)
    restored.load_state_dict(json.loads(json.dumps(buffer.state_dict())))  # as a checkpoint stores it
    assert restored.evicted == buffer.evicted
    assert [g.question for g in restored.sample(3)] == [g.question for g in buffer.sample(3)]


@pytest.mark.parametrize(
    "capacity,policy,message",
    [
        (0, "fifo", "--buffer-capacity must be >= 1, got 0"),
        (4, "lifo", "--buffer-policy 'lifo' is not one of uniform, newest, fifo"),
    ],
)
def test_bad_settings_name_their_flag(capacity, policy, message):
    with pytest.raises(ValueError, match=message):
        ReplayBuffer(capacity, policy)


def test_the_default_buffer_reuses_rollouts_across_steps():
    """UW A3 v1 problem 14's Variant B: "stale rollouts reused across updates". With the Ray settings' defaults (a
    step adds one rollout batch of groups and draws one), later steps train on groups of earlier batches again."""
    config = RayGRPOConfig()
    buffer = ReplayBuffer(config.buffer_capacity, config.buffer_policy, config.seed)
    n = config.n_prompts_per_rollout_batch
    trained: dict[int, int] = {}
    stale = []
    for step in range(4):
        buffer.add([group(step * n + i, version=step) for i in range(n)])
        picked = buffer.sample(n)
        stale.append(staleness(picked, step)["staleness_max"])
        for g in picked:
            trained[g.question] = trained.get(g.question, 0) + 1
    assert stale[0] == 0 and all(s > 0 for s in stale[1:])  # groups of earlier batches are drawn again
    assert max(trained.values()) > 1  # some group trained in more than one step
