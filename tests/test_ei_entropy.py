"""CS336 A5 asks to compare the entropy of the model's responses under GRPO with what expert iteration showed: EI
logs the same quantity as GRPO's `token_entropy` (exact per-token entropy, the same masking and averaging)."""

import copy

import pytest
import torch

from alignment.expert_iteration import rollout_entropy
from alignment.grpo.config import GRPOConfig
from alignment.grpo.learner import GRPOLearner
from alignment.prompts import format_prompt
from alignment.rollout.interface import Rollout
from tests.test_grpo_loop import QUESTIONS, TASK


@pytest.mark.parametrize("tiny_model", ["llama"], indirect=True)  # the computation is the architecture's forward
def test_expert_iteration_logs_the_entropy_grpo_logs_on_the_same_batch(tiny_model, tokenizer):
    policy = copy.deepcopy(tiny_model)  # the GRPO step below updates it
    with torch.no_grad():  # sharper logits: entropies that differ from token to token, so that averaging matters
        policy.get_output_embeddings().weight.mul_(10.0)
    config = GRPOConfig(rollout_batch_size=8, group_size=2, train_batch_size=8, gradient_accumulation_steps=4)
    prompts = [format_prompt(TASK.template, q) for q in QUESTIONS]
    # two responses per question, of several lengths (masking and the per-microbatch means matter), as sampled
    tokens = torch.randint(0, len(tokenizer), (8, 8), generator=torch.Generator().manual_seed(0)).tolist()
    rollouts = [Rollout(i // 2, "", tokens[i][:n], [-1.0] * n, "stop") for i, n in enumerate([8, 3, 5, 2, 7, 1, 4, 6])]

    ei = rollout_entropy(policy, tokenizer, prompts, rollouts, micro_batch_size=2)
    # not the mean over all response tokens at once: the four microbatches' means, averaged
    assert abs(ei - rollout_entropy(policy, tokenizer, prompts, rollouts, micro_batch_size=8)) > 1e-3
    learner = GRPOLearner(config, policy, tokenizer, TASK)
    scores = [{"reward": float(i % 3 == 0)} for i in range(len(rollouts))]
    row = learner.optimizer_step(learner.make_batch(list(range(len(QUESTIONS))), rollouts, scores))
    assert ei == pytest.approx(row["token_entropy"], rel=1e-5)
