"""Direct Preference Optimization (Rafailov et al., 2023): the per-instance loss of one preference pair.

    loss = -log sigmoid(beta * [(log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x))])

x is the prompt in the Alpaca template, y_w / y_l the chosen / rejected responses, each ended with EOS; log pi(y|x)
sums the response tokens' log-probs (the prompt's tokens are identical in both and would cancel).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedTokenizerBase

from alignment.data.packed_sft import alpaca_text
from alignment.logprobs import get_response_log_probs
from alignment.sft import tokenize_prompt_and_output


def response_log_probs(
    model: nn.Module, tokenizer: PreTrainedTokenizerBase, prompt: str, responses: list[str]
) -> torch.Tensor:
    """log p(response | prompt) summed over the response tokens, for each response. -> (len(responses),)"""
    batch = tokenize_prompt_and_output([prompt] * len(responses), responses, tokenizer)
    device = next(model.parameters()).device
    mask = batch["response_mask"].to(device)
    log_probs = get_response_log_probs(model, batch["input_ids"].to(device), batch["labels"].to(device))["log_probs"]
    return (log_probs * mask).sum(dim=-1)


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """The DPO loss from sequence log-probs (any matching shapes); elementwise."""
    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -F.logsigmoid(beta * margin)


def compute_per_instance_dpo_loss(
    lm: nn.Module,
    lm_ref: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    beta: float,
    prompt: str,
    response_chosen: str,
    response_rejected: str,
) -> torch.Tensor:
    """The DPO loss of one pair, differentiable in `lm` (the reference is scored without gradients). -> scalar"""
    if tokenizer.eos_token is None:
        raise ValueError("the tokenizer has no EOS token to end the responses with")
    prompt_text = alpaca_text(prompt, "")
    responses = [response_chosen + tokenizer.eos_token, response_rejected + tokenizer.eos_token]
    chosen, rejected = response_log_probs(lm, tokenizer, prompt_text, responses)
    with torch.no_grad():
        ref_chosen, ref_rejected = response_log_probs(lm_ref, tokenizer, prompt_text, responses)
    return dpo_loss(chosen, rejected, ref_chosen.to(chosen.device), ref_rejected.to(chosen.device), beta)
