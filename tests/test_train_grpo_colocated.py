"""UW CSE599-O A3 problem 5 (`uv run pytest -k test_train_grpo_colocated`): one colocated, on-policy GRPO step on our
own TransformerLM for the keyword task, through the starter's building blocks (alignment/grpo/colocated.py): a
Generator that samples and records log-probs, a Learner that updates, a driver loop. Unlike the course's example
tests (mocks and random losses), these check the step itself: the rewards are keyword_inclusion_reward_fn's, the
log-probs are the generator's model's, the advantages are the hand-derived group-normalized ones, the step changes
the weights and the generator receives them.

The policy is a student-style A1 model (A1 naming, A1's BPE files, loaded by our A1 loader): 2 layers, a byte-level
vocabulary with the words " cat", " dog" and " sun" merged, and a head that favours those three words, so that its
samples hold the keyword some of the time and the groups disagree."""

import json
import math
import statistics

import pytest
import torch

from alignment.data.keywords import TEMPLATES, keyword_inclusion_reward_fn, keyword_instruction
from alignment.data.task import Task
from alignment.grpo.colocated import ColocatedWorker, Learner, Trajectory, run_training
from alignment.grpo.config import GRPOConfig
from alignment.models.a1_checkpoint import A1Shape, a1_names
from alignment.models.bpe_tokenizer import bytes_to_unicode
from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.rollout.interface import Rollout

WORDS = ["cat", "dog", "sun"]
MERGES = [(b" ", w[:1].encode()) for w in WORDS]
MERGES += [(b" " + w[:1].encode(), w[1:2].encode()) for w in WORDS]
MERGES += [(b" " + w[:2].encode(), w[2:].encode()) for w in WORDS]
SHAPE = A1Shape(vocab_size=1 + 256 + len(MERGES), context_length=96, d_model=32, num_layers=2, num_heads=4, d_ff=64)


@pytest.fixture(scope="module")
def student_model(tmp_path_factory):
    """(TransformerLM, tokenizer) of an A1 folder written as a student's HW1 would be."""
    folder = tmp_path_factory.mktemp("a1-model")
    alphabet = bytes_to_unicode()
    vocab = {b"<|endoftext|>": 0} | {bytes([b]): 1 + b for b in range(256)}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    (folder / "vocab.json").write_text(
        json.dumps({"".join(alphabet[c] for c in t): i for t, i in vocab.items()}, ensure_ascii=False)
    )
    spelled = ["".join(alphabet[c] for c in a) + " " + "".join(alphabet[c] for c in b) for a, b in MERGES]
    (folder / "merges.txt").write_text("\n".join(spelled) + "\n")
    (folder / "model_config.json").write_text(json.dumps({"theta": 10000.0} | {
        k: getattr(SHAPE, k) for k in ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff")
    }))  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    weights = {}
    for key, (_, size) in a1_names(SHAPE).items():
        weights[key] = torch.ones(size) if len(size) == 1 else torch.randn(size, generator=generator) / size[-1] ** 0.5
    for word in WORDS:  # the head favours the three words: their logits spread 8 times wider than the others'
        weights["lm_head.weight"][vocab[b" " + word.encode()]] *= 8
    torch.save(weights, folder / "model.pt")
    return load_transformer_lm(folder)


def keyword_task() -> Task:
    questions = [keyword_instruction(TEMPLATES[i % len(TEMPLATES)], [w]) for i, w in enumerate(WORDS * 2)]
    return Task(questions, [[w] for w in WORDS * 2], "{question}", keyword_inclusion_reward_fn)


def handout_config(**changes) -> GRPOConfig:
    """UW's keyword settings (group 4, lr 5e-4, eps 1e-8, GRPO-Clip, std normalization), at temperature 1 so that
    the recorded log-probs are the model's own (no min_tokens: holding EOS back would renormalize them), with 3
    prompts a step and at most 4 new tokens."""
    settings = dict(
        task="keywords",
        backend="transformer_lm",
        group_size=4,
        learning_rate=5e-4,
        advantage_eps=1e-8,
        loss_type="grpo_clip",
        use_std_normalization=True,
        sampling_temperature=1.0,
        sampling_min_tokens=0,
        sampling_max_tokens=4,
        rollout_batch_size=12,
        train_batch_size=12,
        gradient_accumulation_steps=2,
        grader_workers=1,
    )
    return GRPOConfig(**settings | changes)


def test_compute_advantages_by_hand(student_model):
    """Group-normalized advantages with the unbiased std and eps 1e-8, derived by hand for two groups of 4."""
    model, tokenizer = student_model
    learner = Learner(handout_config(), model, tokenizer, keyword_task())

    def trajectory(rewards):
        rollouts = [Rollout(0, "x", [1], [0.0], "length") for _ in rewards]
        return Trajectory(0, ["p"] * 4, rollouts, [{"reward": r} for r in rewards], ["cat"])

    advantages = learner.compute_advantages([trajectory([1, 0, 0, 0]), trajectory([1, 1, 0, 0])])
    # [1,0,0,0]: mean 1/4, std sqrt((9/16 + 3/16) / 3) = 1/2; [1,1,0,0]: mean 1/2, std sqrt(1/3)
    half = 0.5 / math.sqrt(1 / 3)
    expected = [1.5, -0.5, -0.5, -0.5, half, half, -half, -half]
    assert advantages.tolist() == pytest.approx(expected, rel=1e-6)
    same = learner.compute_advantages([trajectory([1, 1, 1, 1])])
    assert same.tolist() == [0.0] * 4  # a group that agrees teaches nothing


def test_one_colocated_on_policy_step(student_model):
    model, tokenizer = student_model
    task = keyword_task()
    worker = ColocatedWorker(handout_config(), model, tokenizer, task)
    assert worker.model is not worker.grpo.policy  # the generator keeps a copy of its own
    before = worker.get_weights()
    generated = worker.generate_trajectories([0, 1, 2], step=0)

    # rewards are keyword_inclusion_reward_fn's verdicts on the responses, for each prompt's keyword
    for t in generated:
        assert len(t.responses) == len(t.log_probs) == 4
        assert t.rewards == [keyword_inclusion_reward_fn(r, [WORDS[t.prompt_index]])["reward"] for r in t.responses]
    assert any(len(set(t.rewards)) > 1 for t in generated), [t.rewards for t in generated]  # groups disagree

    # the recorded log-probs are the generator's model's own (temperature 1), token by token
    for t in generated:
        prompt_ids = tokenizer(t.prompts[0])["input_ids"]
        for rollout in t.rollouts:
            ids = torch.tensor([prompt_ids + rollout.token_ids])
            with torch.no_grad():
                log_p = worker.model(ids)[0, len(prompt_ids) - 1 : -1].double().log_softmax(-1)
            own = log_p.gather(-1, torch.tensor(rollout.token_ids)[:, None])[:, 0]
            assert own.tolist() == pytest.approx(rollout.logprobs, abs=1e-5)

    # the advantages are each group's (r - mean) / (unbiased std + 1e-8)
    advantages = worker.compute_advantages(generated).tolist()
    for g, t in enumerate(generated):
        mean, spread = statistics.mean(t.rewards), statistics.stdev(t.rewards)
        expected = [(r - mean) / (spread + 1e-8) for r in t.rewards]
        assert advantages[4 * g : 4 * g + 4] == pytest.approx(expected, abs=1e-6)

    # one step on the same prompts (the same seed samples the same responses): the weights change, and the
    # generator, which kept the old ones until then, gets exactly the learner's new ones
    row = worker.training_step([0, 1, 2])
    assert [t.responses for t in worker.last_trajectories] == [t.responses for t in generated]
    assert row["step"] == 1 and row["num_trajectories"] == 3 and math.isfinite(row["loss"])
    assert row["avg_reward"] == pytest.approx(sum(sum(t.rewards) for t in generated) / 12)
    after = worker.get_weights()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    generator, learner = worker.model.state_dict(), worker.grpo.policy.state_dict()
    assert all(torch.equal(generator[k], learner[k]) for k in learner)  # synced ...
    assert all(generator[k].data_ptr() != learner[k].data_ptr() for k in learner)  # ... into tensors of its own
    assert worker.get_statistics()["generator_version"] == worker.grpo.step == 1
    assert all(row[f"time_{phase}_s"] > 0 for phase in ("rollout", "train", "weight_sync"))  # the stages profiled
    worker.update_policy(generated)  # a second update: until the sync, the generator keeps version 1
    assert any(not torch.equal(worker.model.state_dict()[k], v) for k, v in worker.grpo.policy.state_dict().items())


def test_the_driver_runs_steps_and_reports(student_model):
    model, tokenizer = student_model
    worker = ColocatedWorker(handout_config(), model, tokenizer, keyword_task())
    log = run_training(worker, num_steps=2)
    assert [row["step"] for row in log.steps] == [1, 2]
    assert log.statistics["step_count"] == 2 and log.statistics["generator_version"] == 2
    assert log.statistics["model_parameters"] == sum(p.numel() for p in model.parameters())
    with pytest.raises(ValueError, match="on-policy"):
        ColocatedWorker(handout_config(epochs_per_rollout_batch=2), model, tokenizer, keyword_task())
