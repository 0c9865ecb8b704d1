"""Bad numbers and odd batches inside the GRPO loop: NaN or inf rewards and log-probs stop the run with an error
naming the step and leave the weights as they were; a zero-token response trains like any other row."""

import copy
import math

import pytest
import torch

from alignment.data.task import Task
from alignment.grpo.config import GRPOConfig
from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import GRPOSampler
from alignment.grpo_run import train_grpo
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import Rollout
from tests.test_grpo_loop import TASK, grpo_parts, hash_reward, tiny_config


class BadRewardOnCall:
    """hash_reward, except that the `at`-th reward is `value`."""

    def __init__(self, at: int, value: float) -> None:
        self.at, self.value, self.calls = at, value, 0

    def __call__(self, response: str, truth: str) -> dict[str, float]:
        self.calls += 1
        return hash_reward(response, truth) | ({"reward": self.value} if self.calls == self.at else {})


@pytest.mark.parametrize("value", [math.nan, pytest.param(math.inf, marks=pytest.mark.slow)])  # a run each: inf slow
def test_a_bad_reward_stops_the_run_naming_the_step(tiny_model_dir, tmp_path, value):
    config = tiny_config(tiny_model_dir, tmp_path, n_grpo_steps=2)
    # 4 validation rewards at step 0, then 4 training rewards per step: call 4 + 4 + 2 is inside step 2's batch
    poisoned = Task(TASK.questions, TASK.truths, TASK.template, BadRewardOnCall(4 + 4 + 4 + 2, value))
    with pytest.raises(FloatingPointError, match=rf"GRPO step 2: the reward of rollout 1 is {value}.*no update"):
        train_grpo(config, poisoned, TASK)
    assert (config.output_dir / "checkpoint" / "COMPLETE").read_text() == "1"  # step 1 stays the last word


@pytest.fixture
def parts(tiny_model, tokenizer) -> tuple[GRPOSampler, GRPOLearner]:
    policy = copy.deepcopy(tiny_model)
    config = GRPOConfig(
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        loss_type="grpo_clip",
    )
    return grpo_parts(config, policy, tokenizer, HFRolloutEngine(policy, tokenizer, progress=False))


@pytest.fixture
def learner(parts) -> GRPOLearner:
    return parts[1]


def rollouts_of(parts: tuple[GRPOSampler, GRPOLearner]) -> list[Rollout]:
    return parts[0].generate([0, 1], parts[1].step)


def batch_of(learner: GRPOLearner, rollouts: list[Rollout]):
    scores = [hash_reward(r.text, "") for r in rollouts]
    return learner.make_batch([0, 1], rollouts, scores)


def test_nan_log_probs_stop_before_the_optimizer_touches_the_weights(parts, learner):
    batch = batch_of(learner, rollouts_of(parts))
    learner.policy.model.norm.weight.data[0] = math.nan  # every log-prob of the batch becomes NaN
    before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
    # the loss may stay finite (the forward tape replays the head's logits from before the poke); the gradient cannot
    with pytest.raises(
        FloatingPointError, match=r"GRPO step 1: loss \S+ and gradient norm nan .*weights were not updated"
    ):
        learner.update(batch)
    after = learner.policy.state_dict()
    assert all(torch.equal(before[k], after[k]) or k == "model.norm.weight" for k in before)
    assert torch.equal(before["model.norm.weight"][1:], after["model.norm.weight"][1:])
    assert all(p.grad is None for p in learner.policy.parameters())  # nothing left over for a later step


def test_inf_old_log_probs_stop_the_step(parts, learner):
    batch = batch_of(learner, rollouts_of(parts))
    batch.old_log_probs = torch.full(batch.labels.shape, -math.inf)  # GRPO-Clip's ratio becomes inf
    before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
    with pytest.raises(FloatingPointError, match="GRPO step 1: .*not updated"):
        learner.optimizer_step(batch)
    assert all(torch.equal(before[k], v) for k, v in learner.policy.state_dict().items())


def test_a_zero_token_response_inside_a_batch_trains_like_the_rest(parts, learner):
    rollouts = rollouts_of(parts)
    rollouts[1] = Rollout(rollouts[1].prompt_index, "", [], [], "stop")  # e.g. an engine that stopped at once
    batch = batch_of(learner, rollouts)
    assert not batch.response_mask[1].any() and batch.response_mask[0].any()
    before = {k: v.clone() for k, v in learner.policy.state_dict().items()}
    [row] = learner.update(batch)
    assert math.isfinite(row["loss"]) and row["grad_norm"] > 0 and math.isfinite(row["token_entropy"])
    after = learner.policy.state_dict()
    assert all(after[k].isfinite().all() for k in after)
    assert any(not torch.equal(before[k], after[k]) for k in before)
