"""Supervised fine-tuning pieces: prompt/output tokenization with a response mask, and the microbatch step."""

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from alignment.masked import masked_normalize


def tokenize_prompt_and_output(
    prompt_strs: Sequence[str],
    output_strs: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    prompt_special_tokens: bool = True,
) -> dict[str, torch.Tensor]:
    """Tokenize each prompt and output separately, concatenate, and right-pad with the pad id.

    Prompts get the tokenizer's usual special tokens (a BOS where the model expects one) unless
    `prompt_special_tokens` is False (the 2026 CS336 handout: none at all); outputs get none, so nothing is inserted
    between prompt and output. With L the longest prompt+output length::

      input_ids     (batch, L - 1): full[:, :-1]
      labels        (batch, L - 1): full[:, 1:]
      response_mask (batch, L - 1): True where the label is an output token (never on padding).
    """
    if len(prompt_strs) != len(output_strs):
        raise ValueError(f"got {len(prompt_strs)} prompts but {len(output_strs)} outputs")
    if tokenizer.pad_token_id is None:
        raise ValueError("tokenizer has no pad_token_id; set tokenizer.pad_token (e.g. to the EOS token)")
    prompts = tokenizer(list(prompt_strs), add_special_tokens=prompt_special_tokens)["input_ids"]
    outputs = tokenizer(list(output_strs), add_special_tokens=False)["input_ids"]
    max_len = max(len(p) + len(o) for p, o in zip(prompts, outputs))
    full = torch.full((len(prompts), max_len), tokenizer.pad_token_id, dtype=torch.long)
    is_output = torch.zeros((len(prompts), max_len), dtype=torch.bool)
    for i, (p, o) in enumerate(zip(prompts, outputs)):
        full[i, : len(p) + len(o)] = torch.tensor(p + o, dtype=torch.long)
        is_output[i, len(p) : len(p) + len(o)] = True
    return {"input_ids": full[:, :-1], "labels": full[:, 1:], "response_mask": is_output[:, 1:]}


def sft_microbatch_train_step(
    policy_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    gradient_accumulation_steps: int,
    normalize_constant: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative log-likelihood of response tokens, backward() on it, and return it.

    loss = -sum(log_probs * mask) / normalize_constant / batch_size / gradient_accumulation_steps.
    policy_log_probs, response_mask: (batch, seq).
    """
    batch_size = policy_log_probs.shape[0]
    nll = -masked_normalize(policy_log_probs, response_mask, dim=None, normalize_constant=normalize_constant)
    loss = nll / batch_size / gradient_accumulation_steps
    loss.backward()
    return loss, {"response_tokens": response_mask.sum().detach()}
