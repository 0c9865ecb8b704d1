"""The trained policy as a standard model folder: config.json, safetensors weights and the tokenizer.

transformers (`from_pretrained`), vLLM and our TransformerLM loader all read it, so every script's `--model`
takes it. A transformers policy is saved with save_pretrained; our TransformerLM as the Llama folder of the
same architecture. Loading back into a live policy (resume) copies the tensors in place.

A LoRA policy (alignment/models/lora.py) is saved as its adapter in peft's format (adapter_config.json,
adapter_model.safetensors: what `peft.PeftModel.from_pretrained` loads), and loaded back the same way.
Rollout engines that keep their own weights get the policy as a standard model's state dict, adapters merged.
"""

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from alignment.models.lm_checkpoint import save_llama_folder
from alignment.models.lora import (
    ADAPTER_CONFIG,
    ADAPTER_FILE,
    adapter_file_key,
    adapter_state_dict,
    has_lora,
    merged_state_dict,
    sync_state_dict,
)
from alignment.models.transformer_lm import TransformerLM, load_llama_state_dict

INDEX_FILE = "model.safetensors.index.json"


def save_policy(policy: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """A standard model folder, or for a LoRA policy its adapter folder (transformers saves only the adapter)."""
    if isinstance(policy, TransformerLM):
        return save_llama_folder(policy, tokenizer, directory)
    policy.save_pretrained(directory)  # type: ignore[operator]
    tokenizer.save_pretrained(directory)
    return directory


def is_adapter_folder(directory: Path) -> bool:
    return (directory / ADAPTER_CONFIG).is_file()


def save_merged_folder(adapter: Path, directory: Path) -> Path:
    """The standard model folder of a base model with an adapter folder's LoRA merged in, by peft itself
    (`merge_and_unload`), in the adapter's dtype; the base is the one the adapter names."""
    from peft import PeftModel

    base_name = json.loads((adapter / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    dtype = next(iter(read_adapter(adapter).values())).dtype
    base = AutoModelForCausalLM.from_pretrained(base_name, dtype=dtype)
    PeftModel.from_pretrained(base, adapter).merge_and_unload().save_pretrained(directory)
    AutoTokenizer.from_pretrained(adapter).save_pretrained(directory)
    return directory


def read_adapter(directory: Path) -> dict[str, torch.Tensor]:
    path = directory / ADAPTER_FILE
    try:
        return load_file(path)
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{path}: not a readable safetensors file ({err})") from None


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of a model folder: one file, or the shards its index lists."""
    index = directory / INDEX_FILE
    if index.is_file():
        return [directory / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    return [directory / "model.safetensors"]


def read_weights(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model folder; an unreadable file is an error naming it."""
    weights: dict[str, torch.Tensor] = {}
    for path in weight_files(directory):
        try:
            weights |= load_file(path)
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{path}: not a readable safetensors file ({err})") from None
    return weights


def load_policy_weights(policy: torch.nn.Module, directory: Path) -> None:
    """Copy a saved policy's weights into `policy` (same architecture); a missing or unknown tensor is an error."""
    if has_lora(policy):
        return load_adapter_weights(policy, directory)
    weights = read_weights(directory)
    if isinstance(policy, TransformerLM):
        try:
            load_llama_state_dict(policy, weights)
        except ValueError as err:
            raise ValueError(f"{directory}: {err}") from None
        return
    live = policy.state_dict()
    unknown = sorted(set(weights) - set(live))
    loaded = {live[name].data_ptr() for name in weights if name in live}
    # save_pretrained stores a tied tensor once (the LM head shares the embedding): absent is fine when shared
    missing = sorted(name for name in set(live) - set(weights) if live[name].data_ptr() not in loaded)
    misshapen = sorted(name for name in set(weights) & set(live) if weights[name].shape != live[name].shape)
    if unknown or missing or misshapen:
        raise ValueError(
            f"{directory}: weights do not fit the policy (missing {missing[:3]}, unknown {unknown[:3]}, "
            f"of another shape {misshapen[:3]})"
        )
    policy.load_state_dict(weights, strict=False)


def load_adapter_weights(policy: torch.nn.Module, directory: Path) -> None:
    """Copy a saved adapter (peft's adapter folder) into a LoRA policy of the same settings; a missing, unknown
    or misshapen tensor is an error."""
    weights = read_adapter(directory)
    live = {adapter_file_key(name): tensor for name, tensor in adapter_state_dict(policy).items()}
    missing, unknown = sorted(set(live) - set(weights)), sorted(set(weights) - set(live))
    misshapen = sorted(k for k in set(live) & set(weights) if live[k].shape != weights[k].shape)
    if missing or unknown or misshapen:
        raise ValueError(
            f"{directory}: the adapter does not fit the policy's LoRA settings (missing {missing[:3]}, "
            f"unknown {unknown[:3]}, of another shape {misshapen[:3]})"
        )
    with torch.no_grad():
        for key, tensor in live.items():
            tensor.copy_(weights[key])


def cast_floating(state_dict: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The floating-point tensors in `dtype` (those already in it as they are, not copied), the others as they are."""
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()}


def push_weights(engine, policy: torch.nn.Module) -> None:
    """Hand the policy's current weights to a rollout engine: nothing to do for an in-process engine that samples
    the policy object itself; the adapters alone to an engine that serves LoRA (`serves_lora`); else the weights
    as a standard model's (LoRA adapters merged in); in the engine's dtype where it has one (`dtype`: vLLM)."""
    if getattr(engine, "model", None) is policy:
        return
    weights = sync_state_dict(policy) if getattr(engine, "serves_lora", False) else merged_state_dict(policy)
    dtype = getattr(engine, "dtype", None)
    engine.load_policy_weights(weights if dtype is None else cast_floating(weights, dtype))
