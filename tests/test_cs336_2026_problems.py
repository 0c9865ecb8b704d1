"""The CS336 2026 handout's test commands (`uv run pytest -k NAME`) on this project: one test per problem, under the
handout's name, through the 2026 adapters (tests/adapters_cs336_2026.py) on small cases whose values are worked out
here by hand. tests/test_grpo_train_step.py checks the same functions against the handout's equations in float64."""

import math

import pytest
import torch

from tests import adapters_cs336_2026 as adapters
from tests.test_grpo_train_step import PROMPTS, RESPONSES, reward_fn, tiny_llama, word_tokenizer

EPS = 1e-6


def test_compute_rollout_rewards():
    rewards, metadata = adapters.run_compute_rollout_rewards(reward_fn, RESPONSES, ["x"] * len(RESPONSES))
    assert rewards.tolist() == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 1.0]
    assert metadata["reward_mean"] == pytest.approx(4.5 / 8)
    assert metadata["format_reward_mean"] == pytest.approx(5 / 8)  # "no", "maybe" and "no no" are unformatted


def group_of_four() -> torch.Tensor:
    return torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # means 0.5 and 0.75


def test_compute_group_normalized_rewards_grpo():
    advantages, _ = adapters.run_compute_group_normalized_rewards(group_of_four(), 4, advantage_eps=EPS)
    std_a, std_b = math.sqrt(1 / 3), 0.5  # unbiased: sum of squares 1.0 / 3 and 0.75 / 3
    expected = [x / (std_a + EPS) for x in (0.5, -0.5, -0.5, 0.5)] + [x / (std_b + EPS) for x in (0.25,) * 3 + (-0.75,)]
    assert advantages.tolist() == pytest.approx(expected)


def test_compute_group_normalized_rewards_drgrpo():
    centred, _ = adapters.run_compute_group_normalized_rewards(group_of_four(), 4, "mean", EPS, "none")
    assert centred.tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.25, 0.25, 0.25, -0.75])
    raw, _ = adapters.run_compute_group_normalized_rewards(group_of_four(), 4, "none", EPS, "none")
    assert raw.tolist() == group_of_four().tolist()  # RFT: the rewards themselves


def test_compute_group_normalized_rewards_maxrl():
    advantages, _ = adapters.run_compute_group_normalized_rewards(group_of_four(), 4, "mean", EPS, "mean")
    expected = [x / (0.5 + EPS) for x in (0.5, -0.5, -0.5, 0.5)] + [x / (0.75 + EPS) for x in (0.25,) * 3 + (-0.75,)]
    assert advantages.tolist() == pytest.approx(expected)


LOG_PROBS = torch.log(torch.tensor([[0.5, 0.25], [0.8, 0.1]]))
OLD_LOG_PROBS = torch.log(torch.tensor([[0.25, 0.25], [0.4, 0.2]]))  # ratios [[2, 1], [2, 0.5]]
ADVANTAGES = torch.tensor([[1.0], [-2.0]])


def test_compute_policy_gradient_loss_on_policy():
    loss, _ = adapters.run_compute_policy_gradient_loss(ADVANTAGES, LOG_PROBS)
    assert loss.flatten().tolist() == pytest.approx(
        [-math.log(0.5), -math.log(0.25), 2 * math.log(0.8), 2 * math.log(0.1)]
    )


def test_compute_policy_gradient_loss_off_policy():
    noclip, _ = adapters.run_compute_policy_gradient_loss(ADVANTAGES, LOG_PROBS, "noclip", OLD_LOG_PROBS)
    assert noclip.flatten().tolist() == pytest.approx([-2.0, -1.0, 4.0, 1.0])  # -w A
    clipped, meta = adapters.run_compute_policy_gradient_loss(ADVANTAGES, LOG_PROBS, "grpo", OLD_LOG_PROBS, 0.2)
    # A > 0: min(w, 1.2) A; A < 0: max(w, 0.8) A, negated
    assert clipped.flatten().tolist() == pytest.approx([-1.2, -1.0, 4.0, 1.6])
    assert meta["clip_fraction"].item() == pytest.approx(0.5)  # the first token (w 2, A > 0), the last (w 0.5, A < 0)


def test_compute_policy_gradient_loss_off_policy_gspo():
    mask = torch.tensor([[True, True], [True, False]])
    loss, _ = adapters.run_compute_policy_gradient_loss(ADVANTAGES, LOG_PROBS, "gspo", OLD_LOG_PROBS, 0.2, mask)
    # s = geometric mean of the masked ratios: sqrt(2 * 1) for row 0, 2 for row 1 (its second token left out)
    s0, s1 = math.sqrt(2.0), 2.0
    assert loss[0].tolist() == pytest.approx([-min(s0, 1.2)] * 2)
    assert loss[1, 0].item() == pytest.approx(2 * max(s1, 0.8))


def test_aggregate_loss_across_microbatch_sequence():
    per_token = torch.tensor([[1.0, 3.0, 100.0], [2.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss = adapters.run_aggregate_loss_across_microbatch(per_token, mask, "sequence")
    assert loss.item() == pytest.approx((2.0 + 2.0) / 2)  # each row's mean over its tokens, then the mean of rows


def test_aggregate_loss_across_microbatch_constant():
    per_token = torch.tensor([[1.0, 3.0, 100.0], [2.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss = adapters.run_aggregate_loss_across_microbatch(per_token, mask, "constant", 16)
    assert loss.item() == pytest.approx((1.0 + 3.0 + 2.0) / 16)  # every counted token over the constant


def train_step(**options) -> tuple[torch.Tensor, dict, torch.nn.Module, dict[str, torch.Tensor]]:
    model, tokenizer = tiny_llama(), word_tokenizer()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss, metadata = adapters.run_grpo_train_step(
        model, tokenizer, optimizer, 2, 1.0, reward_fn, PROMPTS, RESPONSES, ["x"] * 8, 2, **options
    )
    return loss, metadata, model, before


def moved(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_grpo_train_step_standard_on_policy():
    loss, metadata, model, before = train_step()
    assert math.isfinite(loss.item()) and moved(model, before)
    assert metadata["reward_mean"] == pytest.approx(4.5 / 8) and metadata["grad_norm"] > 0
    # pass@1: first rollouts of the 4 groups correct in groups 0 and 1; pass@2: a correct one in groups 0, 1 and 3
    assert (metadata["pass@1"], metadata["pass@2"]) == pytest.approx((0.5, 0.75))


@pytest.mark.parametrize(
    "baseline,normalizer", [("mean", "std"), ("mean", "none"), ("none", "none"), ("mean", "mean")], ids=str
)
def test_grpo_train_step_variants_on_policy(baseline, normalizer):
    options = {"loss_normalization": "constant", "normalization_constant": 8 * 4}
    _, metadata, model, before = train_step(baseline=baseline, advantage_normalizer=normalizer, **options)
    assert moved(model, before)
    # groups 0 and 2 agree (A = 0 with the mean baseline); with none, the 3 rollouts of reward 0 weigh nothing
    assert metadata["rows_in_backward"] == pytest.approx(4 / 8 if baseline == "mean" else 5 / 8)


@pytest.mark.parametrize("method,cliprange", [("noclip", None), ("grpo", 0.2), ("gspo", 3e-4)])
def test_grpo_train_step_off_policy(method, cliprange):
    """The first of the off-policy steps: the old policy is the model itself, so every ratio is 1 and nothing clips."""
    from alignment.sft import tokenize_prompt_and_output

    batch = tokenize_prompt_and_output(PROMPTS, RESPONSES, word_tokenizer(), prompt_special_tokens=False)
    with torch.no_grad():
        old = adapters.run_get_response_log_probs(tiny_llama(), batch["input_ids"], batch["labels"], False)
    loss, metadata, model, before = train_step(
        importance_reweighting_method=method, old_log_probs=old["log_probs"], cliprange=cliprange
    )
    assert math.isfinite(loss.item()) and moved(model, before)
    assert metadata["clip_fraction"] == 0.0
