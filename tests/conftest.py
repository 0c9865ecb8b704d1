"""Shared fixtures: SmolLM2's real tokenizer, tiny random Llama / Qwen2 models on it, and ../shared/data."""

from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from alignment.data.math_datasets import MIRROR_ENV
from alignment.models.loading import SMOLLM2, load_tokenizer
from tests.hub_copies import write_hub_mirror

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerBase:
    return load_tokenizer(SMOLLM2)


def _tiny_config(kind: str, vocab_size: int, pad_token_id: int):
    common = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaConfig(**common) if kind == "llama" else Qwen2Config(**common)


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def tiny_model(request, tokenizer):
    """A 2-layer random model of either architecture over SmolLM2's vocabulary, float32, eval mode."""
    torch.manual_seed(0)
    config = _tiny_config(request.param, len(tokenizer), tokenizer.pad_token_id)
    model = (LlamaForCausalLM if request.param == "llama" else Qwen2ForCausalLM)(config)
    return model.eval()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"shared data not found at {SHARED_DATA} (a fresh clone has no ../shared)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A tiny random Llama saved with SmolLM2's tokenizer, loadable by name like any HF folder."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(_tiny_config("llama", len(tokenizer), tokenizer.pad_token_id)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def hub_mirror_root(tmp_path_factory) -> Path:
    return write_hub_mirror(tmp_path_factory.mktemp("hub-mirror"))


@pytest.fixture
def hub_mirror(hub_mirror_root, monkeypatch) -> Path:
    """Short names and hub ids resolve to local copies of the real repos ($ALIGNMENT_DATA_MIRROR), as a user's would."""
    monkeypatch.setenv(MIRROR_ENV, str(hub_mirror_root))
    return hub_mirror_root
