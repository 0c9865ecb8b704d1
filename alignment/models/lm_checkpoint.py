"""Our checkpoint format for TransformerLM, loadable on a fresh machine with no hub access:

    model.safetensors         the weights under TransformerLM's parameter names (a tied LM head stored once)
    transformer_config.json   {"format": "alignment.TransformerLM", "format_version": 1, <TransformerConfig fields>}
    tokenizer files           the tokenizer itself (save_pretrained), so no name has to resolve elsewhere

The config is written last, so a folder whose save was interrupted is refused. load_transformer_lm also
converts an HF Llama folder (config.json + safetensors) and the packaged `smollm2-135m`.
"""

import json
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, LlamaConfig, PreTrainedTokenizerBase

from alignment.models.a1_checkpoint import is_a1_folder, load_a1_folder
from alignment.models.loading import load_tokenizer, resolve_model
from alignment.models.transformer_lm import (
    TransformerConfig,
    TransformerLM,
    config_from_llama,
    from_llama_state_dict,
    to_llama_state_dict,
)
from alignment.utils.atomic import atomic_write_json

FORMAT = "alignment.TransformerLM"
FORMAT_VERSION = 1
CONFIG_FILE = "transformer_config.json"
WEIGHTS_FILE = "model.safetensors"
# Fields every transformer_config.json of format version 1 holds; later ones (context_length) may be absent
REQUIRED_FIELDS = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "rope_theta", "norm_eps")


def save_transformer_lm(model: TransformerLM, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """Write weights, tokenizer and (last) config into `directory`, created if needed; returns it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).unlink(missing_ok=True)  # a folder being rewritten is incomplete until the end
    tied = model.config.tie_embeddings
    weights = {
        k: v.detach().contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")
    }
    save_file(weights, directory / WEIGHTS_FILE, metadata={"format": FORMAT})
    tokenizer.save_pretrained(directory)
    atomic_write_json(
        directory / CONFIG_FILE, {"format": FORMAT, "format_version": FORMAT_VERSION} | asdict(model.config)
    )
    return directory


def llama_config(config: TransformerConfig) -> LlamaConfig:
    """The transformers LlamaConfig of the same architecture (the inverse of config_from_llama)."""
    context = {} if config.context_length is None else {"max_position_embeddings": config.context_length}
    return LlamaConfig(
        **context,
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads,
        intermediate_size=config.d_ff,
        rope_theta=config.rope_theta,
        rms_norm_eps=config.norm_eps,
        tie_word_embeddings=config.tie_embeddings,
    )


def save_llama_folder(model: TransformerLM, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """Write the model as an HF Llama folder (config.json, model.safetensors, tokenizer): a standard model folder
    that transformers, vLLM and load_transformer_lm all read."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    hf_config = llama_config(model.config)
    hf_config.dtype = next(model.parameters()).dtype
    save_file(to_llama_state_dict(model), directory / WEIGHTS_FILE, metadata={"format": "pt"})
    tokenizer.save_pretrained(directory)
    hf_config.save_pretrained(directory)
    return directory


def read_config(path: Path) -> TransformerConfig:
    """The TransformerConfig in a transformer_config.json; any problem is an error naming the file and field."""
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(raw).__name__}")
    if raw.get("format") != FORMAT:
        raise ValueError(f"{path}: field 'format' is {raw.get('format')!r}, expected {FORMAT!r}")
    if raw.get("format_version") != FORMAT_VERSION:
        version = raw.get("format_version")
        raise ValueError(f"{path}: field 'format_version' is {version!r}; this code reads version {FORMAT_VERSION}")
    values = {}
    for f in fields(TransformerConfig):
        if f.name not in raw:
            if f.default is MISSING or f.name in REQUIRED_FIELDS:
                raise ValueError(f"{path}: missing field {f.name!r}")
            continue  # a field added since the folder was written
        value = raw[f.name]
        if f.type is bool:
            ok = isinstance(value, bool)
        elif f.name == "context_length":
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        else:  # int or float; JSON booleans are not numbers here, and a float field accepts an integer
            ok = isinstance(value, int if f.type is int else (int, float)) and not isinstance(value, bool)
        if not ok:
            raise ValueError(f"{path}: field {f.name!r} must be {f.type.__name__}, got {value!r}")  # type: ignore[union-attr]
        values[f.name] = value
    unknown = sorted(set(raw) - set(values) - {"format", "format_version"})
    if unknown:
        raise ValueError(f"{path}: unknown fields {', '.join(unknown)}")
    try:
        return TransformerConfig(**values)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing")
    try:
        return load_file(path)
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{path}: not a readable safetensors file ({err})") from None


def load_ours(directory: Path) -> TransformerLM:
    """A TransformerLM from one of our folders; missing, unknown or misshapen tensors are errors naming them."""
    config = read_config(directory / CONFIG_FILE)
    weights_path = directory / WEIGHTS_FILE
    weights = read_weights(weights_path)
    model = TransformerLM(config)
    expected = {
        k: v.shape for k, v in model.state_dict().items() if not (config.tie_embeddings and k == "lm_head.weight")
    }
    missing, unknown = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    if missing or unknown:
        raise ValueError(f"{weights_path}: missing tensors {missing[:5]}, unknown tensors {unknown[:5]}")
    for name, shape in expected.items():
        if weights[name].shape != shape:
            raise ValueError(
                f"{weights_path}: tensor {name} has shape {tuple(weights[name].shape)}, config needs {tuple(shape)}"
            )
    model.load_state_dict(weights, strict=not config.tie_embeddings)
    return model


def load_llama_folder(directory: Path) -> TransformerLM:
    """A TransformerLM holding an HF Llama folder's weights (model.safetensors, or shards listed in its index)."""
    hf_config = AutoConfig.from_pretrained(directory)
    if hf_config.model_type != "llama":
        raise ValueError(f"{directory / 'config.json'}: model_type {hf_config.model_type!r} is not llama")
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        state = {k: v for shard in shards for k, v in read_weights(directory / shard).items()}
    else:
        state = read_weights(directory / WEIGHTS_FILE)
    try:
        return from_llama_state_dict(config_from_llama(hf_config), state)
    except ValueError as err:
        raise ValueError(f"{directory}: {err}") from None


def load_transformer_lm(
    source: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> tuple[TransformerLM, PreTrainedTokenizerBase]:
    """(model in eval mode on `device` in `dtype`, tokenizer) from one of our folders, an HF Llama folder, a CS336 A1
    model's folder (alignment/models/a1_checkpoint.py), or `smollm2-135m`."""
    folder = Path(resolve_model(str(source)))
    if not folder.is_dir():
        raise FileNotFoundError(
            f"{source}: no such folder (expected one of ours, an HF Llama folder, an A1 model's folder, or "
            "smollm2-135m)"
        )
    if is_a1_folder(folder) and not (folder / CONFIG_FILE).is_file():
        model, tokenizer = load_a1_folder(folder)
        return model.to(device=device, dtype=dtype).eval(), tokenizer
    if (folder / CONFIG_FILE).is_file():
        model = load_ours(folder)
    elif (folder / "config.json").is_file():
        model = load_llama_folder(folder)
    else:
        raise ValueError(
            f"{folder}: missing {CONFIG_FILE} (our format), config.json (an HF Llama folder) and model_config.json + "
            "vocab.json + merges.txt (an A1 model)"
        )
    if not (folder / "tokenizer_config.json").is_file():
        raise ValueError(f"{folder}: missing tokenizer_config.json (the tokenizer is saved with the model)")
    return model.to(device=device, dtype=dtype).eval(), load_tokenizer(str(folder))
