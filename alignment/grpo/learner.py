"""The GRPO learner: graded rollouts in, one policy update out.

`make_batch` turns groups of graded rollouts into training tensors with rewards and advantages (the objective's,
alignment/grpo/objective.py); `update` scores the batch under the old policy and the frozen reference where
needed, then takes `epochs_per_rollout_batch` epochs of optimizer steps over it. It never samples: the loop that
draws, generates and grades (alignment/grpo_run.py, the Ray driver) hands it what to learn from, so one learner
serves the single-process loop, the Ray learner and the colocated worker alike, and under torchrun each rank's
learner runs its share of every optimizer step's microbatches (alignment/distributed/sharding.py).
"""

import math
import os
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from alignment.data.task import Task
from alignment.distributed.sharding import is_sharded, microbatch_turns, shard_group
from alignment.envs.episode import turn_returns
from alignment.grpo.batch import RolloutBatch, collate, truncated
from alignment.grpo.config import GRPOConfig
from alignment.grpo.objective import Objective
from alignment.grpo.scoring import rows_needing_backward, score, score_for_update
from alignment.grpo.shared_prompt import prompt_groups
from alignment.kl import kl_estimates
from alignment.logprobs import output_head
from alignment.masked import masked_mean
from alignment.models.lora import copy_trainable, frozen_copy, reference_model
from alignment.models.teacher import load_teacher
from alignment.prompts import format_prompt
from alignment.rollout.forward_tape import ForwardTape, has_dropout
from alignment.rollout.interface import Rollout, RolloutEngine
from alignment.rollout_correction import rollout_mismatch
from alignment.run.divergence import Diverged
from alignment.run.precision import MODES, PolicyOptimizer, resolve_precision
from alignment.run.setup import PhaseTimer
from alignment.utils.faults import fault_point

REPORTED = ("clip_fraction", "tis_weight_mean", "rollout_masked_fraction")  # loss metadata averaged per step


class GRPOLearner:
    """The policy, its AdamW optimizer, the objective, (with --kl-reference) the frozen reference, (with
    --kl-prev-step) a frozen copy of the policy one update behind and (with --teacher) the distillation's teacher.

    `step` counts the updates taken: the policy's version.
    """

    def __init__(
        self,
        config: GRPOConfig,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        task: Task,
        tape: ForwardTape | None = None,
        objective: Objective | None = None,
    ) -> None:
        """`objective`: by default the settings' (Objective.from_settings)."""
        self.config, self.policy, self.tokenizer, self.tape = config, policy, tokenizer, tape
        self.objective = objective or Objective.from_settings(config)
        precision = resolve_precision(config.precision, self.device)
        self.optimizer = PolicyOptimizer(  # AdamW in --precision (float32 master weights when mixed)
            policy,
            precision,
            fused=config.fused_adamw,
            lr=config.learning_rate,
            weight_decay=config.weight_decay,
            betas=(config.adam_beta1, config.adam_beta2),
        )
        compute = MODES[precision].compute  # frozen copies need no float32 master
        self.reference = reference_model(policy, compute) if config.kl_reference else None
        self.previous = frozen_copy(policy, compute) if config.kl_prev_step else None
        self.teacher = None if config.teacher is None else load_teacher(config.teacher, self.device, compute)
        self.previous_version: int | None = None  # the version `previous` holds; None until the first update
        self.shards = shard_group(policy)  # None unless torchrun sharded the policy
        self.prompt_ids = [tokenizer(format_prompt(task.template, q))["input_ids"] for q in task.questions]
        self.step = 0

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def make_batch(
        self, questions: Sequence[int], rollouts: Sequence[Rollout], scores: Sequence[dict[str, float]]
    ) -> RolloutBatch:
        """Training tensors with rewards and advantages; rollouts are prompt-major, group_size per question, and
        rollout i answers questions[rollouts[i].prompt_index]."""
        c = self.config
        rewards = self.objective.rewards(rollouts, scores, self.step + 1)
        advantages = self.objective.advantages(rewards)
        if c.turn_rewards:  # episodes (alignment/envs/episode.py): each turn's tokens its own advantage
            advantages = self.objective.turn_advantages(*turn_returns(rollouts))
        batch = collate(
            [self.prompt_ids[q] for q in questions], rollouts, rewards, advantages, self.tokenizer.pad_token_id
        )
        if c.mask_truncated:
            batch.in_loss = torch.tensor([[not truncated(r, c.sampling_max_tokens)] for r in rollouts])
        if self.tape is not None and self.tape.versions is not None:
            try:
                batch.slots = self.tape.row_slots(batch.input_ids, batch.response_mask)  # where their forward was kept
            except ValueError:
                pass  # rollouts changed since sampling (edited, filtered): the learner recomputes their forward
        return batch

    def update(self, batch: RolloutBatch, timer: PhaseTimer | None = None) -> list[dict[str, float]]:
        """Old/reference log-probs when needed, then epochs_per_rollout_batch epochs of optimizer steps; returns one
        metrics row per optimizer step (KL monitors included). Does not touch any rollout engine."""
        c, timer, extra = self.config, timer or PhaseTimer(), {}
        self.policy.eval()
        with timer("old_logprob"):
            # On-policy, the old policy is the one being trained: its log-probs are the training forward's own
            # (ratio exactly 1), so a separate pass is only needed off-policy or for the KL monitors.
            needs_old = (self.objective.needs_old_log_probs or self.objective.corrects_rollouts) and c.off_policy
            # Old log-probs handed in with the batch are kept: they were scored under an earlier version on purpose
            # (the Ray driver's colocated-k-batches round); the KL monitors still measure the policy as it is now.
            handed_in, current = batch.old_log_probs is not None, None
            distilling = self.teacher is not None and not handed_in
            monitors = self.reference is not None or c.kl_prev or self.previous is not None
            if (needs_old and not handed_in) or distilling or monitors:
                current = score(self.policy, batch, c.micro_train_batch_size)
            if not handed_in:
                batch.old_log_probs = current
            if self.reference is not None:
                reference = score(self.reference, batch, c.micro_train_batch_size)
                kl = kl_estimates(current, reference, batch.response_mask)
                extra |= {f"kl_ref_{k}": v for k, v in kl.items()}
            if self.previous is not None:
                extra |= self.kl_to_previous_step(batch, current)
        if self.teacher is not None:
            with timer("teacher_logprob"):
                extra |= self.distill(batch)
        rows = []
        with timer("train"):
            self.policy.train()
            shuffle = torch.Generator().manual_seed(c.seed * 1_000_003 + self.step)
            _, group = prompt_groups(batch.input_ids, batch.response_mask)
            for _ in range(c.epochs_per_rollout_batch):
                # A new order every epoch, moving whole groups so that microbatches share their prompts
                rank = torch.randperm(int(group.max()) + 1, generator=shuffle)[group]
                permutation = torch.argsort(rank * len(batch) + torch.arange(len(batch)))
                for start in range(0, len(batch), c.train_batch_size):
                    rows.append(self.optimizer_step(batch.select(permutation[start : start + c.train_batch_size])))
        if c.kl_prev:
            with timer("old_logprob"):
                updated = score(self.policy, batch, c.micro_train_batch_size)
                # KL(before || after), estimated on the rollouts, which the policy before the step sampled
                kl = kl_estimates(current, updated, batch.response_mask)
                extra |= {f"kl_prev_{k}": v for k, v in kl.items()}
        self.step += 1
        return [row | extra for row in rows]

    def distill(self, batch: RolloutBatch) -> dict[str, float]:
        """Replace the batch's advantages by on-policy distillation's per-token ones (the objective's), and return
        the student's KL to the teacher on it (`teacher_kl_k1`: the reverse KL per token, the distillation's loss).

        The student's log-probs are the learner's own of the policy that sampled (`batch.old_log_probs`), not the
        sampler's: at a temperature or top-p other than 1 those are of the tempered, truncated distribution, and a
        vLLM engine's differ from the trainer's by its kernels (the rollout mismatch), which would read as KL to
        the teacher; scored by the same code as the teacher, the difference is the two models'."""
        assert self.teacher is not None and batch.old_log_probs is not None
        teacher = score(self.teacher, batch, self.config.micro_train_batch_size)
        batch.advantages = self.objective.distilled_advantages(batch, teacher, batch.old_log_probs)
        kl = kl_estimates(batch.old_log_probs, teacher, batch.response_mask)
        return {f"teacher_kl_{k}": v for k, v in kl.items()}

    def kl_to_previous_step(self, batch: RolloutBatch, current: torch.Tensor) -> dict[str, float]:
        """UW A3 v2 problem 6's KL(pi_theta || pi_theta_{t-1}) on this batch (`current`: its log-probs under the
        policy, which sampled it), when the copy holds the version one update before; then the copy takes the
        policy's weights, to be one update behind at the next call. A resumed run starts measuring at its second
        update (the copy is not checkpointed)."""
        assert self.previous is not None
        kl = {}
        if self.previous_version == self.step - 1:
            previous = score(self.previous, batch, self.config.micro_train_batch_size)
            kl = {f"kl_prev_step_{k}": v for k, v in kl_estimates(current, previous, batch.response_mask).items()}
        copy_trainable(self.policy, self.previous)
        self.previous_version = self.step
        return kl

    def old_log_probs(self, batch: RolloutBatch) -> torch.Tensor:
        """(batch, seq) the batch's log-probs under the policy as it is now, to hand in with it to a later `update`
        (Variant B of UW CSE599-O A3 v2: k batches sampled and scored by one version, then one update each)."""
        self.policy.eval()
        return score(self.policy, batch, self.config.micro_train_batch_size)

    def optimizer_step(self, batch: RolloutBatch) -> dict[str, float]:
        """One optimizer step over `batch`, in microbatches (this rank's share of them when sharded)."""
        c, device, objective = self.config, self.device, self.objective
        # each microbatch's numbers stay on the device until the last one is queued: one host sync per step
        loss_values, entropy_values, differences = [], [], []
        reported_values: dict[str, list[torch.Tensor]] = {key: [] for key in REPORTED}
        # sharded: every rank must make the same calls, so no rows are left out of the backward
        skip = c.skip_zero_advantage and self.shards is None
        learn = (
            rows_needing_backward(objective.row_weights(batch), batch.in_loss)
            if skip
            else torch.ones(len(batch), dtype=torch.bool)
        )
        # the step's rows and response tokens in the loss: the aggregation's denominators, whatever the microbatch
        in_loss = batch.response_mask if batch.in_loss is None else batch.response_mask & batch.in_loss
        rows_in_loss = len(batch) if batch.in_loss is None else int(batch.in_loss.sum())
        # --prune-zero-advantage: the rows left out of the backward never pass through the model either; the others
        # run in microbatches of the same size, fewer of them (CS336 2026's pruning)
        kept = learn.nonzero()[:, 0] if skip and c.prune_zero_advantage else None
        for turn, counts in microbatch_turns(
            len(batch) if kept is None else len(kept), c.micro_train_batch_size, self.shards
        ):
            rows = turn if kept is None else kept[turn]
            micro = batch.select(rows)
            if not counts:  # this rank's empty turn: every row out of the loss, gradient 0
                micro.in_loss = torch.zeros((len(micro), 1), dtype=torch.bool)
            mask = micro.response_mask.to(device)
            loss_mask = mask if micro.in_loss is None else mask & micro.in_loss.to(device)
            out = score_for_update(self.policy, micro, learn[rows], self.tape)
            # the policy that sampled: scored before the first step off-policy, else the one being trained
            sampler = out["log_probs"].detach() if micro.old_log_probs is None else micro.old_log_probs.to(device)
            old = sampler if objective.needs_old_log_probs else None
            loss, meta = objective.microbatch_loss(
                out["log_probs"], loss_mask, micro, old, rows_in_loss, int(in_loss.sum())
            )
            if not counts:
                continue
            differences.append(((sampler - micro.rollout_log_probs.to(device)).detach(), mask))
            loss_values.append(loss.detach().float())
            entropy_values.append(masked_mean(out["token_entropy"], mask).detach().float())
            for key, values in reported_values.items():
                if key in meta:
                    values.append(meta[key].detach().float())
        losses, entropies = on_host(loss_values), on_host(entropy_values)
        # a microbatch with no token in the loss has none to report (NaN)
        reported = {key: [v for v in on_host(values) if math.isfinite(v)] for key, values in reported_values.items()}
        mismatch = [difference[mask].float().cpu() for difference, mask in differences]
        if self.shards is not None:  # every rank's microbatches, so that every rank reports the same numbers
            losses, entropies, mismatch, reported = self.shards.merged(losses, entropies, mismatch, reported)
        grad_norm = self.optimizer.clip_grad_norm(c.max_grad_norm)
        # fp16-mixed: an inf gradient with finite losses is the loss scale overflowing float16; the step skips it
        overflowed = self.optimizer.scaler is not None and not math.isfinite(grad_norm)
        if not ((math.isfinite(grad_norm) or overflowed) and all(math.isfinite(loss) for loss in losses)):
            self.optimizer.zero_grad()
            raise Diverged(
                f"GRPO step {self.step + 1}: loss {sum(losses)} and gradient norm {grad_norm} "
                "(NaN or inf log-probs); the weights were not updated",
                self.step + 1,
            )
        if c.divergence_loss_bound is not None and abs(sum(losses)) > c.divergence_loss_bound:
            self.optimizer.zero_grad()
            raise Diverged(
                f"GRPO step {self.step + 1}: loss {sum(losses):.4g} is past --divergence-loss-bound "
                f"{c.divergence_loss_bound:g}; the weights were not updated",
                self.step + 1,
            )
        stepped = self.optimizer.step()
        fault_point("optimizer_step")
        self.optimizer.zero_grad()
        row = {
            "loss": sum(losses),
            "grad_norm": grad_norm,
            "rows_without_backward": (~learn).float().mean().item(),
            "token_entropy": sum(entropies) / len(entropies),
            "learning_rate": self.optimizer.param_groups[0]["lr"],
        }
        row |= self.optimizer.metrics() | ({} if stepped else {"skipped_step": 1.0})
        row |= {key: sum(values) / len(values) for key, values in reported.items() if values}
        return row | rollout_mismatch(torch.cat(mismatch))


def on_host(values: list[torch.Tensor]) -> list[float]:
    """0-dim tensors as floats, in one copy."""
    return torch.stack(values).tolist() if values else []


def rollout_forward_tape(
    config: GRPOConfig, policy: PreTrainedModel, engine: RolloutEngine | None, prompt_tokens: int
) -> ForwardTape | None:
    """A ForwardTape when the learner may replay the sampler's forward (--reuse-rollout-forward), else None.

    `prompt_tokens` is the longest prompt. With `on`, whatever stands in the way is a ValueError naming it.
    """
    if config.reuse_rollout_forward == "off":
        return None
    tape = ForwardTape(policy, output_head(policy))
    slots = config.n_prompts_per_rollout_batch * prompt_tokens + config.rollout_batch_size * config.sampling_max_tokens
    needed, budget = slots * tape.bytes_per_slot(), tape_memory_budget(next(policy.parameters()).device)
    in_process = hasattr(engine, "tape") and getattr(engine, "use_cache", True)  # hf, transformer_lm with its cache
    samples_policy = in_process and getattr(engine, "model", None) is policy
    requirements = [
        (
            not config.off_policy,
            "one optimizer step per rollout batch (--epochs-per-rollout-batch 1, --train-batch-size = "
            "--rollout-batch-size)",
        ),
        (not config.gradient_checkpointing, "no --gradient-checkpointing"),
        (
            samples_policy,
            "a rollout engine that samples the policy itself (--backend hf, or transformer_lm with its cache)",
        ),
        (not has_dropout(policy), "a policy without dropout"),
        (not is_sharded(policy), "one process (torchrun shards the policy)"),
        (
            needed <= budget,
            f"{needed / 2**30:.1f} GiB for the tape, at most a quarter of memory ({budget / 2**30:.1f} GiB)",
        ),
    ]
    problem = next((what for met, what in requirements if not met), None)
    if problem is None:
        return tape
    if config.reuse_rollout_forward == "on":
        raise ValueError(f"--reuse-rollout-forward on needs {problem}")
    return None


def tape_memory_budget(device: torch.device) -> int:
    """A quarter of the device's free memory (GPU) or of the machine's memory (CPU)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0] // 4
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
