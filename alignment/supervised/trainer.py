"""The SFT optimizer step over prompt/response examples, shared by SFT runs and expert iteration.

Each optimizer step takes `batch_size` examples, split into `gradient_accumulation_steps` microbatches; the loss
is the mean negative log-likelihood per response token (alignment.sft.sft_microbatch_train_step with the
microbatch's tokens per example as its normalize constant), and gradients are clipped to `max_grad_norm`.
Under torchrun the policy is sharded over the processes (alignment/distributed/sharding.py) and each rank runs its share
of every step's microbatches; SFTTrainer says why the update stays that of one process.
"""

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from alignment.data.sft_examples import SFTExample
from alignment.distributed.sharding import microbatch_turns, root_forward, shard_group
from alignment.logprobs import get_response_log_probs
from alignment.masked import masked_mean
from alignment.run.checkpoint import save_checkpoint
from alignment.run.precision import PolicyOptimizer, resolve_precision
from alignment.sft import sft_microbatch_train_step, tokenize_prompt_and_output
from alignment.supervised.config import SFTTrainingSettings


def check_prompt_lengths(
    examples: Sequence[SFTExample], tokenizer: PreTrainedTokenizerBase, max_seq_length: int
) -> None:
    """Every prompt must leave room for at least one response token within --max-seq-length."""
    if not examples:
        return
    lengths = [len(ids) for ids in tokenizer([e.prompt for e in examples])["input_ids"]]
    too_long = [i for i, n in enumerate(lengths) if n >= max_seq_length]
    if too_long:
        i = too_long[0]
        raise ValueError(
            f"--max-seq-length {max_seq_length} leaves no room for a response: {len(too_long)} "
            f"prompt(s) are at least that long (example {i} has {lengths[i]} tokens)"
        )


def sft_batch(
    examples: Sequence[SFTExample], tokenizer: PreTrainedTokenizerBase, max_seq_length: int
) -> dict[str, torch.Tensor]:
    """tokenize_prompt_and_output cut to max_seq_length tokens (input_ids/labels/response_mask: (batch, <= L-1))."""
    batch = tokenize_prompt_and_output([e.prompt for e in examples], [e.response for e in examples], tokenizer)
    return {k: v[:, : max_seq_length - 1] for k, v in batch.items()}


class SFTTrainer:
    """The policy, its AdamW optimizer and the settings of its steps; `step(examples)` is one optimizer step.

    A policy sharded over torchrun's processes trains as one process would. Every rank holds the step's examples
    and runs its round-robin share of the microbatches (`microbatch_turns`); a rank one short runs microbatch 0
    again with an all-zero response mask, so that every rank makes the same collective calls. Each microbatch's
    loss is its mean NLL per response token divided by the step's microbatch count: it depends on that microbatch
    and on the count alone, which every rank computes from the whole step, so no count needs reducing. The step's
    gradient is the sum of its microbatches' gradients, and the reduce-scatter sums the ranks' (divide factor 1),
    each microbatch counted once by the rank that ran it. The empty turn's mask multiplies every token's term:
    its loss is 0 and its gradient exactly 0 (normalized by 1, not by its 0 tokens).
    """

    def __init__(
        self, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: SFTTrainingSettings
    ) -> None:
        self.policy, self.tokenizer, self.settings = policy, tokenizer, settings
        precision = resolve_precision(settings.precision, next(policy.parameters()).device)
        self.optimizer = PolicyOptimizer(
            policy, precision, fused=settings.fused_adamw, lr=settings.learning_rate, weight_decay=settings.weight_decay
        )
        self.shards = shard_group(policy)  # None unless torchrun sharded the policy

    def step(self, examples: Sequence[SFTExample]) -> dict[str, float]:
        s, device = self.settings, next(self.policy.parameters()).device
        self.policy.train()
        n_micro = -(-len(examples) // s.micro_batch_size)
        losses, entropies, tokens = [], [], []  # per microbatch
        for rows, counts in microbatch_turns(len(examples), s.micro_batch_size, self.shards):
            batch = {k: v.to(device) for k, v in sft_batch(examples[rows], self.tokenizer, s.max_seq_length).items()}
            if not counts:  # this rank's empty turn: no token in the loss, gradient 0
                batch["response_mask"] = torch.zeros_like(batch["response_mask"])
            mask = batch["response_mask"]
            out = self.log_probs(batch["input_ids"], batch["labels"], mask)
            count = int(mask.sum())
            # tokens per example: the loss is the microbatch's NLL per response token (0, not 0/0, without any)
            per_example = max(count, 1) / len(mask)
            micro_loss, _ = sft_microbatch_train_step(out["log_probs"], mask, n_micro, normalize_constant=per_example)
            if not counts:
                continue
            losses.append(micro_loss.item())
            entropies.append(masked_mean(out["token_entropy"], mask).item())
            tokens.append(count)
        if self.shards is not None:  # every rank's microbatches, so that every rank reports the same
            losses, entropies, tokens = self.shards.merged(losses, entropies, tokens)
        grad_norm = self.optimizer.clip_grad_norm(s.max_grad_norm)
        stepped = self.optimizer.step()  # fp16-mixed skips a step whose gradient overflowed
        self.optimizer.zero_grad()
        row = {
            "loss": sum(losses),
            "grad_norm": grad_norm,
            "token_entropy": sum(entropies) / n_micro,
            "response_tokens": sum(tokens),
            "learning_rate": self.optimizer.param_groups[0]["lr"],
        }
        return row | self.optimizer.metrics() | ({} if stepped else {"skipped_step": 1.0})

    def log_probs(self, input_ids: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """get_response_log_probs with entropies; a sharded policy's root weights gathered around it (root_forward)."""

        def score() -> dict[str, torch.Tensor]:
            return get_response_log_probs(self.policy, input_ids, labels, return_token_entropy=True, response_mask=mask)

        return score() if self.shards is None else root_forward(self.policy, score)


def save_run_state(
    folder: Path, config: SFTTrainingSettings, trainer: SFTTrainer, step: int, started: float, extra: dict[str, Any]
) -> None:
    """A resumable checkpoint through alignment.run.checkpoint (policy, optimizer, RNG, position, elapsed time)."""
    save_checkpoint(
        folder,
        config,
        trainer.policy,
        trainer.tokenizer,
        trainer.optimizer,
        {"step": step, "elapsed_s": time.perf_counter() - started} | extra,
    )
