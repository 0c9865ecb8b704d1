"""UW CSE599-O A3's colocated, synchronous, on-policy GRPO (v2 problem 5) under the names its starter
`cse599o_alignment/train_grpo_ray_colocated.py` gives, built from the library's parts:

    Trajectory       one prompt's G responses: their texts, sampled tokens, per-token log-probs and rewards
    Generator        its own copy of the policy (the handout's "second copy of the model just for generation") and a
                     rollout engine over it; `generate_trajectories` (the handout's generate_responses) samples G
                     responses per prompt, records each token's log-prob and scores them with the task's reward
                     function (keyword_inclusion_reward_fn for the keyword task); `update` loads new weights
    Learner          the training copy, a GRPOLearner: `compute_advantages` (group-normalized), `update_policy` (one
                     optimizer step: grpo_microbatch_train_step per microbatch, gradient clipping, AdamW)
    ColocatedWorker  both on one device: `training_step` generates, updates, then copies the learner's weights into
                     the generator, timing each stage (the profile v2 problem 5 asks for); `get_statistics`
    run_training     the driver: each step a round of prompts, one training_step on them

Plain classes: `ray.remote(ColocatedWorker)` makes the starter's actor of it. The library's own Ray strategies are
alignment/ray/ (whose colocated worker also keeps a generation copy).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from alignment.data.task import Task
from alignment.grpo.config import GRPOConfig
from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import rollout_sampling
from alignment.models.lora import frozen_copy
from alignment.models.transformer_lm import TransformerLM
from alignment.prompts import format_prompt
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import Rollout
from alignment.rollout.lm_engine import TransformerLMRolloutEngine
from alignment.run.setup import PhaseTimer, PromptOrder


@dataclass
class Trajectory:
    """Prompt `prompt_index`'s G responses, as the starter's Trajectory(prompts, responses, rewards, log_probs)."""

    prompt_index: int
    prompts: list[str]  # the formatted prompt, once per response
    rollouts: list[Rollout]
    scores: list[dict[str, float]]
    truth: Any  # what the reward function got: a keyword list, an answer
    values: list[float] | None = None  # the starter's optional value estimates; GRPO has none

    @property
    def responses(self) -> list[str]:
        return [r.text for r in self.rollouts]

    @property
    def log_probs(self) -> list[list[float]]:
        """Each response's per-token log-probs under the generator's sampling distribution."""
        return [r.logprobs for r in self.rollouts]

    @property
    def rewards(self) -> list[float]:
        return [s["reward"] for s in self.scores]


class Generator:
    """A copy of the policy that only generates, and the rollout engine sampling from it."""

    def __init__(
        self, config: GRPOConfig, policy: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task
    ) -> None:
        self.config, self.task = config, task
        self.model = frozen_copy(policy)
        engine = TransformerLMRolloutEngine if isinstance(self.model, TransformerLM) else HFRolloutEngine
        self.engine = engine(self.model, tokenizer, progress=False)
        self.version = 0

    def generate_trajectories(self, prompt_indices: Sequence[int], step: int = 0) -> list[Trajectory]:
        """G responses to each prompt (with their token log-probs), scored by the task's reward function."""
        prompts = [format_prompt(self.task.template, self.task.questions[i]) for i in prompt_indices]
        group = self.config.group_size
        self.model.eval()
        rollouts = self.engine.generate(prompts, group, rollout_sampling(self.config, step))
        trajectories = []
        for position, index in enumerate(prompt_indices):
            mine = rollouts[position * group : (position + 1) * group]
            truth = self.task.truths[index]
            scores = [self.task.reward_fn(r.text, truth) for r in mine]
            trajectories.append(Trajectory(index, [prompts[position]] * group, mine, scores, truth))
        return trajectories

    generate_responses = generate_trajectories  # the handout's name for it

    def update(self, weights: dict[str, torch.Tensor], version: int) -> None:
        """Load the learner's weights (a copy: the generator never shares tensors with the learner)."""
        self.model.load_state_dict(weights)
        self.version = version


class Learner:
    """The training copy of the policy and its GRPO updates."""

    def __init__(
        self, config: GRPOConfig, policy: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task
    ) -> None:
        if config.off_policy:
            raise ValueError(
                "the colocated worker is on-policy: one optimizer step per rollout batch (--epochs-per-rollout-batch "
                "1, --train-batch-size = --rollout-batch-size)"
            )
        self.grpo = GRPOLearner(config, policy, tokenizer, task)

    def compute_advantages(self, trajectories: Sequence[Trajectory]) -> torch.Tensor:
        """(G * len(trajectories),) advantages, prompt-major: per group (r - mean) / (std + eps), or r - mean."""
        rollouts = [r for t in trajectories for r in t.rollouts]
        scores = [s for t in trajectories for s in t.scores]
        objective = self.grpo.objective
        return objective.advantages(objective.rewards(rollouts, scores, self.grpo.step + 1))

    def update_policy(self, trajectories: Sequence[Trajectory]) -> float:
        """One optimizer step on these trajectories; returns its loss."""
        rollouts = [
            Rollout(position, r.text, r.token_ids, r.logprobs, r.finish_reason)
            for position, t in enumerate(trajectories)
            for r in t.rollouts
        ]
        scores = [s for t in trajectories for s in t.scores]
        batch = self.grpo.make_batch([t.prompt_index for t in trajectories], rollouts, scores)
        return self.grpo.update(batch)[-1]["loss"]

    def get_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.grpo.policy.state_dict().items()}


class ColocatedWorker(Generator, Learner):
    """A Generator and a Learner on one device, each with its own copy of the policy."""

    def __init__(
        self, config: GRPOConfig, policy: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task
    ) -> None:
        Learner.__init__(self, config, policy, tokenizer, task)
        Generator.__init__(self, config, policy, tokenizer, task)
        self.step_count = 0
        self.last_trajectories: list[Trajectory] = []

    def training_step(self, prompt_indices: Sequence[int]) -> dict[str, float]:
        """Generate, take one optimizer step, hand the new weights to the generator; with each stage's seconds
        (time_rollout_s, time_train_s, time_weight_sync_s)."""
        timer = PhaseTimer()
        with timer("rollout"):
            trajectories = self.generate_trajectories(prompt_indices, self.step_count)
        with timer("train"):
            loss = self.update_policy(trajectories)
        with timer("weight_sync"):
            self.update(self.get_weights(), self.grpo.step)
        self.step_count += 1
        self.last_trajectories = trajectories
        rewards = [r for t in trajectories for r in t.rewards]
        return {
            "step": self.step_count,
            "loss": loss,
            "num_trajectories": len(trajectories),
            "avg_reward": sum(rewards) / len(rewards),
        } | {f"time_{phase}_s": seconds for phase, seconds in timer.seconds.items()}

    def get_statistics(self) -> dict[str, int]:
        return {
            "step_count": self.step_count,
            "model_parameters": sum(p.numel() for p in self.grpo.policy.parameters()),
            "generator_version": self.version,
        }


@dataclass
class TrainingLog:
    steps: list[dict[str, float]] = field(default_factory=list)
    statistics: dict[str, int] = field(default_factory=dict)


def run_training(worker: ColocatedWorker, num_steps: int, seed: int = 0) -> TrainingLog:
    """The driver: each step n_prompts_per_rollout_batch prompts (a seeded order over the task), one training_step."""
    config = worker.config
    order = PromptOrder(len(worker.task.questions), seed)
    log = TrainingLog()
    for _ in range(num_steps):
        log.steps.append(worker.training_step(order.take(config.n_prompts_per_rollout_batch)))
    log.statistics = worker.get_statistics()
    return log
