"""The library under the handouts' `run_*` names and argument names: one call into `alignment` each."""

import os
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.data import Dataset
from transformers import PreTrainedTokenizerBase

from alignment.advantages import compute_group_normalized_rewards
from alignment.data import packed_sft
from alignment.dpo import compute_per_instance_dpo_loss
from alignment.grading.parsers import parse_gsm8k_response, parse_mmlu_response
from alignment.grpo_step import grpo_microbatch_train_step
from alignment.logprobs import compute_entropy, get_response_log_probs
from alignment.losses import compute_grpo_clip_loss, compute_naive_policy_gradient_loss, compute_policy_gradient_loss
from alignment.masked import masked_mean, masked_normalize
from alignment.sft import sft_microbatch_train_step, tokenize_prompt_and_output


def run_tokenize_prompt_and_output(
    prompt_strs: list[str], output_strs: list[str], tokenizer: PreTrainedTokenizerBase
) -> dict[str, torch.Tensor]:
    return tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer)


def run_compute_group_normalized_rewards(
    reward_fn: Callable[[str, str], dict[str, float]],
    rollout_responses: list[str],
    repeated_ground_truths: list[str],
    group_size: int,
    advantage_eps: float,
    normalize_by_std: bool,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    return compute_group_normalized_rewards(
        reward_fn, rollout_responses, repeated_ground_truths, group_size, advantage_eps, normalize_by_std
    )


def run_compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    return compute_entropy(logits)


def run_get_response_log_probs(
    model: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor, return_token_entropy: bool
) -> dict[str, torch.Tensor]:
    return get_response_log_probs(model, input_ids, labels, return_token_entropy)


def run_compute_naive_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor, policy_log_probs: torch.Tensor
) -> torch.Tensor:
    return compute_naive_policy_gradient_loss(raw_rewards_or_advantages, policy_log_probs)


def run_compute_grpo_clip_loss(
    advantages: torch.Tensor, policy_log_probs: torch.Tensor, old_log_probs: torch.Tensor, cliprange: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return compute_grpo_clip_loss(advantages, policy_log_probs, old_log_probs, cliprange)


def run_compute_policy_gradient_loss(
    policy_log_probs: torch.Tensor,
    loss_type: str,
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return compute_policy_gradient_loss(policy_log_probs, loss_type, raw_rewards, advantages, old_log_probs, cliprange)


def run_masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    return masked_mean(tensor, mask, dim)


def run_masked_normalize(
    tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None, normalize_constant: float = 1.0
) -> torch.Tensor:
    return masked_normalize(tensor, mask, dim, normalize_constant)


def run_sft_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    normalize_constant: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return sft_microbatch_train_step(policy_log_probs, response_mask, gradient_accumulation_steps, normalize_constant)


def run_grpo_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    loss_type: Literal["no_baseline", "reinforce_with_baseline", "grpo_clip", "grpo_no_clip"],
    raw_rewards: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    return grpo_microbatch_train_step(
        policy_log_probs,
        response_mask,
        gradient_accumulation_steps,
        loss_type,
        raw_rewards,
        advantages,
        old_log_probs,
        cliprange,
    )


# The supplementary (packed SFT, answer parsing, DPO) adapters of the CS336 A5 reference.


def get_packed_sft_dataset(
    tokenizer: PreTrainedTokenizerBase, dataset_path: str | os.PathLike, seq_length: int, shuffle: bool
) -> Dataset:
    return packed_sft.get_packed_sft_dataset(tokenizer, dataset_path, seq_length, shuffle)


def run_iterate_batches(dataset: Dataset, batch_size: int, shuffle: bool):
    return packed_sft.iterate_batches(dataset, batch_size, shuffle)


def run_parse_mmlu_response(mmlu_example: dict[str, Any], model_output: str) -> str | None:
    return parse_mmlu_response(mmlu_example, model_output)


def run_parse_gsm8k_response(model_output: str) -> str | None:
    return parse_gsm8k_response(model_output)


def run_compute_per_instance_dpo_loss(
    lm: torch.nn.Module,
    lm_ref: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    beta: float,
    prompt: str,
    response_chosen: str,
    response_rejected: str,
) -> torch.Tensor:
    return compute_per_instance_dpo_loss(lm, lm_ref, tokenizer, beta, prompt, response_chosen, response_rejected)
