"""The GRPO train loop (Algorithm 1 of the handouts): roll out, grade, normalize, update, sync weights.

Read `step` top to bottom: each step draws questions, generates `group_size` answers each, grades them
(with --dynamic-sampling, drawing again for groups whose rewards all agree), turns rewards into advantages,
optionally scores the batch under the current (old) policy and the frozen reference, then runs
`epochs_per_rollout_batch` epochs of optimizer steps over it and pushes the new weights to the rollout engine.
Which objective those steps optimize is the loss, advantage and aggregation settings (alignment/losses.py,
advantages.py, grpo_step.py, rollout_correction.py), not branches here.
"""

import math
import os
import time
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from alignment.advantages import estimate_advantages, overlong_penalty
from alignment.evaluation import generate_and_grade
from alignment.faults import fault_point
from alignment.forward_tape import ForwardTape, has_dropout
from alignment.grpo_config import GRPOConfig
from alignment.grpo_step import grpo_microbatch_train_step
from alignment.kl import k3, kl_estimates
from alignment.logprobs import output_head
from alignment.lora import reference_model, trainable_parameters
from alignment.masked import masked_mean
from alignment.parallel_grading import ParallelGrader
from alignment.policy_folder import push_weights
from alignment.prompts import format_prompt
from alignment.rollout import Rollout, RolloutEngine, SamplingConfig
from alignment.rollout_batch import RolloutBatch, collate
from alignment.shared_prompt import prompt_groups, shared_prompt_log_probs
from alignment.sharding import clip_grad_norm, is_sharded, my_microbatches, shard_group
from alignment.task import Task


class PromptOrder:
    """A fresh seeded permutation of the questions each pass; `position` is all that resuming needs."""

    def __init__(self, size: int, seed: int, position: int = 0) -> None:
        self.size, self.seed, self.position = size, seed, position

    def take(self, count: int) -> list[int]:
        picked = []
        for _ in range(count):
            epoch, offset = divmod(self.position, self.size)
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed + epoch))
            picked.append(int(order[offset]))
            self.position += 1
        return picked


class PhaseTimer:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        yield
        self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start


@torch.no_grad()  # not inference_mode: a sharded policy's first gather here would make its buffers inference tensors
def score(model: PreTrainedModel, batch: RolloutBatch, micro_batch_size: int) -> torch.Tensor:
    """Log-probs of the batch's labels under `model`, computed in microbatches. -> (batch, seq) on CPU."""
    device = next(model.parameters()).device
    chunks = []
    for start in range(0, len(batch), micro_batch_size):
        part = batch.select(slice(start, start + micro_batch_size))
        log_probs = shared_prompt_log_probs(
            model, part.input_ids.to(device), part.labels.to(device), part.response_mask.to(device)
        )["log_probs"]
        chunks.append(torch.nn.functional.pad(log_probs.float().cpu(), (0, batch.input_ids.shape[1] - log_probs.shape[1])))
    return torch.cat(chunks)


def rollout_mismatch(delta: torch.Tensor) -> dict[str, float]:
    """How far the engine's log-probs are from the trainer's: delta = trainer - engine, one per response token.

    `rollout_kl_k3` estimates KL(engine || trainer) on the engine's own samples.
    """
    return {
        "rollout_logprob_diff_mean": delta.abs().mean().item(),
        "rollout_logprob_diff_max": delta.abs().max().item(),
        "rollout_kl_k3": k3(delta).mean().item(),
    }


def truncated(rollout: Rollout, max_tokens: int) -> bool:
    """Cut at the token limit (not stopped by EOS or a stop string)."""
    return rollout.finish_reason == "length" and len(rollout.token_ids) >= max_tokens


def informative_groups(rewards: torch.Tensor, group_size: int) -> list[bool]:
    """Per group of `group_size` consecutive rewards (n,): whether they differ (DAPO's dynamic sampling keeps those)."""
    grouped = rewards.view(-1, group_size)
    return (grouped != grouped[:, :1]).any(dim=1).tolist()


def rollout_stats(rollouts: Sequence[Rollout], scores: Sequence[dict[str, float]], max_tokens: int) -> dict[str, float]:
    lengths = [len(r.token_ids) for r in rollouts]
    n = len(rollouts)
    return {
        "train_reward": sum(s["reward"] for s in scores) / n,
        "train_format_reward": sum(s.get("format_reward", 0.0) for s in scores) / n,
        "train_answer_reward": sum(s.get("answer_reward", 0.0) for s in scores) / n,
        "response_length_mean": sum(lengths) / n,
        "response_length_max": max(lengths),
        "truncated_fraction": sum(truncated(r, max_tokens) for r in rollouts) / n,
    }


def rollout_sampling(c: GRPOConfig, step: int, draw: int = 0) -> SamplingConfig:
    """Sampling settings of step `step`'s rollouts, draw `draw` of its dynamic sampling (shared with the Ray generators)."""
    return SamplingConfig(
        temperature=c.sampling_temperature, top_p=c.sampling_top_p, max_tokens=c.sampling_max_tokens,
        min_tokens=c.sampling_min_tokens, stop=c.stop,
        # a function of the step and draw alone, so a resumed run samples the same
        seed=c.seed * 1_000_003 + step + draw * 1_000_000_007,
    )


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
        (not config.off_policy,
         "one optimizer step per rollout batch (--epochs-per-rollout-batch 1, --train-batch-size = --rollout-batch-size)"),
        (not config.gradient_checkpointing, "no --gradient-checkpointing"),
        (samples_policy, "a rollout engine that samples the policy itself (--backend hf, or transformer_lm with its cache)"),
        (not has_dropout(policy), "a policy without dropout"),
        (not is_sharded(policy), "one process (torchrun shards the policy)"),
        (needed <= budget, f"{needed / 2**30:.1f} GiB for the tape, at most a quarter of memory ({budget / 2**30:.1f} GiB)"),
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


class GRPOTrainer:
    """Holds the policy, optimizer, rollout engine and grader; `step()` runs one GRPO step."""

    def __init__(
        self,
        config: GRPOConfig,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        engine: RolloutEngine,
        task: Task,
        grader: ParallelGrader,
    ) -> None:
        self.config, self.policy, self.tokenizer, self.engine, self.task, self.grader = (
            config, policy, tokenizer, engine, task, grader
        )
        self.optimizer = torch.optim.AdamW(
            trainable_parameters(policy), lr=config.learning_rate, weight_decay=config.weight_decay,
            betas=(config.adam_beta1, config.adam_beta2),
            fused=next(policy.parameters()).device.type in ("cpu", "cuda"),  # one kernel: 2.7x faster on 2 cores
        )
        self.reference = reference_model(policy) if config.kl_reference else None
        self.order = PromptOrder(len(task.questions), config.seed)
        self.step_index = 0
        self.prompt_ids = [tokenizer(format_prompt(task.template, q))["input_ids"] for q in task.questions]
        self.tape = rollout_forward_tape(config, policy, engine, max(map(len, self.prompt_ids)))
        self.shards = shard_group(policy)  # None unless torchrun sharded the policy (alignment/sharding.py)

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def sampling(self, step: int, draw: int = 0) -> SamplingConfig:
        return rollout_sampling(self.config, step, draw)

    def step(self) -> list[dict[str, float]]:
        """One GRPO step; returns one metrics row per optimizer step."""
        timer = PhaseTimer()
        questions, rollouts, scores, shared = self.draw(timer)
        rows = self.learn(self.make_batch(questions, rollouts, scores), timer)
        with timer("weight_sync"):
            push_weights(self.engine, self.policy)
        self.step_index += 1
        shared |= {f"time_{k}_s": v for k, v in timer.seconds.items()}
        return [{"grpo_step": self.step_index} | shared | row for row in rows]

    def draw(self, timer: PhaseTimer) -> tuple[list[int], list[Rollout], list[dict[str, float]], dict[str, float]]:
        """The step's questions and their graded rollouts (prompt-major), and metrics of every rollout drawn.

        One draw of n_prompts_per_rollout_batch questions; with --dynamic-sampling (DAPO), groups whose rewards all
        agree are dropped and as many new questions drawn as groups are missing, for at most
        --dynamic-sampling-max-draws rounds. A batch still short trains on the groups it has (on the last round's,
        all of advantage 0, if it has none). Questions come from the PromptOrder, whose position the checkpoint
        keeps, and each round samples with a seed of its own: a resumed run draws exactly the same.
        """
        c, n = self.config, self.config.n_prompts_per_rollout_batch
        questions: list[int] = []
        rollouts: list[Rollout] = []
        scores: list[dict[str, float]] = []
        every: list[tuple[Rollout, dict[str, float]]] = []
        dropped = 0
        for attempt in range(c.dynamic_sampling_max_draws if c.dynamic_sampling else 1):
            asked = self.order.take(n - len(questions))
            with timer("rollout"):
                new = self.generate(asked, attempt)
            with timer("grading"):
                graded = self.grade(asked, new)
            every += zip(new, graded)
            keep = informative_groups(self.rewards(new, graded), c.group_size) if c.dynamic_sampling else [True] * len(asked)
            dropped += keep.count(False)
            for i in (i for i, kept in enumerate(keep) if kept):
                group = slice(i * c.group_size, (i + 1) * c.group_size)
                rollouts += [replace(r, prompt_index=len(questions)) for r in new[group]]
                scores += graded[group]
                questions.append(asked[i])
            if len(questions) == n:
                break
        kept = len(questions)
        if not questions:
            questions, rollouts, scores = asked, new, graded
        stats = rollout_stats([r for r, _ in every], [s for _, s in every], c.sampling_max_tokens)
        if c.overlong_buffer is not None:
            lengths = torch.tensor([len(r.token_ids) for r, _ in every])
            stats["overlong_penalty_mean"] = overlong_penalty(lengths, c.sampling_max_tokens, c.overlong_buffer, c.overlong_penalty).mean().item()
        if c.dynamic_sampling:
            stats |= {"dynamic_draws": attempt + 1, "dynamic_groups_drawn": len(every) // c.group_size,
                      "dynamic_groups_dropped": dropped, "dynamic_groups_missing": n - kept}
        return questions, rollouts, scores, stats

    def generate(self, questions: Sequence[int], draw: int = 0) -> list[Rollout]:
        """group_size rollouts for each question index, prompt-major."""
        self.policy.eval()
        prompts = [format_prompt(self.task.template, self.task.questions[q]) for q in questions]
        with nullcontext() if self.tape is None else self.tape.recording(self.engine):
            return self.engine.generate(prompts, self.config.group_size, self.sampling(self.step_index, draw))

    def grade(self, questions: Sequence[int], rollouts: Sequence[Rollout]) -> list[dict[str, float]]:
        truths = self.task.truths_for(questions, [r.prompt_index for r in rollouts])
        return self.grader([r.text for r in rollouts], truths)

    def rewards(self, rollouts: Sequence[Rollout], scores: Sequence[dict[str, float]]) -> torch.Tensor:
        """(n,) the rewards advantages are made of: the task's, plus DAPO's overlong penalty with --overlong-buffer."""
        c = self.config
        raw = torch.tensor([s["reward"] for s in scores], dtype=torch.float32)
        if not raw.isfinite().all():
            bad = int((~raw.isfinite()).nonzero()[0])
            raise FloatingPointError(f"GRPO step {self.step_index + 1}: the reward of rollout {bad} is {raw[bad].item()} "
                                     f"(response {rollouts[bad].text[:80]!r}); no update was made")
        if c.overlong_buffer is None:
            return raw
        lengths = torch.tensor([len(r.token_ids) for r in rollouts])
        return raw + overlong_penalty(lengths, c.sampling_max_tokens, c.overlong_buffer, c.overlong_penalty)

    def make_batch(self, questions: Sequence[int], rollouts: Sequence[Rollout], scores: Sequence[dict[str, float]]) -> RolloutBatch:
        """Training tensors with advantages (--advantage-estimator); rollouts are prompt-major, group_size per question."""
        c = self.config
        raw = self.rewards(rollouts, scores)
        advantages = estimate_advantages(raw, c.group_size, c.advantage_estimator, c.advantage_eps, c.use_std_normalization)
        batch = collate([self.prompt_ids[q] for q in questions], rollouts, raw, advantages, self.tokenizer.pad_token_id)
        if c.mask_truncated:
            batch.in_loss = torch.tensor([[not truncated(r, c.sampling_max_tokens)] for r in rollouts])
        if self.tape is not None and self.tape.versions is not None:
            try:
                batch.slots = self.tape.row_slots(batch.input_ids, batch.response_mask)  # where their forward was kept
            except ValueError:
                pass  # rollouts changed since sampling (edited, filtered): the learner recomputes their forward
        return batch

    def learn(self, batch: RolloutBatch, timer: PhaseTimer | None = None) -> list[dict[str, float]]:
        """Old/reference log-probs when needed, then epochs_per_rollout_batch epochs of optimizer steps.

        Returns one metrics row per optimizer step (KL monitors included); does not touch the rollout engine.
        """
        c, timer = self.config, timer or PhaseTimer()
        extra: dict[str, float] = {}
        with timer("old_logprob"):
            # On-policy, the old policy is the one being trained: its log-probs are the training forward's own
            # (ratio exactly 1), so a separate pass is only needed off-policy or for the KL monitors.
            needs_old = (c.needs_old_log_probs or c.tis_cap is not None) and c.off_policy
            if needs_old or self.reference is not None or c.kl_prev:
                batch.old_log_probs = score(self.policy, batch, c.micro_train_batch_size)
            if self.reference is not None:
                reference = score(self.reference, batch, c.micro_train_batch_size)
                extra |= {f"kl_ref_{k}": v for k, v in kl_estimates(batch.old_log_probs, reference, batch.response_mask).items()}
        rows = []
        with timer("train"):
            self.policy.train()
            shuffle = torch.Generator().manual_seed(c.seed * 1_000_003 + self.step_index)
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
                kl = kl_estimates(batch.old_log_probs, updated, batch.response_mask)
                extra |= {f"kl_prev_{k}": v for k, v in kl.items()}
        return [row | extra for row in rows]

    def rows_to_learn(self, batch: RolloutBatch) -> torch.Tensor:
        """(batch,) bool: the rows the backward needs. With --skip-zero-advantage, not those whose loss weight (the
        advantage; the reward for no_baseline) is exactly 0: every loss here multiplies that weight into each
        token's term (GRPO-Clip's min and clip included), so their gradient is exactly 0. One row stays even when
        all are 0, so that every parameter still gets its (zero) gradient and AdamW counts the step as it would."""
        c = self.config
        if not c.skip_zero_advantage or self.shards is not None:  # sharded: every rank must make the same calls
            return torch.ones(len(batch), dtype=torch.bool)
        weight = batch.raw_rewards if c.loss_type == "no_baseline" else batch.advantages
        learn = weight.flatten() != 0
        if batch.in_loss is not None:  # rows --mask-truncated leaves out of the loss: no gradient either
            learn &= batch.in_loss.flatten()
        if not learn.any():
            learn[0] = True
        return learn

    def score_microbatch(self, micro: RolloutBatch, learn: torch.Tensor) -> dict[str, torch.Tensor]:
        """The policy's log-probs and entropies of a microbatch's labels, (rows, seq) each, differentiable at the rows
        `learn` (rows,) bool. The others are scored in a pass without gradient, for the loss value and the metrics:
        with the forward tape that pass costs an eighth of a forward and backward (0.23 vs 2.02 s, CPU demo)."""
        device = self.device

        def scored(rows: RolloutBatch) -> dict[str, torch.Tensor]:
            return shared_prompt_log_probs(
                self.policy, rows.input_ids.to(device), rows.labels.to(device), rows.response_mask.to(device),
                return_token_entropy=True, tape=self.tape, slots=None if rows.slots is None else rows.slots.to(device),
            )

        if learn.all():
            return scored(micro)
        out = {key: torch.zeros(micro.labels.shape, device=device) for key in ("log_probs", "token_entropy")}
        for rows, grad in ((~learn, False), (learn, True)):
            if rows.any():
                index = rows.nonzero().flatten()
                with torch.set_grad_enabled(grad):
                    part = scored(micro.select(index))
                for key, value in part.items():  # select trims columns after the part's last response token
                    value = torch.nn.functional.pad(value, (0, out[key].shape[1] - value.shape[1]))
                    out[key] = out[key].index_put((index.to(device),), value)
        if not out["log_probs"].requires_grad:
            out["log_probs"].requires_grad_()  # nothing to learn in this microbatch: its backward reaches no parameter
        return out

    def optimizer_step(self, batch: RolloutBatch) -> dict[str, float]:
        c, device = self.config, self.device
        constant = (c.normalize_constant or c.sampling_max_tokens) if c.loss_aggregation == "constant" else None
        losses, entropies, mismatch = [], [], []
        reported: dict[str, list[float]] = {"clip_fraction": [], "tis_weight_mean": [], "rollout_masked_fraction": []}
        learn = self.rows_to_learn(batch)
        # the step's rows and response tokens in the loss: the aggregation's denominators, whatever the microbatch
        in_loss = batch.response_mask if batch.in_loss is None else batch.response_mask & batch.in_loss
        totals = {"batch_rows": len(batch) if batch.in_loss is None else int(batch.in_loss.sum()),
                  "batch_tokens": int(in_loss.sum())}
        size = c.micro_train_batch_size
        for index in my_microbatches(-(-len(batch) // size), self.shards):  # all of them unless sharded
            start = (index or 0) * size
            micro = batch.select(slice(start, start + size))
            if index is None:  # this rank's turn with no microbatch left: every row out of the loss, gradient 0
                micro.in_loss = torch.zeros((len(micro), 1), dtype=torch.bool)
            mask = micro.response_mask.to(device)
            loss_mask = mask if micro.in_loss is None else mask & micro.in_loss.to(device)
            out = self.score_microbatch(micro, learn[start : start + size])
            old = None
            if c.needs_old_log_probs:
                old = out["log_probs"].detach() if micro.old_log_probs is None else micro.old_log_probs.to(device)
            loss, meta = grpo_microbatch_train_step(
                out["log_probs"], loss_mask, c.gradient_accumulation_steps, c.loss_type,  # type: ignore[arg-type]
                raw_rewards=micro.raw_rewards.to(device), advantages=micro.advantages.to(device),
                old_log_probs=old, cliprange=c.clip_low, normalize_constant=constant,
                rollout_log_probs=micro.rollout_log_probs.to(device), tis_cap=c.tis_cap,
                cliprange_high=c.clip_high, loss_aggregation=c.loss_aggregation,
                rollout_correction=c.rollout_correction, **totals,
            )
            if index is None:
                continue
            # trainer minus engine log-probs of the sampled tokens, under the policy that sampled them when
            # scored (off-policy), else the one being trained (exact on-policy: a single optimizer step)
            trainer = out["log_probs"].detach() if micro.old_log_probs is None else micro.old_log_probs.to(device)
            mismatch.append((trainer - micro.rollout_log_probs.to(device))[mask].float().cpu())
            losses.append(loss.item())
            entropies.append(masked_mean(out["token_entropy"], mask).item())
            for key, values in reported.items():  # a microbatch with no token in the loss has none to report
                if key in meta and math.isfinite(meta[key].item()):
                    values.append(meta[key].item())
        if self.shards is not None:  # every rank's microbatches, so that every rank reports the same numbers
            losses, entropies, mismatch, reported = self.shards.merged(losses, entropies, mismatch, reported)
        grad_norm = clip_grad_norm(list(self.policy.parameters()), c.max_grad_norm)
        if not (math.isfinite(grad_norm) and all(math.isfinite(loss) for loss in losses)):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"GRPO step {self.step_index + 1}: loss {sum(losses)} and gradient norm {grad_norm} "
                                     "(NaN or inf log-probs); the weights were not updated")
        self.optimizer.step()
        fault_point("optimizer_step")
        self.optimizer.zero_grad(set_to_none=True)
        row = {
            "loss": sum(losses),
            "grad_norm": grad_norm,
            "rows_without_backward": (~learn).float().mean().item(),
            "token_entropy": sum(entropies) / len(entropies),
            "learning_rate": self.optimizer.param_groups[0]["lr"],
        }
        row |= {key: sum(values) / len(values) for key, values in reported.items() if values}
        return row | rollout_mismatch(torch.cat(mismatch))


def evaluate(
    engine: RolloutEngine, policy: PreTrainedModel, task: Task, grader: ParallelGrader, sampling: SamplingConfig
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Mean reward, format reward and answer reward of one sample per validation question (`eval_reward`,
    `eval_format_reward`, `eval_answer_reward`), and a few example rollouts."""
    policy.eval()
    records, _ = generate_and_grade(engine, task.questions, task.truths, task.template, grader, sampling)
    examples = [{"prompt": r.prompt, "response": r.response, "truth": r.ground_truth, "reward": r.reward} for r in records[:3]]
    n = len(records)
    return {"eval_reward": sum(r.reward for r in records) / n, "eval_format_reward": sum(r.format_reward for r in records) / n,
            "eval_answer_reward": sum(r.answer_reward for r in records) / n}, examples


def progress(total: int, initial: int, disable: bool = False) -> tqdm:
    return tqdm(total=total, initial=initial, desc="GRPO", unit="step", disable=disable)
