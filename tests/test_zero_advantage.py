"""Rows whose loss weight is exactly 0 left out of the backward (--skip-zero-advantage): the same optimizer step."""

import math

import pytest
import torch

from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import GRPOSampler
from alignment.run.setup import build_engine, load_policy
from tests.test_grpo_loop import LOSSES, grpo_parts, tiny_config

QUESTIONS = [0, 1, 2, 3]  # 4 groups of 2 rows; microbatches of 4 rows, two groups each


def trainer_for(tiny_model_dir, tmp_path, skip: bool, **overrides) -> tuple[GRPOSampler, GRPOLearner]:
    config = tiny_config(
        tiny_model_dir,
        tmp_path / f"skip_{skip}",
        skip_zero_advantage=skip,
        kl_reference=False,
        rollout_batch_size=8,
        train_batch_size=8,
        **overrides,
    )
    torch.manual_seed(config.seed)
    policy, tokenizer = load_policy(config, "cpu", torch.float32)
    engine = build_engine(config, policy, tokenizer, "cpu", "cpu")
    return grpo_parts(config, policy, tokenizer, engine)


def step(
    parts: tuple[GRPOSampler, GRPOLearner], weights: list[float], in_loss: list[bool] | None = None
) -> dict[str, float]:
    """One rollout batch whose loss weights (the advantages, or the rewards for no_baseline) are `weights`, and
    whose rows in the loss (as --mask-truncated would set them) are `in_loss`."""
    sampler, learner = parts
    rollouts = sampler.generate(QUESTIONS, learner.step)
    batch = learner.make_batch(QUESTIONS, rollouts, sampler.grade(QUESTIONS, rollouts))
    if in_loss is not None:
        batch.in_loss = torch.tensor(in_loss)[:, None]
    column = torch.tensor(weights)[:, None]
    # the other of the two a loss does not read is non-zero: the skip must look at the one the loss weighs by
    if learner.config.loss_type == "no_baseline":
        batch.raw_rewards, batch.advantages = column, torch.ones_like(column)
    else:
        batch.raw_rewards, batch.advantages = torch.ones_like(column), column
    [row] = learner.update(batch)
    return row


def assert_same_steps(
    on: tuple[GRPOSampler, GRPOLearner],
    off: tuple[GRPOSampler, GRPOLearner],
    steps: list[list[float]],
    in_loss: list[bool] | None = None,
) -> list[dict[str, float]]:
    rows, initial = [], [p.detach().clone() for p in off[1].policy.parameters()]
    for weights in steps:
        a, b = step(on, weights, in_loss), step(off, weights, in_loss)
        for key in (
            "loss",
            "grad_norm",
            "token_entropy",
            "clip_fraction",
            "tis_weight_mean",
            "rollout_masked_fraction",
        ):
            if key in b:
                # a loss whose advantages sum to 0 is a float32 sum of O(1) terms of both signs that cancel: a few
                # float32 epsilons of them (1e-6) is the rounding of the two summation orders, not a difference
                assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6 if key == "loss" else 1e-7), key
        # trainer minus sampler log-probs, over every row either way: rounding apart
        assert a["rollout_logprob_diff_mean"] == pytest.approx(b["rollout_logprob_diff_mean"], abs=1e-5)
        assert b["rows_without_backward"] == 0
        rows.append(a)
    for (name, p), q, start in zip(on[1].policy.named_parameters(), off[1].policy.parameters(), initial, strict=True):
        # Adam turns rounding in a near-zero gradient entry into up to a learning rate's step (1e-3): compare the
        # updates, the same to a hundred-thousandth on average and nowhere off by a tenth of the learning rate
        update, difference = (q - start).abs(), (p - q).abs()
        assert difference.mean() <= 1e-5 * update.mean() and difference.max() <= 1e-4, name
    return rows


# grpo_clip (ratios) and no_baseline (raw rewards as weights) with the forward tape; the other losses, and every loss
# recomputing the forward, under -m slow (the skip happens after the forward either way; the forward recomputed runs
# by default in test_skipping_stays_exact_under_every_objective below)
CASES = [
    pytest.param("on", loss, id=f"tape-{loss}", marks=() if loss == "grpo_clip" else pytest.mark.slow)
    for loss in LOSSES
] + [pytest.param("off", loss, id=f"recompute-{loss}", marks=pytest.mark.slow) for loss in LOSSES]


@pytest.mark.parametrize(("reuse", "loss_type"), CASES)
def test_rows_of_zero_weight_change_nothing_but_the_work(tiny_model_dir, tmp_path, loss_type, reuse):
    """Groups of zero weight beside groups to learn, and a lone zero row inside a group to learn: the same metrics
    after each step, and the same weights after both, as training every row. (The next test covers microbatches
    with nothing to learn.)"""
    on, off = (
        trainer_for(tiny_model_dir, tmp_path, skip, loss_type=loss_type, reuse_rollout_forward=reuse)
        for skip in (True, False)
    )
    assert (on[1].tape is not None) == (reuse == "on")
    weights = [[0, 0, 0.5, -0.5, 0.7, 0, -1, 1], [0, 0, 0, 0, 1.5, -1.5, 0.2, -0.2]]
    rows = assert_same_steps(on, off, weights)
    assert [r["rows_without_backward"] for r in rows] == [3 / 8, 4 / 8]


@pytest.mark.slow  # two runs side by side; rows of zero weight run by default above
def test_a_step_with_nothing_to_learn_still_counts_for_adam(tiny_model_dir, tmp_path):
    """All weights 0: one row keeps its backward (the other microbatch has nothing to learn), so every parameter
    gets its zero gradient and AdamW steps (its bias correction counts the step); the next step's update shows it."""
    on, off = (trainer_for(tiny_model_dir, tmp_path, skip, loss_type="grpo_clip") for skip in (True, False))
    rows = assert_same_steps(on, off, [[0.0] * 8, [1, -1, 0.5, -0.5, 0, 0, 2, -2]])
    assert rows[0]["rows_without_backward"] == 7 / 8 and rows[0]["grad_norm"] == 0
    assert math.isfinite(rows[1]["loss"]) and rows[1]["grad_norm"] > 0


OBJECTIVES = {  # the objective settings under which the skip must stay exact (see --skip-zero-advantage's help)
    "gspo_sequence_tis": dict(loss_type="gspo", tis_cap=1.5, rollout_correction="sequence_tis"),
    "cispo_token_mean_token_mask_rows_out": dict(
        loss_type="cispo",
        cliprange_low=1.0,
        cliprange_high=0.28,
        loss_aggregation="token_mean",
        tis_cap=1.05,
        rollout_correction="token_mask",
    ),
    "clip_higher_constant_sequence_mask": dict(
        loss_type="grpo_clip",
        cliprange_high=0.28,
        loss_aggregation="constant",
        tis_cap=1.5,
        rollout_correction="sequence_mask",
    ),
}


@pytest.mark.parametrize(
    "name", [pytest.param(name, marks=() if i == 0 else pytest.mark.slow) for i, name in enumerate(OBJECTIVES)]
)  # the first in the default suite, the others under -m slow
def test_skipping_stays_exact_under_every_objective(tiny_model_dir, tmp_path, name):
    """Each loss multiplies every token term by its row's weight, corrections multiply by theirs, and the aggregations'
    denominators count rows and tokens (never gradients): the same steps with and without the skip. Rows out of the
    loss (--mask-truncated) are skipped too."""
    on, off = (
        trainer_for(tiny_model_dir, tmp_path, skip, reuse_rollout_forward="off", **OBJECTIVES[name])
        for skip in (True, False)
    )
    in_loss = [True, True, False, True, True, False, True, True] if name.endswith("rows_out") else None
    rows = assert_same_steps(on, off, [[0, 0, 0.5, -0.5, 0.7, 0, -1, 1], [0, 0, 0, 0, 1.5, -1.5, 0.2, -0.2]], in_loss)
    # zero weights, plus the out-of-loss rows 2 and 5 (of which row 5 has weight 0 already in step 1)
    assert [r["rows_without_backward"] for r in rows] == ([4 / 8, 5 / 8] if in_loss else [3 / 8, 4 / 8])
