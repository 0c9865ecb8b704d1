"""The library under the 2026 CS336 A5 handout's ("Reasoning RL") `run_*` names and argument names.

A 2026 student copies this file over the course repository's tests/adapters.py (a 2025 student copies
tests/adapters.py, the 2025 names); the course's own suite then runs against `alignment`. One call into the library
each: the 2026 faces (`compute_rollout_rewards`, `compute_group_advantages`, `reweighted_policy_gradient_loss`,
`aggregate_loss_across_microbatch`, `grpo_train_step`) share their implementation with the 2025 ones.
"""

import os
from collections.abc import Callable
from typing import Any, Literal

import torch
from torch.utils.data import Dataset
from transformers import PreTrainedTokenizerBase

from alignment.advantages import compute_group_advantages, compute_rollout_rewards
from alignment.data import packed_sft
from alignment.dpo import compute_per_instance_dpo_loss
from alignment.grading.parsers import parse_gsm8k_response, parse_mmlu_response
from alignment.grpo_step import aggregate_loss_across_microbatch
from alignment.grpo_train_step import grpo_train_step
from alignment.logprobs import get_response_log_probs
from alignment.losses import reweighted_policy_gradient_loss
from alignment.masked import masked_normalize
from alignment.sft import sft_microbatch_train_step, tokenize_prompt_and_output


def run_tokenize_prompt_and_output(
    prompt_strs: list[str], output_strs: list[str], tokenizer: PreTrainedTokenizerBase
) -> dict[str, torch.Tensor]:
    return tokenize_prompt_and_output(prompt_strs, output_strs, tokenizer, prompt_special_tokens=False)


def run_get_response_log_probs(
    model: torch.nn.Module, input_ids: torch.Tensor, labels: torch.Tensor, return_token_entropy: bool
) -> dict[str, torch.Tensor]:
    return get_response_log_probs(model, input_ids, labels, return_token_entropy)


def run_compute_rollout_rewards(
    reward_fn: Callable[[str, str], dict[str, float]], rollout_responses: list[str], repeated_ground_truths: list[str]
) -> tuple[torch.Tensor, dict[str, float]]:
    return compute_rollout_rewards(reward_fn, rollout_responses, repeated_ground_truths)


def run_compute_group_normalized_rewards(
    raw_rewards: torch.Tensor,
    group_size: int,
    baseline: Literal["mean", "none"] = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: Literal["std", "none", "mean"] = "std",
) -> tuple[torch.Tensor, dict[str, float]]:
    return compute_group_advantages(raw_rewards, group_size, baseline, advantage_eps, advantage_normalizer)


def run_compute_policy_gradient_loss(
    raw_rewards_or_advantages: torch.Tensor,
    policy_log_probs: torch.Tensor,
    importance_reweighting_method: Literal["none", "noclip", "grpo", "gspo"] = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    response_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return reweighted_policy_gradient_loss(
        raw_rewards_or_advantages,
        policy_log_probs,
        importance_reweighting_method,
        old_log_probs,
        cliprange,
        response_mask,
    )


def run_aggregate_loss_across_microbatch(
    per_token_policy_gradient_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_normalization: Literal["sequence", "constant"] = "sequence",
    normalization_constant: int | None = None,
) -> torch.Tensor:
    return aggregate_loss_across_microbatch(
        per_token_policy_gradient_loss, mask, loss_normalization, normalization_constant
    )


def run_grpo_train_step(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    gradient_accumulation_steps: int,
    max_grad_norm: float | None,
    reward_fn: Callable[[str, str], dict[str, float]],
    repeated_prompts: list[str],
    rollout_responses: list[str],
    repeated_ground_truths: list[str],
    group_size: int,
    baseline: Literal["mean", "none"] = "mean",
    advantage_eps: float = 1e-6,
    advantage_normalizer: Literal["std", "none", "mean"] = "std",
    importance_reweighting_method: Literal["none", "noclip", "grpo", "gspo"] = "none",
    old_log_probs: torch.Tensor | None = None,
    cliprange: float | None = None,
    loss_normalization: Literal["sequence", "constant"] = "sequence",
    normalization_constant: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
    return grpo_train_step(
        model,
        tokenizer,
        optimizer,
        gradient_accumulation_steps,
        max_grad_norm,
        reward_fn,
        repeated_prompts,
        rollout_responses,
        repeated_ground_truths,
        group_size,
        baseline,
        advantage_eps,
        advantage_normalizer,
        importance_reweighting_method,
        old_log_probs,
        cliprange,
        loss_normalization,
        normalization_constant,
    )


# The optional RLHF / safety supplement's adapters.


def run_masked_normalize(
    tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None, normalize_constant: float = 1.0
) -> torch.Tensor:
    return masked_normalize(tensor, mask, dim, normalize_constant)


def run_sft_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    normalize_constant: int | None = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return sft_microbatch_train_step(
        policy_log_probs,
        response_mask,
        gradient_accumulation_steps,
        1.0 if normalize_constant is None else normalize_constant,
    )


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
