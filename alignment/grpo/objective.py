"""What a GRPO update optimizes, resolved once from the settings: the reward shaping, the advantage estimator, the
policy-gradient loss with its clip range, the rollout correction and the loss aggregation.

The learner (alignment/grpo/learner.py) calls `rewards`, `advantages`, `row_weights` and `microbatch_loss` and
nothing else of the objective's settings, so a new objective enters here (and in alignment/losses.py,
alignment/advantages.py, alignment/grpo_step.py), not as a branch in the loop. Every default is decided here:
the aggregation's constant (Dr. GRPO's, --sampling-max-tokens unless --normalize-constant), the clip range's
two sides, whether the loss needs the old policy's log-probs.

Samples of older policy versions (the async Ray strategy, alignment/ray/async_driver.py; tokens of one response
may come from several versions) are trained with `off_policy`:
- decoupled (AReaL's decoupled PPO, arXiv 2505.24298): ratios and clipping against the proximal policy, the
  learner's weights before this update (the old log-probs the learner already supplies: its own forward, or the
  batch scored before the first of several optimizer steps), and each token's loss weighted by pi_prox / pi_behav,
  pi_behav being the log-prob the token was sampled with (the rollout log-probs). The weight is the rollout
  correction's (--rollout-correction, capped at --tis-cap; uncapped without it, as in the paper): one weight
  covers both the policy's lag and the engine's mismatch, since pi_prox / pi_behav = (pi_prox / pi_train,behav)
  (pi_train,behav / pi_engine,behav). Every loss composes: the weight multiplies its token terms.
- naive: ratios against the behaviour log-probs themselves and no weight (PPO as if the samples were on-policy:
  AReaL's baseline in its staleness ablation).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from alignment.advantages import (
    AdvantageEstimator,
    AdvantageNormalizer,
    Baseline,
    estimate_advantages,
    overlong_penalty,
)
from alignment.distillation import distillation_advantages
from alignment.grpo.batch import RolloutBatch
from alignment.grpo.config import GRPOConfig
from alignment.grpo_step import LossAggregation, grpo_microbatch_train_step
from alignment.losses import RATIO_LOSSES, LossType
from alignment.rollout.interface import Rollout
from alignment.rollout_correction import RolloutCorrection
from alignment.run.divergence import Diverged

OffPolicyObjective = Literal["decoupled", "naive"]


@dataclass(frozen=True)
class Objective:
    loss_type: LossType
    clip_low: float
    clip_high: float
    aggregation: LossAggregation
    constant: float | None  # the constant aggregation's divisor; None for the others
    estimator: AdvantageEstimator
    advantage_eps: float
    baseline: Baseline
    advantage_normalizer: AdvantageNormalizer
    group_size: int
    correction: RolloutCorrection
    correction_cap: float | None  # None: no rollout correction
    max_tokens: int  # the rollouts' token limit (for the overlong penalty)
    overlong_buffer: int | None
    overlong_penalty: float
    gradient_accumulation_steps: int
    off_policy: OffPolicyObjective | None = None  # None: samples of the policy being trained (the synchronous loops)
    distill_reward_weight: float | None = None  # with a teacher: the task advantage's weight; None: no teacher

    @classmethod
    def from_settings(cls, c: GRPOConfig, off_policy: OffPolicyObjective | None = None) -> "Objective":
        """`off_policy`: how samples of older policy versions are trained (see the module docstring)."""
        cap = math.inf if off_policy == "decoupled" and c.tis_cap is None else c.tis_cap
        return cls(
            loss_type=c.loss_type,  # type: ignore[arg-type]
            clip_low=c.clip_low,
            clip_high=c.clip_high,
            aggregation=c.loss_aggregation,
            constant=(c.normalize_constant or c.sampling_max_tokens) if c.loss_aggregation == "constant" else None,
            estimator=c.advantage_estimator,
            advantage_eps=c.advantage_eps,
            baseline=c.baseline,
            advantage_normalizer=c.normalizer,
            group_size=c.group_size,
            correction=c.rollout_correction,
            correction_cap=cap,
            max_tokens=c.sampling_max_tokens,
            overlong_buffer=c.overlong_buffer,
            overlong_penalty=c.overlong_penalty,
            gradient_accumulation_steps=c.gradient_accumulation_steps,
            off_policy=off_policy,
            distill_reward_weight=None if c.teacher is None else c.distill_reward_weight,
        )

    @property
    def needs_old_log_probs(self) -> bool:
        """Whether the loss takes a ratio against the policy that sampled (GRPO-Clip, GSPO, CISPO, ...)."""
        return self.loss_type in RATIO_LOSSES

    @property
    def corrects_rollouts(self) -> bool:
        return self.correction_cap is not None

    def rewards(self, rollouts: Sequence[Rollout], scores: Sequence[dict[str, float]], step: int) -> torch.Tensor:
        """(n,) the rewards advantages are made of: the task's, plus DAPO's overlong penalty with --overlong-buffer.
        A NaN or inf reward is a Diverged (FloatingPointError) naming GRPO step `step` and the rollout, before any
        update."""
        raw = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)
        if not raw.isfinite().all():
            bad = int((~raw.isfinite()).nonzero()[0])
            raise Diverged(
                f"GRPO step {step}: the reward of rollout {bad} is {raw[bad].item()} "
                f"(response {rollouts[bad].text[:80]!r}); no update was made",
                step,
            )
        return raw if self.overlong_buffer is None else raw + self.length_penalties(rollouts)

    def length_penalties(self, rollouts: Sequence[Rollout]) -> torch.Tensor:
        """(n,) DAPO's soft overlong punishment of each rollout (--overlong-buffer; zeros without it)."""
        lengths = torch.tensor([len(r.token_ids) for r in rollouts])
        if self.overlong_buffer is None:
            return torch.zeros(len(rollouts))
        return overlong_penalty(lengths, self.max_tokens, self.overlong_buffer, self.overlong_penalty)

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """(n,) -> (n,) by the advantage estimator, over groups of `group_size` consecutive rewards."""
        return estimate_advantages(
            rewards,
            self.group_size,
            self.estimator,
            self.advantage_eps,
            baseline=self.baseline,
            advantage_normalizer=self.advantage_normalizer,
        )

    def turn_advantages(self, returns: Sequence[torch.Tensor], lengths: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Per-token advantages of multi-turn episodes (--turn-rewards): each turn's tokens get (its return - the
        group's mean episode return) / the group's std (std division as --advantage-normalizer says: std or none).

        returns[i]: (turns,) episode i's return from each turn (its first: the episode's return); lengths[i]: the
        tokens each turn spans (its model turn and the observation after it), in order.
        """
        episode = torch.stack([r[0] for r in returns]).view(-1, self.group_size)
        mean, std = episode.mean(dim=1), episode.std(dim=1)
        out = []
        for i, (r, spans) in enumerate(zip(returns, lengths)):
            centred = r - mean[i // self.group_size]
            if self.advantage_normalizer == "std":
                centred = centred / (std[i // self.group_size] + self.advantage_eps)
            out.append(torch.repeat_interleave(centred, torch.tensor(spans)))
        return out

    @property
    def distills(self) -> bool:
        return self.distill_reward_weight is not None

    def distilled_advantages(
        self, batch: RolloutBatch, teacher_log_probs: torch.Tensor, student_log_probs: torch.Tensor
    ) -> torch.Tensor:
        """(batch, seq) on-policy distillation's per-token advantages of the batch (alignment/distillation.py): the
        teacher's log-prob minus the student's on each response token, plus the weighted task advantage. The student's
        are the learner's log-probs of the policy that sampled (see GRPOLearner.update)."""
        assert self.distill_reward_weight is not None, "no --teacher: nothing to distill"
        return distillation_advantages(
            teacher_log_probs, student_log_probs, batch.response_mask, batch.advantages, self.distill_reward_weight
        )

    def row_weights(self, batch: RolloutBatch) -> torch.Tensor:
        """(batch,) what multiplies every token term of a row's loss: its advantage, or its reward for no_baseline;
        with per-token advantages (batch, seq) (distillation), the largest in magnitude of its row's. A row whose
        weight is exactly 0 adds exactly 0 to the gradient under every loss here."""
        weight = batch.raw_rewards if self.loss_type == "no_baseline" else batch.advantages
        return weight.abs().amax(dim=-1) if weight.shape[-1] > 1 else weight.flatten()

    def microbatch_loss(
        self,
        log_probs: torch.Tensor,
        loss_mask: torch.Tensor,
        micro: RolloutBatch,
        old_log_probs: torch.Tensor | None,
        batch_rows: int,
        batch_tokens: int,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """This microbatch's share of the optimizer step's loss, backpropagated (alignment/grpo_step.py).

        log_probs, loss_mask, old_log_probs: (rows, seq) on the policy's device; `batch_rows` / `batch_tokens`
        count the whole optimizer step's rows and response tokens in the loss (the aggregation's denominators).
        old_log_probs are those of the policy the learner held before this update (the proximal policy).
        """
        device = log_probs.device
        if self.off_policy == "naive" and old_log_probs is not None:
            old_log_probs = micro.rollout_log_probs.to(device)  # ratios against the behaviour policy itself
        return grpo_microbatch_train_step(
            log_probs,
            loss_mask,
            self.gradient_accumulation_steps,
            self.loss_type,
            raw_rewards=micro.raw_rewards.to(device),
            advantages=micro.advantages.to(device),
            old_log_probs=old_log_probs,
            cliprange=self.clip_low,
            normalize_constant=self.constant,
            rollout_log_probs=micro.rollout_log_probs.to(device),
            tis_cap=self.correction_cap,
            cliprange_high=self.clip_high,
            loss_aggregation=self.aggregation,
            rollout_correction=self.correction,
            batch_rows=batch_rows,
            batch_tokens=batch_tokens,
        )
