"""LoRA: train low-rank adapters on a frozen policy (peft), for models whose full fine-tuning does not fit.

Full fine-tuning keeps weights, gradients and two AdamW moments: about 16 bytes a parameter in float32 before
activations. With LoRA (Hu et al., 2021) each targeted linear layer W gains a trainable pair A (rank x in),
B (out x rank), B initialized to 0, and computes W x + (alpha / rank) B A x; W stays frozen, so gradients and
optimizer states cover the adapters only. peft builds the adapters; they enter a run at model loading
(`apply_lora`), and from there through the optimizer (`trainable_parameters`), the KL reference
(`reference_model`: the same base weights with the adapters off), checkpoints (the adapter in peft's format),
weight export (`merged_state_dict`: what a rollout engine with its own weights gets, and policy/) and weight
sync (`sync_state_dict`: the adapters alone, for Ray generators and a vLLM engine serving LoRA).

The model stays a transformers model (transformers' peft integration, `add_adapter`), so everything that calls
`model.base_model`, `get_output_embeddings` or `save_pretrained` keeps working: `save_pretrained` writes the
adapter folder that `peft.PeftModel.from_pretrained` loads.

The forward tape (`--reuse-rollout-forward`, alignment/rollout/forward_tape.py) works with LoRA at dropout 0: peft's
layer computes base_layer(x) + lora_B(lora_A(x)) * scale with three nn.Linear modules, each recorded and
replayed like any other. A dropout above 0 makes the training forward differ from the sampler's, so it turns
the tape off (and `--reuse-rollout-forward on` is then refused).
"""

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from alignment.config.settings import setting
from alignment.distributed.sharding import is_sharded, sharded_copy

ADAPTER = "default"  # peft's adapter name; one adapter per policy
ADAPTER_FILE, ADAPTER_CONFIG = "adapter_model.safetensors", "adapter_config.json"  # peft's adapter folder
ALL_LINEAR = "all-linear"  # peft: every linear layer except the output head


@dataclass
class LoRASettings:
    """The LoRA settings every training script shares (its config dataclass inherits them)."""

    lora_rank: int = setting(
        0,
        "LoRA rank: train low-rank adapters (peft) on every --lora-target-modules layer of the frozen model instead "
        "of every weight; the optimizer then holds only the adapters, the KL reference is the model with its adapters "
        "off, checkpoints hold the adapter, and policy/ is the merged model with the adapter in policy/adapter/. 0: "
        "full fine-tuning.",
    )
    lora_alpha: float = setting(32.0, "LoRA scale numerator: adapters add (alpha / rank) * B A x.")
    lora_target_modules: list[str] = setting(
        [ALL_LINEAR],
        "Layers that get adapters: module names (q_proj, v_proj, ...; repeatable) or all-linear, every linear "
        "projection of the decoder layers (not the LM head).",
    )
    lora_dropout: float = setting(
        0.0,
        "Dropout on the adapters' input while training. Above 0 the training forward differs from the sampler's, "
        "which turns off --reuse-rollout-forward.",
    )


def check_lora(settings: LoRASettings, backend: str | None = None) -> None:
    """Value checks, before any model loads; each failure names the flag."""
    s = settings
    if s.lora_rank < 0:
        raise ValueError(f"--lora-rank must be >= 0 (0: full fine-tuning), got {s.lora_rank}")
    if s.lora_rank == 0:
        return
    if not s.lora_alpha > 0:
        raise ValueError(f"--lora-alpha must be > 0, got {s.lora_alpha}")
    if not 0 <= s.lora_dropout < 1:
        raise ValueError(f"--lora-dropout must be in [0, 1), got {s.lora_dropout}")
    if not s.lora_target_modules:
        raise ValueError("--lora-target-modules is empty: name the layers that get adapters, or all-linear")
    if backend == "transformer_lm":
        raise ValueError(
            "--lora-rank > 0 is not available with --backend transformer_lm: our TransformerLM's sampler "
            "multiplies its layers' weights directly; train it fully (--lora-rank 0) or use --backend hf"
        )


def apply_lora(model: nn.Module, settings: LoRASettings) -> nn.Module:
    """Add trainable LoRA adapters to a transformers model and freeze everything else (rank 0: unchanged)."""
    if settings.lora_rank == 0:
        return model
    from peft import LoraConfig

    targets = settings.lora_target_modules
    model.add_adapter(
        LoraConfig(  # type: ignore[operator]
            r=settings.lora_rank,
            lora_alpha=settings.lora_alpha,
            lora_dropout=settings.lora_dropout,
            target_modules=ALL_LINEAR if targets == [ALL_LINEAR] else list(targets),
            base_model_name_or_path=model.name_or_path,  # type: ignore[union-attr]
        ),
        adapter_name=ADAPTER,
    )
    return model


def has_lora(model: nn.Module) -> bool:
    return bool(getattr(model, "_hf_peft_config_loaded", False))


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """What the optimizer holds: the adapters under LoRA, every parameter otherwise."""
    return [p for p in model.parameters() if p.requires_grad]


def frozen_copy(policy: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """A frozen copy of the policy as it is now, in eval mode: its own tensors for every weight that trains, while
    weights that never train (a LoRA base) are shared, not copied. A policy sharded over processes gets a copy
    sharded the same way (alignment/distributed/sharding.py), its shards in `dtype` (the dtype the policy computes
    in: a frozen copy needs no float32 master)."""
    if is_sharded(policy):
        return sharded_copy(policy, dtype).eval().requires_grad_(False)
    shared = {id(p): p for p in policy.parameters() if not p.requires_grad}
    return copy.deepcopy(policy, memo=shared).eval().requires_grad_(False)


@torch.no_grad()
def copy_trainable(policy: nn.Module, copied: nn.Module) -> None:
    """Bring a frozen_copy of `policy` up to date: each weight that trains copied into the copy's own tensor (each
    rank its shard when sharded)."""
    own = dict(copied.named_parameters())
    for name, parameter in policy.named_parameters():
        if parameter.requires_grad:
            target = own[name]
            (target.to_local() if isinstance(target, DTensor) else target).copy_(
                parameter.to_local() if isinstance(parameter, DTensor) else parameter
            )


def reference_model(policy: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """The frozen initial policy, for KL to the reference. Under LoRA it is the base model: a copy of the module
    tree that shares the frozen base weights (no second copy of the model) with its adapters switched off."""
    reference = frozen_copy(policy, dtype)
    if has_lora(reference):
        reference.disable_adapters()  # type: ignore[operator]
    return reference


def lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


@torch.no_grad()
def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights as a standard model's state dict (transformers names): W + (alpha / rank) B A for each adapted
    layer, every other tensor as it is (shared, not copied). A model without adapters gives its own state_dict."""
    if not has_lora(model):
        return model.state_dict()
    deltas = {
        f"{name}.base_layer.weight": layer.get_delta_weight(ADAPTER) for name, layer in lora_layers(model).items()
    }
    merged = {}
    for key, tensor in model.state_dict().items():
        if ".lora_A." in key or ".lora_B." in key:
            continue
        merged[key.replace(".base_layer.", ".")] = tensor + deltas[key] if key in deltas else tensor
    return merged


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors by their live names (`...q_proj.lora_A.default.weight`): what changes in training."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def sync_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """What a weight sync sends to a copy of the policy: the adapters alone under LoRA (the base weights never
    change), the whole state dict otherwise."""
    return adapter_state_dict(model) if has_lora(model) else model.state_dict()


def adapter_file_key(live_name: str) -> str:
    """The name peft's adapter file gives a live adapter tensor (`base_model.model.` prefix, no adapter name)."""
    return "base_model.model." + live_name.replace(f".{ADAPTER}.", ".")


def is_adapter_state(state_dict: dict[str, torch.Tensor]) -> bool:
    """Whether a state dict holds LoRA adapters (a LoRA policy's weight sync) rather than a model's weights."""
    return any(".lora_A." in key for key in state_dict)


def save_adapter_folder(adapters: dict[str, torch.Tensor], settings: LoRASettings, base: str, folder: Path) -> Path:
    """Adapter tensors by their live names (sync_state_dict) as peft's adapter folder, for an engine holding only
    the base model (vLLM's LoRA support). The target modules are those the tensors' names show."""
    from peft import LoraConfig
    from safetensors.torch import save_file

    targets = sorted({key.split(".lora_")[0].rsplit(".", 1)[-1] for key in adapters})
    folder.mkdir(parents=True, exist_ok=True)
    LoraConfig(
        r=settings.lora_rank, lora_alpha=settings.lora_alpha, target_modules=targets, base_model_name_or_path=base
    ).save_pretrained(folder)
    save_file({adapter_file_key(k): v.detach().cpu().contiguous() for k, v in adapters.items()}, folder / ADAPTER_FILE)
    return folder
