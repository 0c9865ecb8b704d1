"""The trained policy as a standard model folder: config.json, safetensors weights and the tokenizer.

transformers (`from_pretrained`), vLLM and our TransformerLM loader all read it, so every script's `--model`
takes it. A transformers policy is saved with save_pretrained; our TransformerLM as the Llama folder of the
same architecture. Loading back into a live policy (resume) copies the tensors in place.
"""

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerBase

from alignment.lm_checkpoint import save_llama_folder
from alignment.transformer_lm import TransformerLM, load_llama_state_dict

INDEX_FILE = "model.safetensors.index.json"


def save_policy(policy: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    if isinstance(policy, TransformerLM):
        return save_llama_folder(policy, tokenizer, directory)
    policy.save_pretrained(directory)  # type: ignore[operator]
    tokenizer.save_pretrained(directory)
    return directory


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
        raise ValueError(f"{directory}: weights do not fit the policy (missing {missing[:3]}, unknown {unknown[:3]}, "
                         f"of another shape {misshapen[:3]})")
    policy.load_state_dict(weights, strict=False)
