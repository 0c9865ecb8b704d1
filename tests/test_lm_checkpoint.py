"""Our TransformerLM checkpoint folder: exact round trips, HF Llama conversion, and refusal of bad folders."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from alignment.models.lm_checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_transformer_lm, save_transformer_lm
from alignment.models.transformer_lm import TransformerConfig, TransformerLM
from alignment.utils.hub import SourceUnavailable

TEXTS = ["The capital of France is", "Write a short story about a dragon who loves tea."]


def tiny_config(vocab_size: int, tie: bool) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=vocab_size,
        d_model=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        d_ff=64,
        rope_theta=500.0,
        norm_eps=1e-6,
        tie_embeddings=tie,
    )


def logits(model, tokenizer) -> torch.Tensor:
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(batch["input_ids"], batch["attention_mask"])


@pytest.fixture
def saved(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = TransformerLM(tiny_config(len(tokenizer), tie=True)).eval()
    return model, save_transformer_lm(model, tokenizer, tmp_path / "lm")


@pytest.mark.parametrize("tie", [True, False])
def test_round_trip_gives_identical_tensors_and_logits(tmp_path, tokenizer, tie):
    torch.manual_seed(1)
    model = TransformerLM(tiny_config(len(tokenizer), tie)).eval()
    with torch.no_grad():
        for p in model.parameters():  # break the ones-initialized norms so every tensor is distinctive
            p.add_(torch.randn_like(p) * 0.1)
    folder = save_transformer_lm(model, tokenizer, tmp_path / "lm")
    loaded, loaded_tokenizer = load_transformer_lm(folder)
    assert loaded.config == model.config and not loaded.training
    assert model.state_dict().keys() == loaded.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    assert (loaded.lm_head.weight is loaded.embed.weight) == tie
    assert loaded_tokenizer(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    assert (
        loaded_tokenizer.eos_token_id == tokenizer.eos_token_id
        and loaded_tokenizer.chat_template == tokenizer.chat_template
    )
    assert torch.equal(logits(loaded, loaded_tokenizer), logits(model, tokenizer))
    config = json.loads((folder / CONFIG_FILE).read_text())
    assert config["format_version"] == 1 and config["d_model"] == 32 and config["tie_embeddings"] == tie


def test_dtype_and_device_are_applied(saved):
    _, folder = saved
    model, _ = load_transformer_lm(folder, device="cpu", dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16} and model.device == torch.device("cpu")


def test_hf_llama_folder_converts_with_matching_logits(tiny_model_dir, tokenizer):
    ours, ours_tokenizer = load_transformer_lm(tiny_model_dir)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = reference(**batch).logits
    real = batch["attention_mask"].bool()
    assert (logits(ours, ours_tokenizer)[real] - expected[real]).abs().max() <= 1e-4


def test_saving_a_converted_model_round_trips(tiny_model_dir, tmp_path):
    model, tokenizer = load_transformer_lm(tiny_model_dir)
    again, again_tokenizer = load_transformer_lm(save_transformer_lm(model, tokenizer, tmp_path / "converted"))
    assert torch.equal(logits(again, again_tokenizer), logits(model, tokenizer))


def edit_config(folder, **changes):
    path = folder / CONFIG_FILE
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda f: (f / CONFIG_FILE).unlink(), r"missing transformer_config.json \(our format\), config.json"),
        (
            lambda f: (f / CONFIG_FILE).write_text('{"format": "alignment.TransformerLM", "d_'),
            "transformer_config.json: not valid JSON",
        ),
        (lambda f: (f / CONFIG_FILE).write_text("[1, 2]"), "transformer_config.json: expected a JSON object"),
        (lambda f: edit_config(f, format="something-else"), "transformer_config.json: field 'format'"),
        (lambda f: edit_config(f, format_version=2), "transformer_config.json: field 'format_version' is 2"),
        (lambda f: edit_config(f, n_layers="2"), "transformer_config.json: field 'n_layers' must be int"),
        (lambda f: edit_config(f, tie_embeddings=1), "transformer_config.json: field 'tie_embeddings' must be bool"),
        (lambda f: edit_config(f, n_kv_heads=3), "transformer_config.json: need n_kv_heads | n_heads"),
        (
            lambda f: edit_config(f, d_ff=65),
            r"model.safetensors: tensor blocks.0.ffn.gate.weight has shape \(64, 32\), config needs \(65",
        ),
        (lambda f: edit_config(f, n_layers=3), r"model.safetensors: missing tensors \['blocks.2.attn.k.weight'"),
        (lambda f: edit_config(f, colour="blue"), "transformer_config.json: unknown fields colour"),
        (lambda f: (f / WEIGHTS_FILE).unlink(), "model.safetensors: missing"),
        (
            lambda f: (f / WEIGHTS_FILE).write_bytes((f / WEIGHTS_FILE).read_bytes()[:1000]),
            "model.safetensors: not a readable",
        ),
        (lambda f: (f / "tokenizer_config.json").unlink(), "missing tokenizer_config.json"),
    ],
)
def test_a_bad_folder_is_refused_naming_the_file_and_field(saved, damage, message):
    _, folder = saved
    damage(folder)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_transformer_lm(folder)


def test_a_field_missing_from_the_config_is_named(saved):
    _, folder = saved
    raw = json.loads((folder / CONFIG_FILE).read_text())
    del raw["d_ff"]
    (folder / CONFIG_FILE).write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="transformer_config.json: missing field 'd_ff'"):
        load_transformer_lm(folder)


def test_non_llama_and_missing_sources_are_refused(tmp_path, tokenizer):
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "qwen")
    with pytest.raises(ValueError, match="config.json: model_type 'qwen2' is not llama"):
        load_transformer_lm(tmp_path / "qwen")
    with pytest.raises(SourceUnavailable, match="nowhere. cannot be loaded: no such folder.*give --model"):
        load_transformer_lm(tmp_path / "nowhere")  # the one line every script prints for a model it cannot have
