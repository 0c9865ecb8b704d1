import statistics

import pytest
import torch

from tests.adapters import run_compute_group_normalized_rewards


def exact_match(response: str, truth: str) -> dict[str, float]:
    ok = float(response == truth)
    return {"format_reward": 1.0, "answer_reward": ok, "reward": ok}


def partial(response: str, truth: str) -> dict[str, float]:
    r = float(response) / 4
    return {"format_reward": 1.0, "answer_reward": r, "reward": r}


def expected(rewards: list[float], group_size: int, eps: float, by_std: bool) -> list[float]:
    out = []
    for g in range(0, len(rewards), group_size):
        group = rewards[g : g + group_size]
        mean = sum(group) / len(group)
        std = statistics.stdev(group)  # unbiased, n - 1
        out += [(r - mean) / (std + eps) if by_std else r - mean for r in group]
    return out


def test_binary_rewards_by_hand():
    responses = ["a", "b", "a", "b", "a", "a", "a", "a"]
    truths = ["a"] * 8
    adv, raw, meta = run_compute_group_normalized_rewards(exact_match, responses, truths, 4, 1e-6, True)
    assert raw.tolist() == [1, 0, 1, 0, 1, 1, 1, 1]
    assert adv.dtype == torch.float32 and adv.shape == (8,)
    # group 1: mean 0.5, unbiased std sqrt(1/3)
    assert adv[0].item() == pytest.approx(0.5 / (3**-0.5 + 1e-6), abs=1e-5)
    assert adv[1].item() == pytest.approx(-0.5 / (3**-0.5 + 1e-6), abs=1e-5)
    # group 2: all correct, std 0 -> advantages exactly 0 (eps keeps it finite)
    assert adv[4:].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert meta["reward_mean"] == pytest.approx(0.75)


@pytest.mark.parametrize("by_std", [True, False])
def test_graded_rewards_match_independent_formula(by_std):
    responses = ["0", "1", "3", "4", "2", "2", "1", "4", "0"]
    adv, raw, _ = run_compute_group_normalized_rewards(partial, responses, ["x"] * 9, 3, 0.01, by_std)
    rewards = [float(r) / 4 for r in responses]
    assert raw.tolist() == pytest.approx(rewards)
    assert adv.tolist() == pytest.approx(expected(rewards, 3, 0.01, by_std), abs=1e-5)


def test_without_std_no_eps_is_added():
    adv, _, _ = run_compute_group_normalized_rewards(exact_match, ["a", "b"], ["a", "a"], 2, 100.0, False)
    assert adv.tolist() == [0.5, -0.5]


def test_bad_group_size_and_lengths_raise():
    with pytest.raises(ValueError, match="group_size"):
        run_compute_group_normalized_rewards(exact_match, ["a"] * 6, ["a"] * 6, 4, 1e-6, True)
    with pytest.raises(ValueError, match="repeated_ground_truths"):
        run_compute_group_normalized_rewards(exact_match, ["a"] * 4, ["a"] * 3, 2, 1e-6, True)


def test_the_example_estimator_sqrt_mean_by_hand():
    from alignment.advantages import estimate_advantages

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    got = estimate_advantages(rewards, 4, "sqrt_mean", 1e-6)
    eps = 1e-6
    expected = [0.75 / (0.25 + eps) ** 0.5] + [-0.25 / (0.25 + eps) ** 0.5] * 3 + [0.0] * 4  # mean 0.25; all 0
    expected += [0.5 / (0.5 + eps) ** 0.5] * 2 + [-0.5 / (0.5 + eps) ** 0.5] * 2  # mean 0.5
    assert got.tolist() == pytest.approx(expected, abs=1e-6)


def test_a_new_estimator_is_one_function_registered_by_name(monkeypatch, tiny_model_dir, tmp_path):
    """try_your_own's extension point: a function under @register_advantage_estimator is a valid
    advantage_estimator setting and is what the run's objective calls; names are checked before any model loads."""
    from dataclasses import replace

    from alignment import advantages
    from alignment.grpo.config import GRPOConfig, validate
    from alignment.grpo.objective import Objective
    from alignment.grpo_run import train_grpo
    from tests.test_grpo_loop import TASK, tiny_config

    monkeypatch.setattr(advantages, "ADVANTAGE_ESTIMATORS", dict(advantages.ADVANTAGE_ESTIMATORS))
    calls = []

    @advantages.register_advantage_estimator("leave_one_out_max")
    def leave_one_out_max(raw_rewards: torch.Tensor, group_size: int, advantage_eps: float) -> torch.Tensor:
        grouped = raw_rewards.float().view(-1, group_size)
        calls.append((tuple(raw_rewards.shape), group_size, advantage_eps))
        return (grouped - grouped.max(dim=1, keepdim=True).values).reshape(-1)  # the best of the group: 0

    config = replace(GRPOConfig(), advantage_estimator="leave_one_out_max", advantage_eps=1e-3)
    validate(config)
    advantage = Objective.from_settings(config).advantages(torch.tensor([1.0, 0.0, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0]))
    assert advantage.tolist() == [0.0, -1.0, -0.5, -0.5] + [0.0] * 4
    assert calls == [((8,), 8, 1e-3)]
    with pytest.raises(ValueError, match="already registered"):
        advantages.register_advantage_estimator("leave_one_out_max")(leave_one_out_max)
    with pytest.raises(ValueError, match="'my_typo' is not one of group_norm, rloo, reinforce_pp, sqrt_mean"):
        validate(replace(GRPOConfig(), advantage_estimator="my_typo"))
    rows = train_grpo(tiny_config(tiny_model_dir, tmp_path, advantage_estimator="leave_one_out_max"), TASK, TASK)
    assert len(calls) == 2 and calls[1] == ((4,), 2, 1e-6)  # the run's one step went through it
    assert len(rows) == 1 and rows[0]["loss"] == rows[0]["loss"]  # one optimizer step, a number (not NaN)
