"""On-policy distillation: the per-token advantage on hand-derived log-probs, its mixing with the task's advantage,
the tokenizer check (before any model loads), a real GRPO step whose advantages and loss are the formula's, the
teacher in the memory plan, and the teacher held by a Ray learner actor."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from alignment.advantages import normalize_group_rewards
from alignment.distillation import distillation_advantages
from alignment.grpo.batch import RolloutBatch
from alignment.grpo.config import validate
from alignment.grpo.objective import Objective
from alignment.grpo.scoring import rows_needing_backward, score
from alignment.grpo_run import train_grpo
from alignment.models.loading import SMOLLM2, load_model_and_tokenizer
from alignment.models.teacher import check_teacher_tokenizer
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.run.memory_plan import grpo_workload, model_shape, policy_bytes
from tests.conftest import tiny_config as tiny_model_config
from tests.test_grpo_loop import TASK, grpo_parts
from tests.test_grpo_loop import tiny_config as grpo_config

# two responses: row 0's first three labels are response tokens, row 1's middle two
MASK = torch.tensor([[True, True, True, False], [False, True, True, False]])
TEACHER = torch.tensor([[-1.0, -0.5, -2.0, 0.0], [-0.1, -3.0, -0.25, 0.0]])
STUDENT = torch.tensor([[-1.5, -0.5, -1.0, -9.0], [-0.4, -1.0, -0.75, -7.0]])


def test_the_advantage_is_the_teachers_log_prob_minus_the_students_on_response_tokens():
    student = STUDENT.clone().requires_grad_()
    advantages = distillation_advantages(TEACHER, student, MASK)
    # by hand: -1.0 - -1.5 = 0.5, -0.5 - -0.5 = 0, -2.0 - -1.0 = -1.0; -3.0 - -1.0 = -2.0, -0.25 - -0.75 = 0.5
    expected = torch.tensor([[0.5, 0.0, -1.0, 0.0], [0.0, -2.0, 0.5, 0.0]])
    assert torch.equal(advantages, expected)
    assert not advantages.requires_grad  # a reward: no gradient flows through it into the student


def test_the_task_advantage_is_mixed_in_at_its_weight_on_response_tokens_only():
    task = torch.tensor([[1.0], [-0.5]])
    advantages = distillation_advantages(TEACHER, STUDENT, MASK, task, reward_weight=0.5)
    # 0.5 * 1.0 = 0.5 added to row 0's tokens, 0.5 * -0.5 = -0.25 to row 1's; masked positions stay 0
    expected = torch.tensor([[1.0, 0.5, -0.5, 0.0], [0.0, -2.25, 0.25, 0.0]])
    assert torch.equal(advantages, expected)
    assert torch.equal(
        distillation_advantages(TEACHER, STUDENT, MASK, task, 0.0), distillation_advantages(TEACHER, STUDENT, MASK)
    )


def test_rows_whose_every_token_advantage_is_zero_skip_the_backward():
    c = replace(grpo_config(".", Path(".")), teacher="t")
    objective = Objective.from_settings(c)
    advantages = torch.tensor([[0.0, 0.3, 0.0], [0.0, 0.0, 0.0], [-0.2, 0.0, 0.0]])
    batch = RolloutBatch(
        input_ids=torch.zeros(3, 3, dtype=torch.long),
        labels=torch.zeros(3, 3, dtype=torch.long),
        response_mask=torch.ones(3, 3, dtype=torch.bool),
        raw_rewards=torch.zeros(3, 1),
        advantages=advantages,
        rollout_log_probs=torch.zeros(3, 3),
    )
    assert rows_needing_backward(objective.row_weights(batch), None).tolist() == [True, False, True]
    assert torch.equal(batch.select(torch.tensor([2])).advantages, advantages[2:])  # trimmed with the tokens


@pytest.fixture(scope="module")
def other_vocab_dir(tmp_path_factory, tokenizer):
    """A tiny Llama whose tokenizer is SmolLM2's plus one added token: one id more, as an extended vocabulary has."""
    folder = tmp_path_factory.mktemp("other-vocab")
    extended = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    extended.add_tokens(["<tool_call_extra>"])
    LlamaForCausalLM(tiny_model_config("llama", len(extended), extended.pad_token_id)).save_pretrained(folder)
    extended.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory, tokenizer):
    """A second tiny Llama on SmolLM2's tokenizer, with weights of another seed than tiny_model_dir's."""
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("teacher")
    LlamaForCausalLM(tiny_model_config("llama", len(tokenizer), tokenizer.pad_token_id)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_teacher_with_another_tokenizer_is_refused_naming_both(tiny_model_dir, other_vocab_dir):
    with pytest.raises(ValueError) as caught:
        check_teacher_tokenizer(str(tiny_model_dir), str(other_vocab_dir))
    message = str(caught.value)
    assert f"--teacher {other_vocab_dir}" in message and f"--model {tiny_model_dir}" in message
    assert "vocabularies of 49152 and 49153 tokens" in message


def test_a_teacher_with_the_same_tokenizer_passes_by_folder_or_loader_name(tiny_model_dir, teacher_dir):
    check_teacher_tokenizer(str(tiny_model_dir), str(teacher_dir))
    check_teacher_tokenizer(str(tiny_model_dir), SMOLLM2)  # the packaged SmolLM2 shares the tiny models' tokenizer


@pytest.mark.parametrize(
    ("overrides", "flag"),
    [
        ({"distill_reward_weight": 0.5}, "--distill-reward-weight (0.5) applies only with --teacher"),
        ({"teacher": "T", "distill_reward_weight": -1.0}, "--distill-reward-weight must be a finite number >= 0"),
        ({"teacher": "T", "loss_type": "no_baseline"}, "--teacher needs advantages"),
        ({"teacher": "/nonexistent/teacher"}, "--teacher /nonexistent/teacher: cannot read its tokenizer"),
    ],
)
def test_distillation_flags_are_checked(tiny_model_dir, tmp_path, overrides, flag):
    with pytest.raises(ValueError, match=flag.replace("(", r"\(").replace(")", r"\)")):
        validate(replace(grpo_config(tiny_model_dir, tmp_path), **overrides))


def test_a_run_with_another_tokenizers_teacher_stops_before_anything_loads(tiny_model_dir, other_vocab_dir, tmp_path):
    config = grpo_config(tiny_model_dir, tmp_path, teacher=str(other_vocab_dir))
    with pytest.raises(ValueError, match="has another tokenizer than --model"):
        train_grpo(config, TASK, TASK)
    assert not config.output_dir.exists()  # refused before the run folder (written before the policy loads)


def test_a_grpo_step_with_a_teacher_trains_on_the_formulas_advantages(tiny_model_dir, teacher_dir, tmp_path):
    """A real step on tiny random models: advantages 0.5 * group-normalized reward + (teacher - student) per token,
    the student's and teacher's log-probs scored apart here, and the logged loss is -mean_i mean_t A_it log pi_it."""
    config = grpo_config(tiny_model_dir, tmp_path, teacher=str(teacher_dir), distill_reward_weight=0.5)
    validate(config)
    policy, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    sampler, learner = grpo_parts(config, policy, tokenizer, HFRolloutEngine(policy, tokenizer, progress=False))
    drawn = sampler.draw(0)
    batch = learner.make_batch(drawn.questions, drawn.rollouts, drawn.scores)
    student = score(policy, batch, 4)  # before the update: the policy that sampled
    teacher = score(load_model_and_tokenizer(str(teacher_dir))[0].eval(), batch, 4)
    task = normalize_group_rewards(batch.raw_rewards.flatten(), 2, config.advantage_eps, True).view(-1, 1)
    mask = batch.response_mask
    expected = torch.where(mask, 0.5 * task + teacher - student, 0.0)
    (row,) = learner.update(batch)
    assert torch.allclose(batch.advantages, expected, atol=1e-6)
    assert (batch.advantages[mask] != 0).all() and (batch.advantages[~mask] == 0).all()
    per_row = (-expected * student * mask).sum(dim=1) / mask.sum(dim=1)
    assert row["loss"] == pytest.approx(per_row.mean().item(), abs=1e-5)
    reverse_kl = ((student - teacher) * mask).sum() / mask.sum()
    assert row["teacher_kl_k1"] == pytest.approx(reverse_kl.item(), abs=1e-6) and row["teacher_kl_k1"] != 0


@pytest.mark.slow  # the whole loop (validations, checkpoint, policy/): 10 s here; the steps above cover the learner
def test_a_run_taught_by_its_own_weights_has_zero_advantage_and_keeps_them(tiny_model_dir, tmp_path):
    """Teacher = student: every token's advantage is exactly 0 (the same scoring code on the same weights), so the
    policy does not move, while a GRPO run on the same rollouts would (hash rewards vary within groups)."""
    config = grpo_config(tiny_model_dir, tmp_path, teacher=str(tiny_model_dir), kl_reference=False, kl_prev=True)
    (row,) = train_grpo(config, TASK, TASK)
    assert row["teacher_kl_k1"] == 0.0 and row["teacher_kl_k3"] == 0.0
    assert row["loss"] == 0.0 and row["grad_norm"] == 0.0 and row["kl_prev_k3"] == 0.0
    assert row["rows_without_backward"] > 0 and "time_teacher_logprob_s" in row


def test_the_memory_plan_counts_the_teacher(tiny_model_dir, teacher_dir):
    config = grpo_config(tiny_model_dir, Path("."), teacher=str(teacher_dir), backend="hf")
    shape = model_shape(str(tiny_model_dir))
    work = grpo_workload(config, shape, prompt_tokens=16)
    count = sum(p.numel() for p in LlamaForCausalLM.from_pretrained(teacher_dir).parameters())
    assert work.teacher_parameters == count
    with_teacher, without = policy_bytes(shape, work), policy_bytes(shape, replace(work, teacher_parameters=0))
    assert with_teacher["teacher"] == count * work.dtype_bytes and "teacher" not in without


def test_the_ray_learner_actor_class_loads_and_uses_the_teacher(tiny_model_dir, teacher_dir, tmp_path):
    """The Learner actor's own code (a plain class that Ray makes remote) with a teacher: its update's KL to the
    teacher is the one scored apart here."""
    from alignment.ray.actors import Learner
    from alignment.ray.config import RayGRPOConfig

    config = RayGRPOConfig(**vars(grpo_config(tiny_model_dir, tmp_path, teacher=str(teacher_dir))))
    actor = Learner(config, TASK, "cpu", 1)
    assert actor.learner.teacher is not None and not actor.learner.teacher.training
    policy = actor.learner.policy
    engine = HFRolloutEngine(policy, actor.learner.tokenizer, progress=False)
    sampler, _ = grpo_parts(config, policy, actor.learner.tokenizer, engine)
    drawn = sampler.draw(0)
    batch = actor.learner.make_batch(drawn.questions, drawn.rollouts, drawn.scores)
    student, teacher = score(policy, batch, 4), score(actor.learner.teacher, batch, 4)
    reverse_kl = (((student - teacher) * batch.response_mask).sum() / batch.response_mask.sum()).item()
    (row,) = actor.learn(drawn.questions, drawn.rollouts, drawn.scores).rows
    assert row["teacher_kl_k1"] == pytest.approx(reverse_kl, abs=1e-6) and reverse_kl != 0


@pytest.mark.slow  # Ray's start and two actors' model loads: about half a minute
def test_a_ray_learner_actor_holds_the_teacher(cluster, tiny_model_dir, tmp_path):
    """colocated-sync on Ray, taught by the policy's own weights: the worker's learner scores the teacher, so every
    step's advantage, loss and KL are exactly 0 (GRPO's would not be: the rewards vary within groups)."""
    from alignment.ray.driver import train_grpo_ray
    from tests.test_ray_strategies import TASK as RAY_TASK
    from tests.test_ray_strategies import config_for, logged

    config = config_for(tiny_model_dir, tmp_path, n_grpo_steps=2, teacher=str(tiny_model_dir))
    train_grpo_ray(config, RAY_TASK, RAY_TASK)
    rows = [row for row in logged(config) if "loss" in row]
    assert [row["grpo_step"] for row in rows] == [1, 2]
    assert all(row["teacher_kl_k1"] == 0.0 and row["loss"] == 0.0 and row["grad_norm"] == 0.0 for row in rows)


@pytest.mark.slow  # a vLLM engine on the CPU: about a minute
def test_vllm_rollouts_distill_with_the_learners_own_student_log_probs(tokenizer, tmp_path):
    """Sampled by vLLM, taught by the policy's own weights: the engine's log-probs differ from the trainer's (the
    rollout mismatch), yet the advantage is exactly 0, since the student's log-probs are the learner's, scored by the
    same code as the teacher's."""
    torch.manual_seed(0)
    folder = tmp_path / "head-dim-64"  # vLLM's CPU attention has no kernel for the tiny models' head_dim 16
    shape = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1}
    LlamaForCausalLM(tiny_model_config("llama", len(tokenizer), tokenizer.pad_token_id, **shape)).save_pretrained(
        folder
    )
    tokenizer.save_pretrained(folder)
    config = grpo_config(folder, tmp_path, backend="vllm", teacher=str(folder))
    (row,) = train_grpo(config, TASK, TASK)
    assert row["rollout_logprob_diff_max"] > 0
    assert row["teacher_kl_k1"] == 0.0 and row["loss"] == 0.0 and row["grad_norm"] == 0.0
