"""Turn your CS336 A1 / UW HW1 TransformerLM into one of our TransformerLM folders, for GRPO on your own model.

    uv run scripts/import_a1_model.py --weights model.pt --vocab vocab.json --merges merges.txt \\
        --shape-json model_config.json --output-dir outputs/my_lm
    uv run scripts/import_a1_model.py --weights model.safetensors --vocab vocab.json --merges merges.txt \\
        --vocab-size 10000 --context-length 256 --d-model 512 --num-layers 4 --num-heads 16 --d-ff 1344
    uv run scripts/train_grpo.py --config configs/keyword_uw_handout.toml --model outputs/my_lm

The weights are read in the A1 adapter's naming (token_embeddings, layers.N.attn.q_proj / k_proj / v_proj /
output_proj, ln1, ffn.w1 / w2 / w3, ln2, ln_final, lm_head) from safetensors or a torch state dict (weights_only:
nothing is unpickled); the tokenizer from A1's vocab.json and merges.txt (GPT-2 byte alphabet). A missing, extra or
misshapen tensor is an error naming it. The folder written (model.safetensors, transformer_config.json, tokenizer
files) is what `--backend transformer_lm --model DIR` loads; a folder holding model_config.json, the weights,
vocab.json and merges.txt loads as it is too. See alignment/models/a1_checkpoint.py for how A1's conventions map.
"""

from dataclasses import dataclass, fields
from pathlib import Path

import typer

from alignment.config import cli
from alignment.config.settings import OutputSettings, override, setting
from alignment.models.a1_checkpoint import A1Shape, from_a1_state_dict, read_a1_weights
from alignment.models.bpe_tokenizer import DEFAULT_SPECIAL_TOKENS, load_bpe_tokenizer
from alignment.models.lm_checkpoint import save_transformer_lm
from alignment.models.loading import A1_IMPORT_DIRS


@dataclass
class ImportA1Config(OutputSettings):
    weights: Path = setting(Path("model.pt"), "Weights: a .safetensors file or a torch state dict (.pt).")
    vocab: Path = setting(Path("vocab.json"), "The tokenizer's vocabulary (token -> id, GPT-2 byte alphabet).")
    merges: Path = setting(Path("merges.txt"), "The tokenizer's merges, one `a b` a line, in the order learned.")
    special_tokens: list[str] = setting(list(DEFAULT_SPECIAL_TOKENS), "Special token (repeatable); the first is EOS.")
    shape_json: Path | None = setting(
        None,
        "JSON with vocab_size, context_length, d_model, num_layers, num_heads, d_ff and rope_theta (or theta), as A1's "
        "model_config.json; instead of the shape flags.",
    )
    vocab_size: int | None = setting(None, "Shape: vocabulary size.")
    context_length: int | None = setting(None, "Shape: the context length it was trained with.")
    d_model: int | None = setting(None, "Shape: model width.")
    num_layers: int | None = setting(None, "Shape: Transformer blocks.")
    num_heads: int | None = setting(None, "Shape: attention heads.")
    d_ff: int | None = setting(None, "Shape: SwiGLU hidden width.")
    rope_theta: float = setting(10000.0, "Shape: RoPE's theta.")
    output_dir: Path = override(OutputSettings, "output_dir", Path(A1_IMPORT_DIRS[0]))


def shape_of(config: ImportA1Config) -> A1Shape:
    if config.shape_json is not None:
        return A1Shape.from_json(config.shape_json)
    values = {f.name: getattr(config, f.name) for f in fields(A1Shape)}
    missing = [name for name, value in values.items() if value is None]
    if missing:
        raise cli.bad_flag("--shape-json", f"give it, or every shape flag (missing --{missing[0].replace('_', '-')})")
    return A1Shape.from_dict(values, "the shape flags")


def run(config: ImportA1Config) -> Path:
    if (config.output_dir / "transformer_config.json").exists() and not config.overwrite:
        raise cli.bad_flag("--output-dir", f"{config.output_dir} already holds a model; pass --overwrite to replace it")
    try:
        shape = shape_of(config)
        tokenizer = load_bpe_tokenizer(config.vocab, config.merges, config.special_tokens)
    except (ValueError, OSError) as err:
        raise typer.BadParameter(str(err)) from None
    if len(tokenizer) > shape.vocab_size:
        raise cli.bad_flag("--vocab", f"{len(tokenizer)} tokens, more than the model's vocab_size {shape.vocab_size}")
    try:
        model = from_a1_state_dict(read_a1_weights(config.weights), shape)
    except (ValueError, FileNotFoundError) as err:
        raise cli.bad_flag("--weights", f"{config.weights}: {err}") from None
    folder = save_transformer_lm(model, tokenizer, config.output_dir)
    parameters = sum(p.numel() for p in model.parameters())
    typer.echo(f"{folder}: {parameters:,} parameters, {len(tokenizer):,} tokens")
    typer.echo(f"train it: --backend transformer_lm --model {folder}")
    return folder


app = cli.config_command(
    ImportA1Config, run, "Convert an A1 TransformerLM and its BPE tokenizer into our TransformerLM folder format."
)

if __name__ == "__main__":
    app()
