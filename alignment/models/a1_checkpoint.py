"""A student's CS336 A1 (UW HW1/HW2) TransformerLM as our TransformerLM, for GRPO on their own model (UW problems 5
and 16).

Weights come in the A1 adapter's naming, from safetensors or a torch state dict (read with weights_only=True; a
torch.compile'd model's `_orig_mod.` prefix and a checkpoint dict's `model`/`model_state_dict`/`state_dict` entry
are unwrapped):

    token_embeddings.weight                       (vocab_size, d_model)
    layers.{i}.ln1.weight, layers.{i}.ln2.weight  (d_model,)
    layers.{i}.attn.{q,k,v,output}_proj.weight    (d_model, d_model), heads stacked along the rows
    layers.{i}.ffn.w1.weight, ffn.w3.weight       (d_ff, d_model)
    layers.{i}.ffn.w2.weight                      (d_model, d_ff)
    ln_final.weight                               (d_model,)
    lm_head.weight                                (vocab_size, d_model), not tied to the embedding

A1 stores Linear weights as (out, in) in its fixtures; a student's own module may keep W transposed, (in, out): the
non-square ffn.w1 and lm_head tell which, and every matrix is read the same way. The shape (vocab_size,
context_length, d_model, num_layers, num_heads, d_ff, rope_theta; UW's starter calls the last `theta`) comes from
flags or a small JSON such as A1's model_config.json.

A1's conventions against ours (each checked against A1's own test snapshots and a float64 reference in
tests/test_a1_model.py): pre-norm blocks x + MHA(RMSNorm(x)), then + SwiGLU(RMSNorm(.)) with SwiGLU = W2(SiLU(W1 x)
* W3 x), RMSNorm x / sqrt(mean(x^2) + 1e-5) * g in float32, causal softmax(QK^T / sqrt(d_k)) V, a final RMSNorm and
an untied head: all as ours, with every key/value head its own (no grouping). RoPE differs in its pairing: A1 rotates
adjacent channels (2k, 2k+1) of each head by pos * theta^(-2k/d_k), ours channels (k, k + d_k/2) by the same angle;
so the rows of q_proj and k_proj are reordered within each head, [0, 2, 4, ..., 1, 3, 5, ...], which leaves every
attention score unchanged (v and output_proj keep their order).
"""

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from alignment.models.transformer_lm import TransformerConfig, TransformerLM

SHAPE_FILE = "model_config.json"
WEIGHT_FILES = ("model.safetensors", "model.pt", "model.pth", "checkpoint.pt")
_WRAPPERS = ("model", "model_state_dict", "state_dict")
_COMPILED_PREFIX = "_orig_mod."


@dataclass(frozen=True)
class A1Shape:
    """The A1 adapter's `run_transformer_lm` arguments that fix a model's shape."""

    vocab_size: int
    context_length: int
    d_model: int
    num_layers: int
    num_heads: int
    d_ff: int
    rope_theta: float = 10000.0

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str) -> "A1Shape":
        values = dict(values)
        if "theta" in values and "rope_theta" not in values:  # UW's starter names it theta
            values["rope_theta"] = values.pop("theta")
        names = {f.name for f in fields(cls)}
        missing = [n for n in names if n not in values and n != "rope_theta"]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(sorted(missing))}")
        shape = {n: values[n] for n in names if n in values}
        for name, value in shape.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{where}: {name} must be a positive number, got {value!r}")
        return cls(**{n: (float(v) if n == "rope_theta" else int(v)) for n, v in shape.items()})

    @classmethod
    def from_json(cls, path: Path) -> "A1Shape":
        try:
            values = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a readable JSON object ({err})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a JSON object")
        return cls.from_dict(values, str(path))

    def config(self) -> TransformerConfig:
        return TransformerConfig(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_layers=self.num_layers,
            n_heads=self.num_heads,
            n_kv_heads=self.num_heads,
            d_ff=self.d_ff,
            rope_theta=self.rope_theta,
            norm_eps=1e-5,
            tie_embeddings=False,
            context_length=self.context_length,
        )


def read_a1_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file or a torch checkpoint (no code runs on load), unwrapped and un-prefixed."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such weights file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state: Any = load_file(path)
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - torch reports pickles it refuses as several error types
            raise ValueError(f"{path}: not a torch state dict readable with weights_only=True ({err})") from None
    while isinstance(state, dict) and not any(isinstance(v, torch.Tensor) for v in state.values()):
        inner = next((state[k] for k in _WRAPPERS if isinstance(state.get(k), dict)), None)
        if inner is None:
            raise ValueError(f"{path}: no tensors, and none of {', '.join(_WRAPPERS)} holds them")
        state = inner
    if not isinstance(state, dict):
        raise ValueError(f"{path}: expected a state dict, got {type(state).__name__}")
    return {k.removeprefix(_COMPILED_PREFIX): v for k, v in state.items() if isinstance(v, torch.Tensor)}


def a1_names(shape: A1Shape) -> dict[str, tuple[str, tuple[int, ...]]]:
    """A1 key -> (our parameter name, its (out, in) shape in A1's layout)."""
    d, f, v = shape.d_model, shape.d_ff, shape.vocab_size
    names = {
        "token_embeddings.weight": ("embed.weight", (v, d)),
        "ln_final.weight": ("norm.weight", (d,)),
        "lm_head.weight": ("lm_head.weight", (v, d)),
    }
    block = {
        "ln1.weight": ("attn_norm.weight", (d,)),
        "ln2.weight": ("ffn_norm.weight", (d,)),
        "attn.q_proj.weight": ("attn.q.weight", (d, d)),
        "attn.k_proj.weight": ("attn.k.weight", (d, d)),
        "attn.v_proj.weight": ("attn.v.weight", (d, d)),
        "attn.output_proj.weight": ("attn.out.weight", (d, d)),
        "ffn.w1.weight": ("ffn.gate.weight", (f, d)),
        "ffn.w3.weight": ("ffn.up.weight", (f, d)),
        "ffn.w2.weight": ("ffn.down.weight", (d, f)),
    }
    for i in range(shape.num_layers):
        names |= {f"layers.{i}.{a1}": (f"blocks.{i}.{ours}", size) for a1, (ours, size) in block.items()}
    return names


def interleaved_to_half_split(head_dim: int) -> torch.Tensor:
    """Row order within a head that turns A1's adjacent RoPE pairs (2k, 2k+1) into ours (k, k + head_dim/2)."""
    return torch.cat([torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)])


def _transposed(state: dict[str, torch.Tensor], shape: A1Shape) -> bool:
    """Whether the matrices are stored (in, out), from the non-square ffn.w1 and lm_head (which must agree)."""
    votes = {}
    for key, size in (("layers.0.ffn.w1.weight", (shape.d_ff, shape.d_model)), ("lm_head.weight", None)):
        size = size or (shape.vocab_size, shape.d_model)
        if size[0] != size[1] and key in state and tuple(state[key].shape) in (size, size[::-1]):
            votes[key] = tuple(state[key].shape) == size[::-1]
    if len(set(votes.values())) > 1:
        details = ", ".join(f"{k} {tuple(state[k].shape)}" for k in votes)
        raise ValueError(f"the weights mix (out, in) and (in, out) matrices: {details}")
    return next(iter(votes.values()), False)


def from_a1_state_dict(state: dict[str, torch.Tensor], shape: A1Shape) -> TransformerLM:
    """Our TransformerLM holding an A1 state dict; a missing, unused or misshapen tensor is an error naming it."""
    names = a1_names(shape)
    missing = [k for k in names if k not in state]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"missing tensor {missing[0]}{more}")
    unused = sorted(set(state) - set(names))
    if unused:
        raise ValueError(f"unexpected tensor {unused[0]} (not in the A1 TransformerLM of {shape.num_layers} layers)")
    transposed = _transposed(state, shape)
    order = interleaved_to_half_split(shape.d_model // shape.num_heads)
    ours = {}
    for key, (name, size) in names.items():
        tensor = state[key]
        if transposed and len(size) == 2 and key != "token_embeddings.weight":
            tensor = tensor.T
        if tuple(tensor.shape) != size:
            raise ValueError(f"tensor {key} has shape {tuple(state[key].shape)}, the shape flags need {size}")
        if key.endswith(("q_proj.weight", "k_proj.weight")):  # A1's RoPE pairs, reordered to ours within each head
            tensor = tensor.view(shape.num_heads, -1, shape.d_model)[:, order].reshape(size)
        ours[name] = tensor.contiguous()
    model = TransformerLM(shape.config())
    model.load_state_dict(ours)
    return model


def find_weights(folder: Path) -> Path:
    found = [folder / name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not found:
        raise FileNotFoundError(f"{folder}: no weights file ({', '.join(WEIGHT_FILES)})")
    return found[0]


def is_a1_folder(folder: Path) -> bool:
    """A folder laid out as an A1 model: model_config.json, a weights file, vocab.json and merges.txt."""
    names = ("vocab.json", "merges.txt", SHAPE_FILE)
    return all((folder / n).is_file() for n in names) and any((folder / n).is_file() for n in WEIGHT_FILES)


def load_a1_folder(folder: Path):
    """(TransformerLM, tokenizer) from a folder holding an A1 model (see is_a1_folder)."""
    from alignment.models.bpe_tokenizer import load_bpe_tokenizer

    shape = A1Shape.from_json(folder / SHAPE_FILE)
    weights = find_weights(folder)
    try:
        model = from_a1_state_dict(read_a1_weights(weights), shape)
    except ValueError as err:
        raise ValueError(f"{weights}: {err}") from None
    return model, load_bpe_tokenizer(folder / "vocab.json", folder / "merges.txt")
