"""The objectives for samples of older policy versions (alignment/grpo/objective.py, `off_policy`), on numbers derived
by hand: one response of two tokens sampled by two policy versions, each token with its own behaviour probability.

    token 1 (version 0): pi_behav 0.5, pi_prox 0.6 -> weight 1.2; pi_theta 0.9  -> ratio to pi_prox 1.5
    token 2 (version 1): pi_behav 0.4, pi_prox 0.2 -> weight 0.5; pi_theta 0.18 -> ratio to pi_prox 0.9

GRPO-Clip, eps 0.2, sequence mean over the 2 tokens. Decoupled (AReaL): per token -w * min(r A, clip(r) A).
  A = +1, cap 2:   token 1: -1.2 * min(1.5, 1.2) = -1.44 (clipped: no gradient); token 2: -0.5 * 0.9 = -0.45,
                   d/d log pi_theta = -w A r = -0.45; loss (-1.44 - 0.45) / 2 = -0.945, gradient [0, -0.225].
  A = +1, cap 1.1: token 1's weight capped at 1.1: -1.32; loss (-1.32 - 0.45) / 2 = -0.885.
  A = -1, cap 2:   token 1: -1.2 * min(-1.5, -1.2) = +1.8, the unclipped side, gradient -w A r = 1.8; token 2:
                   +0.45, gradient 0.45; loss 1.125, gradient [0.9, 0.225].
  token_mask, C = 1.5: weights 1.2 in [1/1.5, 1.5] -> 1, 0.5 outside -> 0 (its place stays in the mean):
                   (-1.2 + 0) / 2 = -0.6, gradient [0, 0].
Naive (ratios against pi_behav, no weight): r = 0.9 / 0.5 = 1.8 -> -1.2 (clipped); r = 0.18 / 0.4 = 0.45 -> clip
  0.8, min(0.45, 0.8) = 0.45 -> -0.45, gradient -0.45; loss -0.825, gradient [0, -0.225].
GSPO with sequence_tis, cap 2: s = exp(mean log r) = sqrt(1.5 * 0.9) = 1.161895 (inside [0.8, 1.2]); weight
  min(1.2 * 0.5, 2) = 0.6; loss -0.6 * 1.161895 = -0.697137.
"""

import math

import pytest
import torch

from alignment.grpo.batch import RolloutBatch
from alignment.grpo.config import GRPOConfig
from alignment.grpo.objective import Objective

BEHAVIOUR, PROXIMAL, CURRENT = [0.5, 0.4], [0.6, 0.2], [0.9, 0.18]


def loss_and_gradient(advantage: float, off_policy: str | None, **settings) -> tuple[float, list[float]]:
    c = GRPOConfig(**({"loss_type": "grpo_clip", "cliprange": 0.2, "gradient_accumulation_steps": 1} | settings))
    objective = Objective.from_settings(c, off_policy)
    micro = RolloutBatch(
        input_ids=torch.zeros((1, 2), dtype=torch.long),
        labels=torch.zeros((1, 2), dtype=torch.long),
        response_mask=torch.ones((1, 2), dtype=torch.bool),
        raw_rewards=torch.tensor([[advantage]]),
        advantages=torch.tensor([[advantage]]),
        rollout_log_probs=torch.tensor([BEHAVIOUR]).log(),
    )
    log_probs = torch.tensor([CURRENT]).log().requires_grad_()
    loss, _ = objective.microbatch_loss(
        log_probs, micro.response_mask, micro, torch.tensor([PROXIMAL]).log(), batch_rows=1, batch_tokens=2
    )
    return loss.item(), log_probs.grad[0].tolist()


@pytest.mark.parametrize(
    "advantage,settings,loss,gradient",
    [
        (1.0, {"tis_cap": 2.0}, -0.945, [0.0, -0.225]),
        (1.0, {"tis_cap": 1.1}, -0.885, [0.0, -0.225]),
        (-1.0, {"tis_cap": 2.0}, 1.125, [0.9, 0.225]),
        (1.0, {"tis_cap": 1.5, "rollout_correction": "token_mask"}, -0.6, [0.0, 0.0]),
        (1.0, {}, -0.945, [0.0, -0.225]),  # no cap: the paper's weight (here below any cap)
    ],
)
def test_the_decoupled_objective_weighs_each_token_by_its_own_behaviour_policy(advantage, settings, loss, gradient):
    got_loss, got_gradient = loss_and_gradient(advantage, "decoupled", **settings)
    assert got_loss == pytest.approx(loss, abs=1e-6)
    assert got_gradient == pytest.approx(gradient, abs=1e-6)


def test_naive_ppo_clips_around_the_behaviour_policy_without_weights():
    assert loss_and_gradient(1.0, "naive") == (pytest.approx(-0.825, abs=1e-6), pytest.approx([0, -0.225], abs=1e-6))


def test_gspo_composes_with_a_sequence_level_weight():
    loss, _ = loss_and_gradient(1.0, "decoupled", loss_type="gspo", tis_cap=2.0, rollout_correction="sequence_tis")
    assert loss == pytest.approx(-0.6 * math.sqrt(1.5 * 0.9), abs=1e-6)


def test_without_off_policy_samples_nothing_changes():
    """The synchronous loops: no weight without --tis-cap, the old log-probs as given."""
    c = GRPOConfig(loss_type="grpo_clip")
    assert Objective.from_settings(c).correction_cap is None
    assert Objective.from_settings(c, "decoupled").correction_cap == math.inf
    assert loss_and_gradient(1.0, None)[0] == pytest.approx((-1.2 - 0.9) / 2, abs=1e-6)
