"""The GRPO loop on a tiny random model: every loss on- and off-policy, the asserts, KL, and resume."""

import json
import math
import zlib
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from alignment.data.task import Task
from alignment.grading.parallel import ParallelGrader
from alignment.grpo.batch import collate
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import GRPOSampler, rollout_sampling
from alignment.grpo.scoring import score
from alignment.grpo_run import sampler_and_learner, train_grpo
from alignment.rollout.hf_engine import HFRolloutEngine


def hash_reward(response: str, truth: str) -> dict[str, float]:
    """Varies within a group (a hash of the text), so advantages are non-zero and every loss moves the parameters."""
    r = (zlib.crc32(response.encode()) % 5) / 4
    return {"format_reward": 1.0, "answer_reward": r, "reward": r}


QUESTIONS = ["What is 1 + 1?", "Name a fruit.", "Count to three.", "Say hello."]
TASK = Task(QUESTIONS, ["2", "apple", "3", "hello"], "Q: {question}\nA:", hash_reward)


def tiny_config(model_dir, tmp_path, **overrides) -> GRPOConfig:
    base = GRPOConfig(
        model=str(model_dir),
        n_grpo_steps=1,
        learning_rate=1e-3,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        eval_every=1,
        n_eval_examples=4,
        checkpoint_every=1,
        grader_workers=1,
        backend="hf",
        output_dir=tmp_path / "run",
        prompt="question_only",
    )
    return replace(base, **overrides)


def grpo_parts(config: GRPOConfig, policy, tokenizer, engine, task: Task = TASK) -> tuple[GRPOSampler, GRPOLearner]:
    """The sampler (grading in this process) and the learner of a GRPO run over `engine`, as train_grpo builds them."""
    return sampler_and_learner(config, policy, tokenizer, engine, task, ParallelGrader(task.reward_fn, 1))


LOSSES = ["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip"]


# Every loss once by default: the baselines on-policy, the two ratio losses off-policy, where their ratios leave 1
# (on-policy grpo_clip updates as reinforce_with_baseline does: a test below checks it); the other four under -m slow
ONE_STEP_BY_DEFAULT = {
    ("no_baseline", False),
    ("reinforce_with_baseline", False),
    ("grpo_clip", True),
    ("grpo_no_clip", True),
}


@pytest.mark.parametrize(
    "off_policy,loss_type",
    [
        pytest.param(
            off_policy,
            loss_type,
            id=f"{'off_policy' if off_policy else 'on_policy'}-{loss_type}",
            marks=() if (loss_type, off_policy) in ONE_STEP_BY_DEFAULT else pytest.mark.slow,
        )
        for off_policy in (False, True)
        for loss_type in LOSSES
    ],
)
def test_one_step_for_every_loss(tiny_model_dir, tmp_path, loss_type, off_policy):
    extra = (
        {"epochs_per_rollout_batch": 2, "train_batch_size": 2, "gradient_accumulation_steps": 1} if off_policy else {}
    )
    config = tiny_config(tiny_model_dir, tmp_path, loss_type=loss_type, kl_reference=True, kl_prev=True, **extra)
    from alignment.models.loading import load_model_and_tokenizer

    initial = load_model_and_tokenizer(str(tiny_model_dir))[0].state_dict()
    rows = train_grpo(config, TASK, TASK)
    assert len(rows) == (4 if off_policy else 1)  # epochs x (rollout / train batch) optimizer steps
    # a 2-row off-policy batch whose advantages are all 0 (a group of equal rewards) has no gradient
    assert any(row["grad_norm"] > 0 for row in rows)
    for row in rows:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
        assert row["kl_ref_k1"] == 0.0 and row["kl_ref_k3"] == 0.0  # step 0: policy == reference
        assert row["kl_ref_k1_sum"] == 0.0 and "kl_prev_k1_sum" in row  # UW's Eq. 8 beside the per-token means
        assert ("clip_fraction" in row) == (loss_type == "grpo_clip")
        assert {"time_rollout_s", "time_grading_s", "time_train_s", "time_weight_sync_s"} <= set(row)
    assert rows[0]["kl_prev_k3"] > 0  # the update moved the policy
    final = load_file(config.output_dir / "policy" / "model.safetensors")  # the trained policy, a standard model folder
    assert any(not torch.equal(initial[k], final[k]) for k in final)
    lines = [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["grpo_step"] for line in lines if "eval_reward" in line] == [0, 1]


def test_old_log_probs_carry_no_gradient(tiny_model, tokenizer):
    engine = HFRolloutEngine(tiny_model, tokenizer, progress=False)
    config = GRPOConfig(
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=8,
        kl_reference=False,
    )  # a random model rarely stops: keep rollouts short
    learner = GRPOLearner(config, tiny_model, tokenizer, TASK)
    rollouts = engine.generate(QUESTIONS[:2], 2, rollout_sampling(config, 0))
    batch = collate(learner.prompt_ids[:2], rollouts, torch.ones(4), torch.ones(4), tokenizer.pad_token_id)
    old = score(tiny_model, batch, 2)
    assert not old.requires_grad and old.shape == batch.labels.shape
    assert (old[batch.response_mask] < 0).all()


@pytest.mark.parametrize(
    "overrides,flags",
    [
        ({"rollout_batch_size": 6, "group_size": 4}, "--rollout-batch-size (6) must be divisible by --group-size (4)"),
        (
            {"train_batch_size": 6, "gradient_accumulation_steps": 4},
            "--train-batch-size (6) must be divisible by --gradient-accumulation-steps (4)",
        ),
        (
            {"train_batch_size": 4, "group_size": 8, "rollout_batch_size": 8, "gradient_accumulation_steps": 1},
            "--train-batch-size (4) must be >= --group-size (8)",
        ),
        (
            {"rollout_batch_size": 12, "group_size": 4, "train_batch_size": 8, "gradient_accumulation_steps": 1},
            "--rollout-batch-size (12) must be a multiple of --train-batch-size (8)",
        ),
        ({"loss_type": "ppo"}, "--loss-type 'ppo'"),
        ({"loss_type": "grpo_clip", "cliprange": 0.0}, "--loss-type grpo_clip needs --cliprange > 0"),
        ({"sampling_min_tokens": 9, "sampling_max_tokens": 8}, "--sampling-min-tokens (9)"),
        ({"loss_aggregation": "sum"}, "--loss-aggregation 'sum'"),
        ({"n_grpo_steps": 0}, "--n-grpo-steps must be >= 1"),
    ],
)
def test_asserts_name_flags_and_values(overrides, flags):
    config = replace(
        GRPOConfig(rollout_batch_size=8, group_size=4, train_batch_size=8, gradient_accumulation_steps=4), **overrides
    )
    with pytest.raises(ValueError) as info:
        validate(config)
    assert flags in str(info.value)


class CrashOnStep:
    """A reward that fails while grading the third step's rollouts: a run killed mid-step."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, response: str, truth: str) -> dict[str, float]:
        self.calls += 1
        if self.calls > 4 + 2 * (4 + 4):  # step-0 eval, then two steps each graded and validated (4 each)
            raise KeyboardInterrupt("killed")
        return hash_reward(response, truth)


def test_resume_reproduces_an_uninterrupted_run(tiny_model_dir, tmp_path):
    straight = tiny_config(
        tiny_model_dir, tmp_path / "a", n_grpo_steps=3, loss_type="grpo_clip", epochs_per_rollout_batch=2
    )
    expected = train_grpo(straight, TASK, TASK)

    interrupted = replace(straight, output_dir=tmp_path / "b" / "run")
    crashing = Task(TASK.questions, TASK.truths, TASK.template, CrashOnStep())
    with pytest.raises(KeyboardInterrupt):
        train_grpo(interrupted, crashing, crashing)
    assert json.loads((interrupted.output_dir / "checkpoint" / "COMPLETE").read_text()) == 2
    resumed = train_grpo(interrupted, TASK, TASK, resume=True)

    def strip(rows):
        return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in rows]

    assert strip(resumed) == strip([row for row in expected if row["grpo_step"] == 3])
    logged = [json.loads(line) for line in (interrupted.output_dir / "metrics.jsonl").read_text().splitlines()]
    straight_logged = [json.loads(line) for line in (straight.output_dir / "metrics.jsonl").read_text().splitlines()]
    assert strip(logged) == strip(straight_logged)


def test_resume_refuses_incomplete_or_foreign_checkpoints(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path)
    with pytest.raises(ValueError, match="no complete checkpoint"):
        train_grpo(config, TASK, TASK, resume=True)
    train_grpo(config, TASK, TASK)
    with pytest.raises(ValueError, match=r"another configuration \(learning_rate: checkpoint 0.001 vs now 0.002\)"):
        train_grpo(replace(config, learning_rate=2e-3, n_grpo_steps=2), TASK, TASK, resume=True)
    with pytest.raises(ValueError, match="holds an earlier run .*--resume.*--overwrite"):
        train_grpo(config, TASK, TASK)  # a fresh run must not silently replace the finished one
    (config.output_dir / "checkpoint" / "COMPLETE").unlink()
    with pytest.raises(ValueError, match="no complete checkpoint"):
        train_grpo(replace(config, n_grpo_steps=2), TASK, TASK, resume=True)


def test_on_policy_grpo_clip_updates_exactly_like_reinforce_with_baseline(tiny_model_dir, tmp_path):
    """Ratio 1 on-policy: clipping never binds and the gradient is A * grad log pi, as in REINFORCE."""
    states = {}
    for loss_type in ("grpo_clip", "reinforce_with_baseline"):
        config = tiny_config(
            tiny_model_dir, tmp_path / loss_type, loss_type=loss_type, kl_prev=False, kl_reference=False
        )
        rows = train_grpo(config, TASK, TASK)
        states[loss_type] = load_file(config.output_dir / "policy" / "model.safetensors")
        if loss_type == "grpo_clip":
            assert rows[0]["clip_fraction"] == 0.0 and "time_old_logprob_s" in rows[0]
    for name, tensor in states["grpo_clip"].items():
        assert torch.allclose(tensor, states["reinforce_with_baseline"][name], atol=1e-6), name


@pytest.mark.slow  # 4-10 s of a run; the rollouts file of validations is checked by default
def test_training_rollouts_are_logged_every_n_steps(tiny_model_dir, tmp_path):
    """--log-train-rollouts-every 2: every rollout of steps 2 and 4, with its question, truth and rewards, beside the
    validations' examples in rollouts.jsonl."""
    config = tiny_config(tiny_model_dir, tmp_path, n_grpo_steps=4, log_train_rollouts_every=2, eval_every=4)
    train_grpo(config, TASK, TASK)
    lines = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    train = [line for line in lines if line["kind"] == "train"]
    assert [line["grpo_step"] for line in train] == [2] * 4 + [4] * 4  # rollout_batch_size 4 at each
    for line in train:
        truth = TASK.truths[QUESTIONS.index(line["question"])]
        assert line["ground_truth"] == truth and line["reward"] == hash_reward(line["response"], truth)["reward"]
    assert {line["kind"] for line in lines} == {"train", "eval"}
    with pytest.raises(ValueError, match="--log-train-rollouts-every must be >= 1, got 0"):
        validate(replace(config, log_train_rollouts_every=0))
