"""The rollout interface: prompts in, `group size` samples per prompt out, with tokens and log-probs.

Backends: `hf` (transformers; CPU or GPU; alignment.hf_rollout), `vllm` (CUDA; alignment.vllm_rollout) and
`transformer_lm` (our own TransformerLM and sampler; alignment.lm_rollout). All report, for every sampled
token, its log-prob under the distribution it was sampled from (logits divided by the temperature, restricted
to the top-p nucleus and renormalized; at temperature 0 the plain softmax). At temperature 1 and top_p 1
that is the policy's own log-prob.
"""

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import torch

Backend = Literal["auto", "hf", "vllm", "transformer_lm"]
FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    min_tokens: int = 0  # EOS and stop strings are ignored until this many tokens exist
    stop: tuple[str, ...] = ("</answer>",)
    include_stop_str_in_output: bool = True
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}")


@dataclass
class Rollout:
    prompt_index: int  # position of the prompt in the generate() call
    text: str  # decoded response (stop string kept or dropped per the config; no special tokens)
    token_ids: list[int]  # sampled tokens, EOS or the token completing a stop string included
    logprobs: list[float]  # one per token in token_ids
    finish_reason: FinishReason  # "stop": EOS or a stop string; "length": max_tokens reached


class RolloutEngine(Protocol):
    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig) -> list[Rollout]:
        """n samples per prompt, prompt-major: rollouts[i * n : (i + 1) * n] answer prompts[i]."""
        ...

    def load_policy_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Make later generations use these weights (called after each optimizer step)."""
        ...


def vllm_usable() -> bool:
    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def resolve_backend(backend: Backend) -> Literal["hf", "vllm", "transformer_lm"]:
    """`auto` picks vllm when it is installed and CUDA is present, else hf (never transformer_lm, which is
    chosen by name); an impossible choice raises."""
    if backend == "auto":
        return "vllm" if vllm_usable() else "hf"
    if backend == "vllm" and not vllm_usable():
        raise ValueError("backend 'vllm' needs the vllm extra (uv sync --extra vllm) and a CUDA GPU; use --backend hf")
    if backend not in ("hf", "vllm", "transformer_lm"):
        raise ValueError(f"unknown backend {backend!r}: expected auto, hf, vllm or transformer_lm")
    return backend


def make_rollout_engine(
    model: str,
    backend: Backend = "auto",
    device: str = "cuda:0" if torch.cuda.is_available() else "cpu",
    dtype: torch.dtype | None = None,
    gpu_memory_utilization: float = 0.85,
    seed: int = 0,
) -> RolloutEngine:
    """Build an engine for `model` (a local folder, hub id, or `smollm2-135m`) on `device`.

    dtype defaults to bfloat16 on GPU and float32 on CPU. transformer_lm takes one of our TransformerLM
    folders, an HF Llama folder or `smollm2-135m` (alignment.lm_checkpoint.load_transformer_lm).
    """
    from alignment.models import resolve_model

    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    resolved = resolve_backend(backend)
    if resolved == "transformer_lm":
        from alignment.lm_checkpoint import load_transformer_lm
        from alignment.lm_rollout import TransformerLMRolloutEngine

        lm, lm_tokenizer = load_transformer_lm(model, device, dtype)
        return TransformerLMRolloutEngine(lm, lm_tokenizer)
    if resolved == "vllm":
        from alignment.vllm_rollout import VLLMRolloutEngine

        return VLLMRolloutEngine(resolve_model(model), device, gpu_memory_utilization, dtype, seed)
    from alignment.hf_rollout import HFRolloutEngine
    from alignment.models import load_model_and_tokenizer

    policy, tokenizer = load_model_and_tokenizer(model, device=device, dtype=dtype)
    return HFRolloutEngine(policy.eval(), tokenizer)
