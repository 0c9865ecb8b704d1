"""The objectives beyond the handouts, each against numbers derived by hand from its paper's formula: GSPO, CISPO,
clip-higher, the three loss aggregations, RLOO, REINFORCE++-baseline, DAPO's overlong penalty, sequence-level
and masked importance corrections; then the settings around them (old names, refused combinations) and DAPO's
dynamic sampling in the loop."""

import json
import math
from dataclasses import replace

import pytest
import torch

from alignment.advantages import estimate_advantages, overlong_penalty, reinforce_pp_advantages, rloo_advantages
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo_step import aggregate_token_loss, grpo_microbatch_train_step
from alignment.losses import compute_cispo_loss, compute_grpo_clip_loss, compute_gspo_loss, sequence_log_ratio
from alignment.rollout_correction import rollout_correction_weights

F64 = torch.float64
BIG = 50.0  # a value on masked positions: any leak into a sum, a mean or a ratio shows at once

# ---------------------------------------------------------------- GSPO


def test_gspo_ratio_is_the_exp_of_the_mean_token_log_ratio_not_the_sum():
    # row 0: log-ratios 0.3, -0.1 on its two response tokens, BIG on a masked one; row 1: no response token
    logp = torch.tensor([[0.3, -0.1, BIG], [BIG, BIG, BIG]], dtype=F64) - 1.0
    old = torch.full((2, 3), -1.0, dtype=F64)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    log_s = sequence_log_ratio(logp, old, mask)
    # mean: (0.3 - 0.1) / 2 = 0.1 (a sum would give 0.2, TRL PR 5815's bug); zero tokens: log s = 0, s = 1
    assert log_s[:, 0].tolist() == pytest.approx([0.1, 0.0], abs=1e-12)


def test_gspo_loss_and_gradient_by_hand():
    logp = torch.tensor([[0.3, -0.1, BIG], [0.0, 0.0, 0.0], [-0.02, -0.02, -0.02]], dtype=F64, requires_grad=True)
    old = torch.zeros(3, 3, dtype=F64)
    mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    advantages = torch.tensor([[1.0], [3.0], [-2.0]], dtype=F64)
    loss, meta = compute_gspo_loss(advantages, logp, old, mask, clip_low=0.05, clip_high=0.05)
    s0, s2 = math.exp(0.1), math.exp(-0.02)
    # row 0: s = e^0.1 = 1.1052 > 1.05 with A = 1: the clipped 1.05 is smaller -> -1.05 on every token, no gradient
    # row 1: zero tokens, s = 1: -3 (on no response token); row 2: s = e^-0.02 = 0.980 inside [0.95, 1.05] -> -s * A
    assert loss[0].tolist() == pytest.approx([-1.05] * 3)
    assert loss[1].tolist() == pytest.approx([-3.0] * 3)
    assert loss[2].tolist() == pytest.approx([2 * s2] * 3)
    assert meta["clipped"].tolist() == [[True] * 3, [False] * 3, [False] * 3]
    assert meta["sequence_ratio"][:, 0].tolist() == pytest.approx([s0, 1.0, s2])
    # the sequence term, once per sequence (the per-sequence mean of equal token values), summed
    total = aggregate_token_loss(loss, mask, "sequence_mean", batch_rows=1, batch_tokens=1)
    total.backward()
    assert total.item() == pytest.approx(-1.05 + 0 + 2 * s2)
    # d(-s A)/d logp_t = -A * s / |o| for each of the |o| = 3 tokens of row 2; nothing through row 0's clip
    assert logp.grad[2].tolist() == pytest.approx([2 * s2 / 3] * 3)
    assert logp.grad[0].tolist() == [0.0, 0.0, 0.0] and logp.grad[1].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    "advantage,ratio,low,high,expected",
    [
        (1.0, 1.25, 0.2, 0.25, -1.25),  # exactly at the upper edge: both terms equal
        (-1.0, 0.75, 0.25, 0.2, 0.75),  # exactly at the lower edge
        (1.0, 1.25, 0.2, 0.28, -1.25),  # clip-higher: 1.25 < 1.28 stays (symmetric 0.2 would clip it to 1.2)
        (1.0, 1.25, 0.2, 0.2, -1.2),
        (-1.0, 0.75, 0.2, 0.28, 0.8),  # the lower range still binds a negative advantage: -min(-0.75, -0.8)
    ],
)
def test_clip_edges_and_clip_higher_by_hand(advantage, ratio, low, high, expected):
    logp = torch.tensor([[math.log(ratio)]], dtype=F64)
    old = torch.zeros(1, 1, dtype=F64)
    adv = torch.tensor([[advantage]], dtype=F64)
    token, meta = compute_grpo_clip_loss(adv, logp, old, low, high)
    sequence, sequence_meta = compute_gspo_loss(adv, logp, old, torch.ones(1, 1, dtype=torch.bool), low, high)
    assert token.item() == pytest.approx(expected, abs=1e-12) and sequence.item() == pytest.approx(expected, abs=1e-12)
    at_edge = ratio in (1 - low, 1 + high)
    assert bool(meta["clipped"]) == bool(sequence_meta["clipped"]) == (not at_edge and expected != -ratio * advantage)


# ---------------------------------------------------------------- CISPO


def test_cispo_keeps_a_gradient_on_clipped_tokens():
    # ratios e^0.5 = 1.6487 (above 1 + 0.28), e^-0.1 = 0.9048 (inside), e^-1 = 0.3679 (below 1 - 0.5)
    old = torch.tensor([[-1.0, -1.0, -1.0]], dtype=F64)
    logp = (old + torch.tensor([[0.5, -0.1, -1.0]], dtype=F64)).requires_grad_()
    advantages = torch.tensor([[2.0]], dtype=F64)
    loss, meta = compute_cispo_loss(advantages, logp, old, clip_low=0.5, clip_high=0.28)
    weights = [1.28, math.exp(-0.1), 0.5]
    assert loss[0].tolist() == pytest.approx([-w * 2.0 * lp for w, lp in zip(weights, [-0.5, -1.1, -2.0])])
    assert meta["clipped"].tolist() == [[True, False, True]]
    loss.sum().backward()
    # the weight is a constant: d/dlogp = -w * A on every token, clipped ones included (GRPO-Clip gives those 0)
    assert logp.grad[0].tolist() == pytest.approx([-w * 2.0 for w in weights])
    clip_logp = logp.detach().clone().requires_grad_()
    compute_grpo_clip_loss(advantages, clip_logp, old, 0.5, 0.28)[0].sum().backward()
    assert clip_logp.grad[0, 0].item() == 0.0


# ---------------------------------------------------------------- loss aggregation

TOKEN_LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, BIG, BIG], [BIG, BIG, BIG]], dtype=F64)
MASK = torch.tensor([[True, True, True], [True, False, False], [False, False, False]])  # 3, 1 and 0 tokens


@pytest.mark.parametrize(
    "aggregation,expected",
    [
        ("sequence_mean", (6 / 3 + 4 / 1 + 0) / 3),  # each response's mean, the empty one adding 0, over 3 rows
        ("token_mean", (6 + 4) / 4),  # every token the same weight: 4 tokens in all
        ("constant", (6 + 4) / 8 / 3),  # sums over the constant 8, then the mean over rows
    ],
)
def test_aggregations_by_hand(aggregation, expected):
    whole = aggregate_token_loss(TOKEN_LOSS, MASK, aggregation, batch_rows=3, batch_tokens=4, constant=8.0)
    assert whole.item() == pytest.approx(expected)
    # microbatches of unequal size, each given the step's totals, add up to the same loss
    parts = [
        aggregate_token_loss(TOKEN_LOSS[rows], MASK[rows], aggregation, 3, 4, 8.0)
        for rows in (slice(0, 1), slice(1, 3))
    ]
    assert sum(p.item() for p in parts) == pytest.approx(expected)


def test_the_train_step_defaults_to_the_handouts_convention():
    """Without step totals: this microbatch's rows and tokens times gradient_accumulation_steps."""
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, BIG, BIG]], dtype=F64, requires_grad=True)
    mask = MASK[:2]
    adv = torch.tensor([[1.0], [2.0]], dtype=F64)
    loss, _ = grpo_microbatch_train_step(logp, mask, 2, "reinforce_with_baseline", advantages=adv)
    assert loss.item() == pytest.approx((6 / 3 + 8 / 1) / 2 / 2)  # per-sequence mean, batch mean, / 2
    loss, _ = grpo_microbatch_train_step(
        logp, mask, 2, "reinforce_with_baseline", advantages=adv, normalize_constant=4.0
    )
    assert loss.item() == pytest.approx((6 / 4 + 8 / 4) / 2 / 2)
    loss, _ = grpo_microbatch_train_step(
        logp, mask, 2, "reinforce_with_baseline", advantages=adv, loss_aggregation="token_mean"
    )
    assert loss.item() == pytest.approx((6 + 8) / (4 * 2))


# ---------------------------------------------------------------- advantage estimators


def test_rloo_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # row 0: 1 - (0 + 0 + 1) / 3 = 2/3; row 1: 0 - (1 + 0 + 1) / 3 = -2/3; a group of equal rewards: exactly 0
    assert rloo_advantages(rewards, 4).tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0])
    assert rloo_advantages(rewards, 4)[4:].tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="group_size >= 2"):
        rloo_advantages(rewards, 1)


def test_reinforce_pp_normalizes_across_the_batch_not_the_group():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.25])
    # group means 0.5, 1, 0.125 -> centered 0.5, -0.5, 0, 0, -0.125, 0.125; batch mean 0;
    # unbiased batch std sqrt((2 * 0.25 + 2 * 0.015625) / 5) = sqrt(0.10625)
    std = math.sqrt(0.10625)
    expected = [0.5 / std, -0.5 / std, 0.0, 0.0, -0.125 / std, 0.125 / std]
    assert reinforce_pp_advantages(rewards, 2, 0.0).tolist() == pytest.approx(expected)
    assert reinforce_pp_advantages(rewards, 2, 0.0)[2:4].tolist() == [0.0, 0.0]  # all-equal group: exactly 0
    # group normalization instead gives both non-constant groups the same scale: +-0.7071
    grouped = estimate_advantages(rewards, 2, "group_norm", 0.0, True)
    assert grouped[0].item() == pytest.approx(grouped[5].item()) == pytest.approx(1 / math.sqrt(2))


def test_overlong_penalty_by_hand():
    # limit 10, buffer 4: free up to 6 tokens, then -penalty * (|o| - 6) / 4 down to -penalty at 10
    lengths = torch.tensor([5, 6, 7, 8, 10])
    assert overlong_penalty(lengths, 10, 4, 0.5).tolist() == pytest.approx([0, 0, -0.125, -0.25, -0.5])
    assert overlong_penalty(lengths, 10, 10, 1.0).tolist() == pytest.approx([-0.5, -0.6, -0.7, -0.8, -1.0])


# ---------------------------------------------------------------- rollout corrections

# trainer vs rollout ratios: row 0 tokens 2 (edge of C = 2), 1.5, masked (100); row 1 tokens 0.4, 0.5 (edge)
TRAIN = torch.log(torch.tensor([[0.5, 0.3, 1.0], [0.2, 0.25, 0.9]]))
ROLLOUT = torch.log(torch.tensor([[0.25, 0.2, 0.01], [0.5, 0.5, 0.9]]))
RESPONSE = torch.tensor([[True, True, False], [True, True, True]])


def test_sequence_tis_is_the_capped_product_of_token_ratios():
    weights = rollout_correction_weights("sequence_tis", TRAIN, ROLLOUT, RESPONSE, cap=4.0)
    # row 0: 2 * 1.5 = 3 (the masked 100 left out); row 1: 0.4 * 0.5 * 1 = 0.2
    assert weights[:, 0].tolist() == pytest.approx([3.0, 0.2])
    assert rollout_correction_weights("sequence_tis", TRAIN, ROLLOUT, RESPONSE, cap=2.0)[
        :, 0
    ].tolist() == pytest.approx([2.0, 0.2])


def test_masked_importance_sampling_keeps_the_edges_and_drops_the_rest():
    tokens = rollout_correction_weights("token_mask", TRAIN, ROLLOUT, RESPONSE, cap=2.0)
    assert tokens[0, :2].tolist() == [1.0, 1.0] and tokens[1].tolist() == [0.0, 1.0, 1.0]  # 2 and 0.5 are edges
    sequences = rollout_correction_weights("sequence_mask", TRAIN, ROLLOUT, RESPONSE, cap=2.0)
    assert sequences[:, 0].tolist() == [0.0, 0.0]  # products 3 and 0.2 both outside [0.5, 2]
    assert rollout_correction_weights("sequence_mask", TRAIN, ROLLOUT, RESPONSE, cap=6.0)[:, 0].tolist() == [1.0, 1.0]


def test_a_masked_token_leaves_the_loss_but_not_the_denominator():
    logp = TRAIN.clone().requires_grad_()
    loss, meta = grpo_microbatch_train_step(
        logp,
        RESPONSE,
        1,
        "reinforce_with_baseline",
        advantages=torch.tensor([[1.0], [1.0]]),
        rollout_log_probs=ROLLOUT,
        tis_cap=2.0,
        rollout_correction="token_mask",
    )
    # -logp summed over kept tokens, over each response's own length (2 and 3), then the mean over 2 rows
    kept = -(TRAIN[0, 0] + TRAIN[0, 1]) / 2 - (TRAIN[1, 1] + TRAIN[1, 2]) / 3
    assert loss.item() == pytest.approx(kept.item() / 2)
    assert logp.grad[1].tolist() == pytest.approx([0.0, -1 / 6, -1 / 6])
    assert meta["rollout_masked_fraction"].item() == pytest.approx(1 / 5)


# ---------------------------------------------------------------- settings


def test_old_length_normalization_settings_still_load(tmp_path):
    from alignment.config.cli import read_config_file
    from alignment.config.settings import SETTINGS_FILE, read_run_settings

    old = tmp_path / "old.toml"
    old.write_text('length_normalization = "masked_normalize"\nnormalize_constant = 512.0\n')
    assert read_config_file(old, GRPOConfig) == {"loss_aggregation": "constant", "normalize_constant": 512.0}
    run = tmp_path / "run"
    run.mkdir()
    (run / SETTINGS_FILE).write_text(json.dumps({"length_normalization": "masked_mean", "learning_rate": 2e-5}))
    # a run saved before --grader, --keyword-match and --tf32 existed graded leniently, matched whole keywords and
    # multiplied in full float32
    saved = read_run_settings(run, GRPOConfig)
    assert saved == {
        "loss_aggregation": "sequence_mean",
        "learning_rate": 2e-5,
        "grader": "lenient",
        "keyword_match": "word",
        "tf32": False,
    }
    (run / SETTINGS_FILE).write_text(
        json.dumps({"length_normalization": "masked_mean", "loss_aggregation": "token_mean"})
    )
    with pytest.raises(ValueError, match="contradicts loss_aggregation 'token_mean'"):
        read_run_settings(run, GRPOConfig)
    (run / SETTINGS_FILE).write_text(json.dumps({"length_normalization": "sum"}))
    with pytest.raises(ValueError, match="length_normalization 'sum' is not one of masked_mean, masked_normalize"):
        read_run_settings(run, GRPOConfig)


def test_a_checkpoint_from_before_these_settings_resumes(tiny_model_dir, tmp_path):
    """An earlier version's checkpoint names length_normalization and lacks every setting added since: it is the same
    configuration as today's defaults with loss_aggregation in its place."""
    from alignment.grpo_run import train_grpo
    from alignment.models.loading import load_model_and_tokenizer
    from alignment.run.checkpoint import STATE, load_checkpoint
    from tests.test_grpo_loop import TASK, tiny_config

    config = tiny_config(tiny_model_dir, tmp_path, kl_reference=False, kl_prev=False)
    train_grpo(config, TASK, TASK)
    state_path = config.output_dir / "checkpoint" / STATE
    state = json.loads(state_path.read_text())
    added = (
        "loss_aggregation",
        "advantage_estimator",
        "cliprange_low",
        "cliprange_high",
        "rollout_correction",
        "dynamic_sampling",
        "dynamic_sampling_max_draws",
        "overlong_buffer",
        "overlong_penalty",
        "mask_truncated",
    )
    state["config"] = {k: v for k, v in state["config"].items() if k not in added} | {
        "length_normalization": "masked_mean"
    }
    state_path.write_text(json.dumps(state))
    policy, _ = load_model_and_tokenizer(str(tiny_model_dir))
    optimizer = torch.optim.AdamW(policy.parameters())
    assert load_checkpoint(config.output_dir, config, policy, optimizer)["step"] == 1
    with pytest.raises(ValueError, match="loss_aggregation: checkpoint 'sequence_mean' vs now 'token_mean'"):
        load_checkpoint(config.output_dir, replace(config, loss_aggregation="token_mean"), policy, optimizer)


BASE = dict(rollout_batch_size=8, group_size=4, train_batch_size=8, gradient_accumulation_steps=4)


@pytest.mark.parametrize(
    "overrides,flags",
    [
        (dict(loss_type="gspo", tis_cap=2.0), ("--loss-type gspo", "--rollout-correction token_tis")),
        (
            dict(loss_type="gspo", tis_cap=2.0, rollout_correction="token_mask"),
            ("--loss-type gspo", "--rollout-correction token_mask"),
        ),
        (dict(loss_type="gspo", loss_aggregation="token_mean"), ("--loss-type gspo", "--loss-aggregation token_mean")),
        (
            dict(dynamic_sampling=True, train_batch_size=4, gradient_accumulation_steps=2),
            ("--dynamic-sampling", "--loss-type reinforce_with_baseline"),
        ),
        (
            dict(dynamic_sampling=True, epochs_per_rollout_batch=2, loss_type="no_baseline"),
            ("--dynamic-sampling", "--loss-type no_baseline"),
        ),
        (
            dict(tis_cap=1.0, rollout_correction="sequence_mask"),
            ("--rollout-correction sequence_mask", "--tis-cap must be > 1"),
        ),
        (
            dict(advantage_estimator="rloo", group_size=1, rollout_batch_size=8),
            ("--advantage-estimator rloo", "--group-size >= 2"),
        ),
        (dict(overlong_buffer=2000), ("--overlong-buffer (2000)", "--sampling-max-tokens=1024")),
        (dict(loss_type="cispo", cliprange=0.0), ("--loss-type cispo", "--cliprange")),
    ],
)
def test_bad_combinations_are_refused_naming_both_flags(overrides, flags):
    with pytest.raises(ValueError) as info:
        validate(GRPOConfig(**BASE | overrides))
    assert all(flag in str(info.value) for flag in flags), str(info.value)


def test_good_combinations_pass():
    for overrides in (
        dict(loss_type="gspo", tis_cap=2.0, rollout_correction="sequence_tis"),
        dict(dynamic_sampling=True, loss_type="grpo_clip", train_batch_size=4, gradient_accumulation_steps=2),
        dict(loss_type="cispo", cliprange_low=1.0, cliprange_high=0.28, loss_aggregation="token_mean"),
    ):
        validate(GRPOConfig(**BASE | overrides))


# ---------------------------------------------------------------- dynamic sampling in the loop


def one_agreeing_question(response: str, truth: str) -> dict[str, float]:
    """Question 0's group always agrees (reward 1); the others vary with the text."""
    from tests.test_grpo_loop import hash_reward

    return {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0} if truth == "2" else hash_reward(response, truth)


def test_dynamic_sampling_drops_agreeing_groups_and_resumes_exactly(tiny_model_dir, tmp_path):
    from alignment.data.task import Task
    from alignment.grpo_run import train_grpo
    from tests.test_grpo_loop import TASK, tiny_config

    task = Task(TASK.questions, TASK.truths, TASK.template, one_agreeing_question)
    straight = tiny_config(
        tiny_model_dir,
        tmp_path / "a",
        n_grpo_steps=2,
        loss_type="grpo_clip",
        dynamic_sampling=True,
        dynamic_sampling_max_draws=3,
        kl_reference=False,
        kl_prev=False,
    )
    rows = train_grpo(straight, task, task)
    for row in rows:  # 2 groups wanted; each draw asks for the groups still missing
        kept = row["dynamic_groups_drawn"] - row["dynamic_groups_dropped"]
        assert kept == 2 - row["dynamic_groups_missing"]
        assert (row["dynamic_draws"] > 1) == (row["dynamic_groups_dropped"] > 0)  # a full first draw is the last
        assert row["dynamic_groups_missing"] == 0 or row["dynamic_draws"] == 3  # short only once the bound is hit
    # the prompt order's position moved by every group drawn: the checkpoint keeps it
    state = json.loads((straight.output_dir / "checkpoint" / "state.json").read_text())
    assert state["loop"]["order_position"] == sum(row["dynamic_groups_drawn"] for row in rows)
    assert any(row["dynamic_groups_dropped"] > 0 for row in rows)  # question 0 came up (the order covers all 4)

    first = replace(straight, output_dir=tmp_path / "b", n_grpo_steps=1)
    train_grpo(first, task, task)
    resumed = train_grpo(replace(first, n_grpo_steps=2), task, task, resume=True)

    def strip(rows):
        return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in rows]

    assert strip(resumed) == strip([row for row in rows if row["grpo_step"] == 2])
