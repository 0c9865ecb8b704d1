"""What the local rollout backends share around their sampling loops: stop-string checks on the tail of each
sequence, turning sampled tokens into a Rollout, and policy weight loads skipped when tensors are shared."""

from collections.abc import Sequence

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from alignment.rollout import Rollout, SamplingConfig

STOP_TAIL_TOKENS = 8  # extra tokens decoded beyond a stop string's length, for tokens that decode to nothing


def stop_hits(tokenizer: PreTrainedTokenizerBase, sequences: list[list[int]], stop: tuple[str, ...]) -> list[bool]:
    """Whether each token sequence's decoded tail contains one of the stop strings."""
    tail = max(len(s) for s in stop) + STOP_TAIL_TOKENS
    texts = tokenizer.batch_decode([seq[-tail:] for seq in sequences], skip_special_tokens=True)
    return [any(s in text for s in stop) for text in texts]


def finish_rollout(
    tokenizer: PreTrainedTokenizerBase,
    eos_ids: Sequence[int],
    prompt_index: int,
    tokens: list[int],
    logprobs: list[float],
    finish: str,
    sampling: SamplingConfig,
) -> Rollout:
    """The Rollout of one sampled sequence: text without a final EOS, cut after (or at) the first stop string."""
    ends_with_eos = finish == "stop" and tokens[-1] in eos_ids
    text = tokenizer.decode(tokens[:-1] if ends_with_eos else tokens, skip_special_tokens=True)
    hits = [(text.find(s), s) for s in sampling.stop if s in text]
    if hits and finish == "stop":
        at, s = min(hits)
        text = text[: at + len(s)] if sampling.include_stop_str_in_output else text[:at]
    return Rollout(prompt_index, text, tokens, logprobs, finish)  # type: ignore[arg-type]


def load_unless_shared(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load `state_dict` into `model`, unless the model already holds exactly these tensors (a colocated policy)."""
    own = model.state_dict()
    if own.keys() == state_dict.keys() and all(own[k].data_ptr() == state_dict[k].data_ptr() for k in own):
        return
    model.load_state_dict(state_dict)
