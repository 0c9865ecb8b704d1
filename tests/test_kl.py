import math

import pytest
import torch

from alignment.kl import kl_estimates


def test_k1_k3_by_hand_over_response_tokens():
    policy = torch.tensor([[-1.0, -0.5, -2.0]])
    reference = torch.tensor([[-1.5, -0.5, -9.0]])
    mask = torch.tensor([[True, True, False]])  # the last token is padding and must not count
    out = kl_estimates(policy, reference, mask)
    # r = ref - policy = [-0.5, 0.0]; k1 = -r; k3 = e^r - r - 1
    assert out["k1"] == pytest.approx((0.5 + 0.0) / 2)
    assert out["k3"] == pytest.approx((math.exp(-0.5) + 0.5 - 1 + 0.0) / 2)


def test_eq8_sums_each_response_then_averages_over_responses():
    """UW's Eq. 8: (1/N) sum_i sum_t [log pi(o_t) - log pi_ref(o_t)], prompt and padding tokens masked out."""
    policy = torch.tensor([[-1.0, -0.5, -2.0, -3.0], [-0.2, -0.1, -0.3, -4.0]])
    reference = torch.tensor([[-1.5, -0.5, -9.0, -9.0], [-0.2, -1.1, -0.1, -9.0]])
    mask = torch.tensor([[True, True, False, False], [True, True, True, False]])
    # response 1: (-1 + 1.5) + (-0.5 + 0.5) = 0.5; response 2: 0 + 1.0 + (-0.2) = 0.8
    out = kl_estimates(policy, reference, mask)
    assert out["k1_sum"] == pytest.approx((0.5 + 0.8) / 2)
    assert out["k1"] == pytest.approx((0.5 + 0.0 + 0.0 + 1.0 - 0.2) / 5)  # the per-token mean beside it


def test_identical_policies_give_zero_and_k3_is_never_negative():
    torch.manual_seed(0)
    a, b = torch.randn(4, 6), torch.randn(4, 6)
    mask = torch.ones(4, 6, dtype=torch.bool)
    assert kl_estimates(a, a, mask) == {"k1": 0.0, "k3": 0.0, "k1_sum": 0.0}
    assert kl_estimates(a, b, mask)["k3"] > 0


def test_k1_and_k3_estimate_the_true_kl_from_samples():
    """Sampling from p, both estimators average to KL(p || q) computed exactly."""
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    exact = float((p * (p / q).log()).sum())
    draws = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    out = kl_estimates(p.log()[draws][None], q.log()[draws][None], torch.ones(1, len(draws), dtype=torch.bool))
    assert out["k1"] == pytest.approx(exact, abs=0.01)
    assert out["k3"] == pytest.approx(exact, abs=0.01)


def test_rollout_mismatch_by_hand():
    from alignment.rollout_correction import rollout_mismatch

    found = rollout_mismatch(torch.tensor([0.1, -0.2, 0.0]))  # trainer minus engine, per response token
    assert found["rollout_logprob_diff_mean"] == pytest.approx(0.1)
    assert found["rollout_logprob_diff_max"] == pytest.approx(0.2)
    k3 = ((math.exp(0.1) - 0.1 - 1) + (math.exp(-0.2) + 0.2 - 1)) / 3
    assert found["rollout_kl_k3"] == pytest.approx(k3, rel=1e-5)  # float32


def test_kl_to_the_previous_step_is_the_handouts_direction_and_sum(tiny_model_dir, tmp_path):
    """UW A3 v2 problem 6: at step t, KL(pi_theta || pi_theta_{t-1}) on the step's rollouts (sampled by pi_theta),
    Eq. 8's sum over each response's tokens averaged over responses, beside the per-token means; none at the first
    step, which has no step before it. Checked against log-probs recomputed under snapshots of each version."""
    from alignment.grpo.sampler import rollout_sampling
    from alignment.logprobs import get_response_log_probs
    from alignment.models.loading import load_model_and_tokenizer
    from alignment.prompts import format_prompt
    from alignment.rollout.hf_engine import HFRolloutEngine
    from tests.test_grpo_loop import TASK, grpo_parts, hash_reward, tiny_config

    config = tiny_config(tiny_model_dir, tmp_path, kl_prev_step=True, kl_reference=False, learning_rate=1e-2)
    policy, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    _, learner = grpo_parts(config, policy, tokenizer, HFRolloutEngine(policy, tokenizer, progress=False))
    snapshot, _ = load_model_and_tokenizer(str(tiny_model_dir))
    versions = [{k: v.clone() for k, v in policy.state_dict().items()}]
    engine = HFRolloutEngine(policy, tokenizer, progress=False)
    prompts = [format_prompt(TASK.template, q) for q in TASK.questions[:2]]
    for step in range(2):
        rollouts = engine.generate(prompts, 2, rollout_sampling(config, step))
        batch = learner.make_batch([0, 1], rollouts, [hash_reward(r.text, "") for r in rollouts])
        (row,) = learner.update(batch)
        if step:
            own, before = [], []
            for weights, out in ((versions[step], own), (versions[step - 1], before)):
                snapshot.load_state_dict(weights)
                with torch.no_grad():
                    out.append(get_response_log_probs(snapshot, batch.input_ids, batch.labels)["log_probs"].double())
            diff = (own[0] - before[0]) * batch.response_mask
            assert row["kl_prev_step_k1_sum"] == pytest.approx(diff.sum(-1).mean().item(), abs=1e-5)
            assert row["kl_prev_step_k1"] == pytest.approx((diff.sum() / batch.response_mask.sum()).item(), abs=1e-5)
            assert row["kl_prev_step_k3"] > 0
        else:
            assert not any(key.startswith("kl_prev_step") for key in row)
        versions.append({k: v.clone() for k, v in policy.state_dict().items()})
    assert learner.previous_version == 1
