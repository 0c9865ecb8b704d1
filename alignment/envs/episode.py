"""An episode as the learner trains on it: one token sequence, a mask on the sampled tokens, rewards per turn.

The sequence is the chat-templated first prompt, then each model turn's sampled ids as the engine returned them,
then each observation's ids: the chat template's end of the assistant turn (unless the model sampled it), the
observation as a user turn and the header of the next assistant turn. Only the observation's text is tokenized;
the model's ids are never decoded and tokenized again, so the learner scores exactly what the sampler drew.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers import PreTrainedTokenizerBase

from alignment.rollout.interface import Rollout

StoppedBy = Literal["done", "max_turns", "max_tokens", "env_error", "env_timeout"]
ENV_FAILURES: tuple[StoppedBy, ...] = ("env_error", "env_timeout")  # the environment raised, or missed its deadline

_PROBE = "\x00"  # a message content no template alters, to find where the template puts it


@dataclass
class Episode(Rollout):
    """A Rollout whose token_ids interleave model turns (sampled_mask 1) and observations (0, logprob 0).

    `text` is the transcript after the first prompt (turns and observations, as the model saw them); `reward` the
    final reward (the last turn's), which is what GRPO groups normalize by default.
    """

    reward: float = 0.0
    turn_rewards: list[float] = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)  # index in token_ids where each model turn begins
    stopped_by: StoppedBy = "done"
    info: dict[str, Any] = field(default_factory=dict)  # the environment's, merged over its turns

    @property
    def turns(self) -> int:
        return len(self.turn_starts)

    @property
    def failed(self) -> bool:
        """The environment raised or missed its deadline (the error in info["env_error"]): not a trainable episode."""
        return self.stopped_by in ENV_FAILURES


def intact_groups(episodes: Sequence[Episode], group_size: int) -> list[bool]:
    """Per group of `group_size` consecutive episodes: whether none of them failed in its environment (a group with
    a failed episode is dropped whole: its advantages would be normalized over a partial group)."""
    return [not any(e.failed for e in episodes[i : i + group_size]) for i in range(0, len(episodes), group_size)]


def turn_returns(episodes: Sequence[Rollout]) -> tuple[list[torch.Tensor], list[list[int]]]:
    """Per episode: (turns,) the return from each turn (the sum of its and later turns' rewards), and the tokens each
    turn spans in token_ids (its model turn and the observation after it)."""
    returns, spans = [], []
    for e in episodes:
        if not isinstance(e, Episode):
            raise TypeError("--turn-rewards needs multi-turn episodes (--env)")
        rewards = torch.tensor(e.turn_rewards, dtype=torch.float32)
        returns.append(rewards.flip(0).cumsum(0).flip(0))
        bounds = e.turn_starts + [len(e.token_ids)]
        spans.append([b - a for a, b in zip(bounds, bounds[1:])])
    return returns, spans


class ChatRendering:
    """The chat template's pieces around an episode's messages, as text: the first prompt, and what follows a model
    turn up to the next one."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, context: Sequence[dict[str, str]] = ()) -> None:
        """`context`: chat messages before the first observation (a system prompt, demonstration turns)."""
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("multi-turn episodes need a tokenizer with a chat template (the model's turns)")
        self.tokenizer = tokenizer
        self.context = list(context)
        exchange = self.context + [{"role": "user", "content": _PROBE}, {"role": "assistant", "content": _PROBE}]
        closed = self._render(exchange, generation_prompt=False)
        following = self._render(exchange + [{"role": "user", "content": _PROBE}], generation_prompt=True)
        if not following.startswith(closed):
            raise ValueError("the chat template renders an earlier turn differently once a later one follows")
        self.turn_end = closed[closed.rindex(_PROBE) + 1 :]  # e.g. "<|im_end|>\n"
        self.user_turn = following[len(closed) :]  # e.g. "<|im_start|>user\n\x00<|im_end|>\n<|im_start|>assistant\n"
        eos = tokenizer.eos_token
        self.eos_text = eos if isinstance(eos, str) and self.turn_end.startswith(eos) else None

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)

    def prompt_ids(self, first_observation: str) -> list[int]:
        text = self._render(self.context + [{"role": "user", "content": first_observation}], generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def observation_ids(self, observation: str, turn_ids: list[int]) -> list[int]:
        """What follows a model turn `turn_ids` (its sampled ids): the turn's end unless the model sampled it, the
        observation as a user turn, the next assistant header."""
        end = self.turn_end
        if self.eos_text is not None and turn_ids and turn_ids[-1] == self.tokenizer.eos_token_id:
            end = end[len(self.eos_text) :]
        text = end + self.user_turn.replace(_PROBE, observation)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]
