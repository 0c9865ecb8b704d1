"""The rollout interface: prompts in, `group size` samples per prompt out, with tokens and log-probs.

Backends (chosen and built in alignment.rollout.backends; this module depends on none of them): `hf`
(transformers; alignment.rollout.hf_engine), `vllm` (vLLM's CUDA or CPU build; alignment.rollout.vllm_engine) and
`transformer_lm` (our own TransformerLM and sampler; alignment.rollout.lm_engine). All report, for every sampled
token, its log-prob under the distribution it was sampled from (logits divided by the temperature, restricted
to the top-p nucleus and renormalized; at temperature 0 the plain softmax). At temperature 1 and top_p 1
that is the policy's own log-prob.

Prompts are text (tokenized by the engine) or token ids (taken as they are, nothing added): a multi-turn episode
passes its ids so far, so that no sampled token is ever decoded and tokenized again (alignment/envs/).

Seeds: `SamplingConfig.seed` seeds a whole call. Prompt i of a call draws its samples from `prompt_seed(seed, i)`, so
every sample of a call is an independent draw and the same seed reproduces the call. `positions` replaces i by a
position of the caller's choosing (a prompt's place in a larger seeded batch, parts of which are sampled apart), so
two parts never draw the same random numbers.
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

Backend = Literal["auto", "hf", "vllm", "transformer_lm"]  # the names; alignment.rollout.backends builds them
FinishReason = Literal["stop", "length"]
Prompt = str | Sequence[int]  # text, or token ids fed to the model as they are


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    min_tokens: int = 0  # EOS and stop strings are ignored until this many tokens exist
    stop: tuple[str, ...] = ("</answer>",)
    include_stop_str_in_output: bool = True
    seed: int | None = None  # of the whole call (see prompt_seed); None: unseeded

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")


def prompt_seed(seed: int, position: int) -> int:
    """The seed of the prompt at `position` in a call seeded `seed`: 62 bits of a hash of the pair.

    A hash, not seed + position: vLLM seeds the i-th of a request's n samples with its seed + i, and the calls of
    successive steps have successive seeds, so any offset scheme would give some other (prompt, sample) pair, of this
    call or the next, the same random numbers. 62 bits leave room for that + i below 2^63 (torch's generators take
    64-bit seeds); two pairs meet with probability about n / 2^62.
    """
    digest = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


@dataclass
class Rollout:
    prompt_index: int  # position of the prompt in the generate() call
    text: str  # decoded response (stop string kept or dropped per the config; no special tokens)
    token_ids: list[int]  # sampled tokens, EOS or the token completing a stop string included
    logprobs: list[float]  # one per token in token_ids
    finish_reason: FinishReason  # "stop": EOS or a stop string; "length": max_tokens reached
    # the policy version that sampled each token, when the engine streams with in-flight weight updates
    # (alignment/rollout/streaming.py); None: every token came from the weights the engine held for the whole call
    versions: list[int] | None = None
    # set when the rollout carries its own prompt and tokens it did not sample (an environment's observations,
    # alignment/envs/episode.py): the prompt's ids (None: the call's prompt), and 1 on each token of token_ids the
    # sampler drew, 0 on the others, whose logprobs are 0 (None: every token was sampled)
    prompt_ids: list[int] | None = None
    sampled_mask: list[int] | None = None


class RolloutEngine(Protocol):
    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, positions: Sequence[int] | None = None
    ) -> list[Rollout]:
        """n samples per prompt, prompt-major: rollouts[i * n : (i + 1) * n] answer prompts[i]; prompt i seeded by
        positions[i] (None: i)."""
        ...

    def load_policy_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Make later generations use these weights (called after each optimizer step)."""
        ...
