"""The SFT optimizer step over prompt/response examples, shared by SFT runs and expert iteration.

Each optimizer step takes `batch_size` examples, split into `gradient_accumulation_steps` microbatches; the loss
is the mean negative log-likelihood per response token (alignment.sft.sft_microbatch_train_step with the
microbatch's tokens per example as its normalize constant), and gradients are clipped to `max_grad_norm`.
"""

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from alignment.checkpoint import save_checkpoint
from alignment.logprobs import get_response_log_probs
from alignment.lora import trainable_parameters
from alignment.masked import masked_mean
from alignment.sft import sft_microbatch_train_step, tokenize_prompt_and_output
from alignment.sft_config import SFTTrainingSettings
from alignment.sft_data import SFTExample


def check_prompt_lengths(examples: Sequence[SFTExample], tokenizer: PreTrainedTokenizerBase, max_seq_length: int) -> None:
    """Every prompt must leave room for at least one response token within --max-seq-length."""
    if not examples:
        return
    lengths = [len(ids) for ids in tokenizer([e.prompt for e in examples])["input_ids"]]
    too_long = [i for i, n in enumerate(lengths) if n >= max_seq_length]
    if too_long:
        i = too_long[0]
        raise ValueError(f"--max-seq-length {max_seq_length} leaves no room for a response: {len(too_long)} "
                         f"prompt(s) are at least that long (example {i} has {lengths[i]} tokens)")


def sft_batch(examples: Sequence[SFTExample], tokenizer: PreTrainedTokenizerBase, max_seq_length: int) -> dict[str, torch.Tensor]:
    """tokenize_prompt_and_output cut to max_seq_length tokens (input_ids/labels/response_mask: (batch, <= L-1))."""
    batch = tokenize_prompt_and_output([e.prompt for e in examples], [e.response for e in examples], tokenizer)
    return {k: v[:, : max_seq_length - 1] for k, v in batch.items()}


class SFTTrainer:
    """The policy, its AdamW optimizer and the settings of its steps; `step(examples)` is one optimizer step."""

    def __init__(self, policy: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, settings: SFTTrainingSettings) -> None:
        self.policy, self.tokenizer, self.settings = policy, tokenizer, settings
        self.optimizer = torch.optim.AdamW(
            trainable_parameters(policy), lr=settings.learning_rate, weight_decay=settings.weight_decay,
            fused=next(policy.parameters()).device.type in ("cpu", "cuda"),
        )

    def step(self, examples: Sequence[SFTExample]) -> dict[str, float]:
        s, device = self.settings, next(self.policy.parameters()).device
        self.policy.train()
        n_micro = -(-len(examples) // s.micro_batch_size)
        loss, entropy, tokens = 0.0, 0.0, 0
        for start in range(0, len(examples), s.micro_batch_size):
            batch = {k: v.to(device) for k, v in sft_batch(examples[start : start + s.micro_batch_size], self.tokenizer, s.max_seq_length).items()}
            mask = batch["response_mask"]
            out = get_response_log_probs(self.policy, batch["input_ids"], batch["labels"], return_token_entropy=True, response_mask=mask)
            per_example_tokens = mask.sum().item() / len(mask)
            micro_loss, _ = sft_microbatch_train_step(out["log_probs"], mask, n_micro, normalize_constant=per_example_tokens)
            loss += micro_loss.item()
            entropy += masked_mean(out["token_entropy"], mask).item() / n_micro
            tokens += int(mask.sum())
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), s.max_grad_norm).item()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return {"loss": loss, "grad_norm": grad_norm, "token_entropy": entropy, "response_tokens": tokens,
                "learning_rate": self.optimizer.param_groups[0]["lr"]}


def save_run_state(folder: Path, config: SFTTrainingSettings, trainer: SFTTrainer, step: int, started: float, extra: dict[str, Any]) -> None:
    """A resumable checkpoint through alignment.checkpoint (policy, optimizer, RNG, position, elapsed time)."""
    save_checkpoint(folder, config, trainer.policy, trainer.tokenizer, trainer.optimizer,
                    {"step": step, "elapsed_s": time.perf_counter() - started} | extra)
