"""The 2026 CS336 handout's GRPO pieces against its equations, derived here in float64 without the library's code:
group advantages (baseline x normalizer), the importance-reweighted losses (token-level clip in the handout's
min / max form, GSPO's geometric mean as a product), the two aggregations, and the train step, whose update must
be the equation's gradient and must not change when zero-advantage rows are left out of the model."""

import itertools
import math
import statistics

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from alignment.advantages import compute_rollout_rewards, group_advantages
from alignment.grpo_step import aggregate_loss_across_microbatch
from alignment.grpo_train_step import grpo_train_step
from alignment.losses import reweighted_policy_gradient_loss

WORDS = "pad end q1 q2 q3 q4 say yes no maybe so and then".split()


def word_tokenizer() -> PreTrainedTokenizerFast:
    """One token per space-separated word of WORDS; no special tokens are added to anything."""
    model = WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="pad")
    backend = Tokenizer(model)
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="pad", eos_token="end")


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).double().train()


# Rollouts: 4 prompts x group 2. Rewards: group 0 all 1 (A = 0 under the mean baseline), group 1 mixed, group 2
# all 0 (A = 0), group 3 mixed with partial credit.
PROMPTS = ["q1", "q1", "q2 so", "q2 so", "q3", "q3", "q4 and then", "q4 and then"]
RESPONSES = ["yes end", "say yes", "no", "yes yes so", "maybe", "no no", "say no end", "yes"]
REWARD = {"yes end": 1.0, "say yes": 1.0, "no": 0.0, "yes yes so": 1.0, "maybe": 0.0, "no no": 0.0}
REWARD |= {"say no end": 0.5, "yes": 1.0}


def reward_fn(response: str, ground_truth: str) -> dict[str, float]:
    r = REWARD[response]
    return {"reward": r, "format_reward": float(response.endswith("end") or r > 0), "answer_reward": r}


def expected_advantages(rewards: list[float], group: int, baseline: str, normalizer: str, eps: float) -> list[float]:
    out = []
    for g in range(0, len(rewards), group):
        rs = rewards[g : g + group]
        mu, sd = statistics.fmean(rs), statistics.stdev(rs)
        centred = [r - mu if baseline == "mean" else r for r in rs]
        scale = {"std": sd + eps, "mean": mu + eps, "none": 1.0}[normalizer]
        out += [c / scale for c in centred]
    return out


@pytest.mark.parametrize("baseline", ["mean", "none"])
@pytest.mark.parametrize("normalizer", ["std", "none", "mean"])
def test_group_advantages_follow_the_handouts_equations(baseline, normalizer):
    rewards = [1.0, 0.0, 0.0, 0.0, 0.5, 1.0, 0.25, 0.0, 0.0]
    out = group_advantages(torch.tensor(rewards, dtype=torch.float64), 3, baseline, 0.01, normalizer)
    assert out.dtype == torch.float64
    assert out.tolist() == pytest.approx(expected_advantages(rewards, 3, baseline, normalizer, 0.01), abs=1e-12)


def test_maxrl_divides_by_the_group_mean_and_a_group_of_zeros_stays_zero():
    out = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]), 4, "mean", 1e-6, "mean")
    # group 0: mean 1/4, (1 - 1/4) / (1/4 + eps) ~ 3, (0 - 1/4) / (1/4) ~ -1; group 1: 0 / eps = 0
    assert out[:4].tolist() == pytest.approx([3.0, -1.0, -1.0, -1.0], rel=1e-5)
    assert out[4:].tolist() == [0.0] * 4


def test_bad_baseline_and_normalizer_are_named():
    with pytest.raises(ValueError, match="baseline"):
        group_advantages(torch.zeros(4), 2, "median", 1e-6, "std")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="advantage_normalizer"):
        group_advantages(torch.zeros(4), 2, "mean", 1e-6, "max")  # type: ignore[arg-type]


def test_rollout_rewards_and_their_means():
    raw, meta = compute_rollout_rewards(reward_fn, RESPONSES, ["x"] * len(RESPONSES))
    assert raw.tolist() == [REWARD[r] for r in RESPONSES]
    assert meta["reward_mean"] == pytest.approx(sum(REWARD[r] for r in RESPONSES) / 8)
    assert meta["format_reward_mean"] == pytest.approx(sum(reward_fn(r, "")["format_reward"] for r in RESPONSES) / 8)


def loss_inputs(seed: int = 3):
    g = torch.Generator().manual_seed(seed)
    advantages = torch.tensor([[0.8], [-1.3], [0.0], [2.0]], dtype=torch.float64)
    policy = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 2
    old = policy + (torch.rand(4, 6, generator=g, dtype=torch.float64) - 0.5)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 1, 0]]).bool()
    return advantages, policy, old, mask


def test_on_policy_and_unclipped_losses():
    a, lp, old, mask = loss_inputs()
    none, meta = reweighted_policy_gradient_loss(a.flatten(), lp)  # (batch,) advantages are accepted too
    assert torch.allclose(none, -a * lp) and meta["clip_fraction"] == 0
    noclip, _ = reweighted_policy_gradient_loss(a, lp, "noclip", old)
    for i, t in itertools.product(range(4), range(6)):
        assert noclip[i, t].item() == pytest.approx(-math.exp(lp[i, t].item() - old[i, t].item()) * a[i, 0].item())


def test_token_level_clip_is_the_handouts_piecewise_objective_and_gradient():
    a, lp, old, mask = loss_inputs()
    lp = lp.clone().requires_grad_()
    eps = 0.1
    loss, meta = reweighted_policy_gradient_loss(a, lp, "grpo", old, eps, mask)
    loss.sum().backward()
    clipped = 0
    for i, t in itertools.product(range(4), range(6)):
        w, adv = math.exp(lp[i, t].item() - old[i, t].item()), a[i, 0].item()
        objective = min(w, 1 + eps) * adv if adv >= 0 else max(w, 1 - eps) * adv  # eq. (58)
        assert loss[i, t].item() == pytest.approx(-objective, abs=1e-12)
        # eq. (59)-(60): the gradient flows where the importance weight is inside its side of the clip
        inside = w < 1 + eps if adv >= 0 else w > 1 - eps
        assert lp.grad[i, t].item() == pytest.approx(-(w * adv if inside else 0.0), abs=1e-12)
        clipped += int(mask[i, t] and not inside and adv != 0)
    assert meta["clip_fraction"].item() == pytest.approx(clipped / mask.sum().item())


def test_gspo_uses_the_geometric_mean_over_response_tokens_only():
    a, lp, old, mask = loss_inputs()
    eps = 0.05
    loss, _ = reweighted_policy_gradient_loss(a, lp, "gspo", old, eps, mask)
    for i in range(4):
        tokens = [t for t in range(6) if mask[i, t]]
        s = math.prod(math.exp(lp[i, t].item() - old[i, t].item()) for t in tokens) ** (1 / len(tokens))  # eq. (63)
        adv = a[i, 0].item()
        term = min(s * adv, min(max(s, 1 - eps), 1 + eps) * adv)  # eq. (62)
        assert loss[i][mask[i]].tolist() == pytest.approx([-term] * len(tokens), abs=1e-12)
    # what lies outside the response never enters the ratio
    moved = old.masked_fill(~mask, 50.0)
    again, _ = reweighted_policy_gradient_loss(a, lp, "gspo", moved, eps, mask)
    assert torch.equal(again[mask], loss[mask])


def test_gspo_ratio_stays_finite_where_the_product_would_overflow():
    mask = torch.ones(1, 4000, dtype=torch.bool)
    lp, old = torch.full((1, 4000), -1.0), torch.full((1, 4000), -1.2)  # product e^800 overflows float32
    loss, _ = reweighted_policy_gradient_loss(torch.ones(1, 1), lp, "gspo", old, 0.3, mask)
    assert loss[0, 0].item() == pytest.approx(-math.exp(0.2), rel=1e-5)  # s = e^0.2 < 1.3: inside the clip
    loss, _ = reweighted_policy_gradient_loss(torch.ones(1, 1), lp, "gspo", old, 0.1, mask)
    assert loss[0, 0].item() == pytest.approx(-1.1, rel=1e-5)  # s > 1.1: clipped


def test_missing_inputs_are_named():
    a, lp, old, mask = loss_inputs()
    with pytest.raises(ValueError, match="old_log_probs"):
        reweighted_policy_gradient_loss(a, lp, "noclip")
    with pytest.raises(ValueError, match="cliprange"):
        reweighted_policy_gradient_loss(a, lp, "grpo", old)
    with pytest.raises(ValueError, match="response_mask"):
        reweighted_policy_gradient_loss(a, lp, "gspo", old, 0.1)
    with pytest.raises(ValueError, match="importance_reweighting_method"):
        reweighted_policy_gradient_loss(a, lp, "cispo", old, 0.1)  # type: ignore[arg-type]


def test_sequence_and_constant_aggregation():
    _, lp, _, mask = loss_inputs()
    rows = [sum(lp[i, t].item() for t in range(6) if mask[i, t]) for i in range(4)]
    counts = [int(mask[i].sum()) for i in range(4)]
    sequence = aggregate_loss_across_microbatch(lp, mask, "sequence")
    assert sequence.item() == pytest.approx(sum(r / c for r, c in zip(rows, counts)) / 4)
    assert aggregate_loss_across_microbatch(lp, mask, "constant", 42).item() == pytest.approx(sum(rows) / 42)
    with pytest.raises(ValueError, match="normalization_constant"):
        aggregate_loss_across_microbatch(lp, mask, "constant")


def equation_loss(model, tokenizer, advantages: list[float], normalization: str, z: float | None) -> torch.Tensor:
    """The handout's objective written out: -(1/n) sum_i A_i / len_i sum_t log pi (eq. 32), or
    -(1/Z) sum_i A_i sum_t log pi (eq. 33), over each response's own tokens, one row at a time, unpadded."""
    total = torch.zeros((), dtype=torch.float64)
    for prompt, response, adv in zip(PROMPTS, RESPONSES, advantages):
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        r = tokenizer(response, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p + r])
        logits = model(ids).logits[0, len(p) - 1 : -1]
        log_probs = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None]).sum()
        total = total + adv * (log_probs / len(r) if normalization == "sequence" else log_probs)
    return -total / (len(PROMPTS) if normalization == "sequence" else z)


VARIANTS = {  # the handout's section 5.4 settings, Z = 4 prompts x group 2 x 6 tokens
    "grpo": dict(baseline="mean", advantage_normalizer="std", loss_normalization="sequence"),
    "grpo_constant": dict(baseline="mean", advantage_normalizer="std", loss_normalization="constant"),
    "dr_grpo": dict(baseline="mean", advantage_normalizer="none", loss_normalization="constant"),
    "rft": dict(baseline="none", advantage_normalizer="none", loss_normalization="constant"),
    "maxrl": dict(baseline="mean", advantage_normalizer="mean", loss_normalization="constant"),
}


def run_step(variant: str, skip: bool, max_grad_norm: float | None = None, **extra):
    model, tokenizer = tiny_llama(), word_tokenizer()
    kwargs = VARIANTS[variant] | extra
    if kwargs["loss_normalization"] == "constant":
        kwargs["normalization_constant"] = 48
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss, meta = grpo_train_step(
        model,
        tokenizer,
        optimizer,
        4,
        max_grad_norm,
        reward_fn,
        PROMPTS,
        RESPONSES,
        ["x"] * 8,
        2,
        skip_zero_advantage=skip,
        **kwargs,
    )
    return model, loss, meta


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_train_step_takes_the_equations_gradient_and_pruning_changes_nothing(variant):
    rewards = [REWARD[r] for r in RESPONSES]
    v = VARIANTS[variant]
    advantages = expected_advantages(rewards, 2, v["baseline"], v["advantage_normalizer"], 1e-6)
    reference = tiny_llama()
    loss = equation_loss(reference, word_tokenizer(), advantages, v["loss_normalization"], 48.0)
    loss.backward()
    pruned, pruned_loss, meta = run_step(variant, skip=True)
    full, full_loss, full_meta = run_step(variant, skip=False)
    assert pruned_loss.item() == pytest.approx(loss.item(), abs=1e-12)
    assert full_loss.item() == pytest.approx(loss.item(), abs=1e-12)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in reference.parameters()])).item()
    assert meta["grad_norm"] == pytest.approx(norm, rel=1e-9)
    for (name, before), after, after_full in zip(
        reference.named_parameters(), pruned.parameters(), full.parameters(), strict=True
    ):
        expected = before.detach() - 0.1 * before.grad
        assert torch.allclose(after, expected, atol=1e-12, rtol=0), name
        assert torch.allclose(after_full, expected, atol=1e-12, rtol=0), name
        assert after.grad is None
    kept = sum(a != 0 for a in advantages)
    assert meta["rows_in_backward"] == kept / 8 and full_meta["rows_in_backward"] == 1.0
    assert meta["microbatches"] == math.ceil(kept / 2) and full_meta["microbatches"] == 4


def test_train_step_logs_rewards_entropy_and_pass_at_k():
    _, _, meta = run_step("grpo", skip=True, max_grad_norm=1e-3)
    rewards = [REWARD[r] for r in RESPONSES]
    assert meta["reward_mean"] == pytest.approx(statistics.fmean(rewards))
    assert meta["format_reward_mean"] == pytest.approx(
        statistics.fmean(reward_fn(r, "")["format_reward"] for r in RESPONSES)
    )
    assert meta["token_entropy"] > 0 and meta["clip_fraction"] == 0 and meta["grad_norm"] > 1e-3
    for k in (1, 2):  # the share of k-subsets of a group holding a reward-1 answer, averaged over groups
        shares = []
        for g in range(0, 8, 2):
            subsets = list(itertools.combinations(rewards[g : g + 2], k))
            shares.append(sum(any(r >= 1 for r in s) for s in subsets) / len(subsets))
        assert meta[f"pass@{k}"] == pytest.approx(statistics.fmean(shares))


def test_gradient_clipping_scales_the_update_to_max_grad_norm():
    start = tiny_llama()
    clipped, _, meta = run_step("grpo", skip=True, max_grad_norm=1e-3)
    moved = torch.linalg.vector_norm(
        torch.stack([(a - b).norm() for a, b in zip(clipped.parameters(), start.parameters())])
    )
    assert moved.item() == pytest.approx(0.1 * 1e-3, rel=1e-4)  # lr x the clipped norm (torch adds 1e-6 to the norm)


@pytest.mark.parametrize("method", ["noclip", "grpo", "gspo"])
def test_off_policy_step_with_the_sampling_policy_as_old_policy_matches_on_policy(method):
    """At the first step the old policy is the current one (w = 1): every reweighting gives the on-policy update."""
    model, tokenizer = tiny_llama(), word_tokenizer()
    from alignment.logprobs import get_response_log_probs
    from alignment.sft import tokenize_prompt_and_output

    batch = tokenize_prompt_and_output(PROMPTS, RESPONSES, tokenizer, prompt_special_tokens=False)
    with torch.no_grad():
        old = get_response_log_probs(model, batch["input_ids"], batch["labels"])["log_probs"]
    on_policy, _, _ = run_step("grpo", skip=True)
    off_policy, _, meta = run_step(
        "grpo", skip=True, importance_reweighting_method=method, old_log_probs=old, cliprange=0.2
    )
    assert meta["clip_fraction"] == 0
    for a, b in zip(on_policy.parameters(), off_policy.parameters()):
        assert torch.allclose(a, b, atol=1e-12, rtol=0)


def test_train_step_rejects_what_it_cannot_split():
    model, tokenizer = tiny_llama(), word_tokenizer()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    args = (model, tokenizer, optimizer)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        grpo_train_step(*args, 3, None, reward_fn, PROMPTS, RESPONSES, ["x"] * 8, 2)
    with pytest.raises(ValueError, match="normalization_constant"):
        grpo_train_step(*args, 4, None, reward_fn, PROMPTS, RESPONSES, ["x"] * 8, 2, loss_normalization="constant")
    with pytest.raises(ValueError, match="old_log_probs has shape"):
        grpo_train_step(
            *args, 4, None, reward_fn, PROMPTS, RESPONSES, ["x"] * 8, 2, importance_reweighting_method="noclip",
            old_log_probs=torch.zeros(8, 2), cliprange=0.2,
        )  # fmt: skip


# ------------------------------------------------------- the same variants as settings of scripts/train_grpo.py

SETTINGS = dict(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=4)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_variant_is_a_choice_of_settings(variant):
    from alignment.grpo.config import GRPOConfig, validate
    from alignment.grpo.objective import Objective

    v = VARIANTS[variant]
    aggregation = "sequence_mean" if v["loss_normalization"] == "sequence" else "constant"
    config = GRPOConfig(
        **SETTINGS,
        baseline=v["baseline"],
        advantage_normalizer=v["advantage_normalizer"],
        loss_aggregation=aggregation,
        sampling_max_tokens=6,
    )
    validate(config)
    rewards = [REWARD[r] for r in RESPONSES]
    objective = Objective.from_settings(config)
    expected = expected_advantages(rewards, 2, v["baseline"], v["advantage_normalizer"], config.advantage_eps)
    assert objective.advantages(torch.tensor(rewards)).tolist() == pytest.approx(expected, abs=1e-5)
    # constant: each response's sum / --sampling-max-tokens, then the mean over the step's rows: Z = B x G x L
    assert objective.constant == (6 if aggregation == "constant" else None)


def test_use_std_normalization_still_decides_when_no_normalizer_is_given():
    from alignment.grpo.config import GRPOConfig

    assert GRPOConfig(**SETTINGS).normalizer == "std"
    assert GRPOConfig(**SETTINGS, use_std_normalization=False).normalizer == "none"
    assert GRPOConfig(**SETTINGS, advantage_normalizer="mean").normalizer == "mean"
    assert GRPOConfig(**SETTINGS, use_std_normalization=False, advantage_normalizer="none").normalizer == "none"


@pytest.mark.parametrize(
    "overrides,flags",
    [
        (
            dict(use_std_normalization=False, advantage_normalizer="mean"),
            ("--advantage-normalizer mean", "--no-use-std"),
        ),
        (dict(advantage_estimator="rloo", baseline="none"), ("--baseline", "--advantage-estimator rloo")),
        (dict(advantage_estimator="reinforce_pp", advantage_normalizer="std"), ("--advantage-normalizer",)),
        (dict(loss_type="no_baseline", baseline="none"), ("--loss-type no_baseline", "--baseline")),
        (dict(baseline="sometimes"), ("--baseline 'sometimes'",)),
        (dict(advantage_normalizer="max"), ("--advantage-normalizer 'max'",)),
    ],
)
def test_contradicting_settings_are_refused_naming_the_flags(overrides, flags):
    from alignment.grpo.config import GRPOConfig, validate

    with pytest.raises(ValueError) as info:
        validate(GRPOConfig(**SETTINGS | overrides))
    assert all(flag in str(info.value) for flag in flags), str(info.value)


def test_the_script_takes_the_variants_as_flags_and_names_a_bad_one(captured, tmp_path):
    from typer.testing import CliRunner

    from scripts import train_grpo as script

    flags = ["--output-dir", str(tmp_path / "run"), "--baseline", "none", "--advantage-normalizer", "none"]
    result = CliRunner().invoke(script.app, [*flags, "--loss-aggregation", "constant"])
    assert result.exit_code == 0, result.output
    config = captured["config"]
    assert (config.baseline, config.normalizer, config.loss_aggregation) == ("none", "none", "constant")
    result = CliRunner().invoke(script.app, ["--advantage-normalizer", "median"])
    assert result.exit_code != 0 and "--advantage-normalizer" in result.output


# grpo_clip (with its ratios to the old log-probs) by default, reinforce_with_baseline under -m slow
@pytest.mark.parametrize("loss_type", [pytest.param("reinforce_with_baseline", marks=pytest.mark.slow), "grpo_clip"])
def test_the_scripts_learner_prunes_as_the_train_step_does(tiny_model_dir, tmp_path, loss_type, monkeypatch):
    """--prune-zero-advantage: rows of weight 0 never pass through the model in the GRPO learner either (microbatches
    of 4 rows: 5 rows to learn take 2, 4 take 1); the update and the loss are those of training every row."""
    import alignment.grpo.learner as learner_module
    from tests.test_zero_advantage import step, trainer_for

    pruned = trainer_for(tiny_model_dir, tmp_path / "pruned", True, loss_type=loss_type, prune_zero_advantage=True)
    full = trainer_for(tiny_model_dir, tmp_path / "full", False, loss_type=loss_type)
    scored, score_for_update = [], learner_module.score_for_update

    def counted(policy, micro, *args):
        scored.append(len(micro))
        return score_for_update(policy, micro, *args)

    monkeypatch.setattr(learner_module, "score_for_update", counted)
    start = [p.detach().clone() for p in full[1].policy.parameters()]
    for weights, microbatches in (
        ([0, 0, 0.5, -0.5, 0.7, 0, -1, 1], [4, 1]),
        ([0, 0, 0, 0, 1.5, -1.5, 0.2, -0.2], [4]),
    ):
        a = step(pruned, weights)
        assert scored == microbatches
        scored.clear()
        b = step(full, weights)
        scored.clear()
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        assert a["rows_without_backward"] == sum(w == 0 for w in weights) / 8
    for p, q, s in zip(pruned[1].policy.parameters(), full[1].policy.parameters(), start, strict=True):
        assert (p - q).abs().max() <= 1e-4 and (p - q).abs().mean() <= 1e-5 * (q - s).abs().mean()


def test_pruning_needs_the_skip():
    from alignment.grpo.config import GRPOConfig, validate

    with pytest.raises(ValueError, match="--prune-zero-advantage .* needs --skip-zero-advantage"):
        validate(GRPOConfig(**SETTINGS, prune_zero_advantage=True, skip_zero_advantage=False))
