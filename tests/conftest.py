"""Shared fixtures: SmolLM2's real tokenizer, tiny random Llama / Qwen2 models on it, and local copies of hub repos."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Olmo2Config,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
)

from alignment.data.math_datasets import MIRROR_ENV
from alignment.models.loading import SMOLLM2, load_tokenizer
from alignment.prompts import format_prompt, load_prompt
from alignment.run import threads as threads_module

# A machine that sets PYTHONDONTWRITEBYTECODE makes every process the suite starts (scripts, torchrun ranks, Ray
# workers, the GPU check's steps) compile torch and transformers from source again, some 4 s each on 2 cores: the
# suite lets them write the caches (into the environment and __pycache__/, which git ignores) once.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

QUESTIONS = [
    ("What is 2 + 3?", "5"),
    ("What is 4 * 2?", "8"),
    ("What is 9 - 1?", "8"),
    ("What is 1 + 1?", "2"),
    ("What is 6 / 2?", "3"),
    ("What is 7 + 0?", "7"),
]
GSM8K = Path(__file__).resolve().parents[1] / "data" / "gsm8k"  # the copy the repository ships


@pytest.fixture(autouse=True)
def torch_threads_restored():
    """A run with --torch-threads sets torch's thread count for the whole process: later tests get it back, so that
    their float sums run in the order they were written against."""
    threads = torch.get_num_threads()
    # a run in this process keeps torch's count rather than the cores idle at its start (alignment/run/threads.py,
    # tested in tests/test_threads.py), so that its sums do not depend on what else the machine runs
    threads_module._chosen = threads
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tokenizer() -> PreTrainedTokenizerBase:
    return load_tokenizer(SMOLLM2)


def tiny_config(kind: str, vocab_size: int, pad_token_id: int | None = None, **overrides):
    """A 2-layer config of `kind` (llama, qwen2, qwen3 or olmo2) with hidden size 64 and 4 heads; `overrides` over
    it."""
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
    kinds = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config, "olmo2": Olmo2Config}
    return kinds[kind](**(common | overrides))


@pytest.fixture(scope="session", params=["llama", "qwen2"])
def tiny_model(request, tokenizer):
    """A 2-layer random model of either architecture over SmolLM2's vocabulary, float32, eval mode."""
    torch.manual_seed(0)
    config = tiny_config(request.param, len(tokenizer), tokenizer.pad_token_id)
    model = (LlamaForCausalLM if request.param == "llama" else Qwen2ForCausalLM)(config)
    return model.eval()


# For a test of tiny_model whose subject does not depend on the architecture (the sampling loop around the model): the
# Llama by default, the Qwen2 under -m slow
llama_by_default = pytest.mark.parametrize(
    "tiny_model", ["llama", pytest.param("qwen2", marks=pytest.mark.slow)], indirect=True
)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A tiny random Llama saved with SmolLM2's tokenizer, loadable by name like any HF folder."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(tiny_config("llama", len(tokenizer), tokenizer.pad_token_id)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def _ray_down_at_exit():
    yield
    from alignment.ray.env import ray

    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def cluster(_ray_down_at_exit):
    """Ray on 2 CPUs, started by the first test that asks for it and shared by the rest of the session: a start takes
    about 10 s on 2 quiet cores. A module that needs other settings shuts it down and starts its own."""
    from alignment.ray.env import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2, log_to_driver=False)
    return ray


@pytest.fixture(scope="session")
def hub_mirror_root(tmp_path_factory) -> Path:
    from tests.hub_copies import write_hub_mirror  # pyarrow: here, so that the GPU checks need only torch

    return write_hub_mirror(tmp_path_factory.mktemp("hub-mirror"))


@pytest.fixture
def hub_mirror(hub_mirror_root, monkeypatch) -> Path:
    """Short names and hub ids resolve to local copies of the real repos ($ALIGNMENT_DATA_MIRROR), as a user's would."""
    monkeypatch.setenv(MIRROR_ENV, str(hub_mirror_root))
    return hub_mirror_root


@pytest.fixture
def captured(monkeypatch):
    """scripts/train_grpo.py with train_grpo replaced by a recorder of the settings it is called with."""
    from scripts import train_grpo as script

    seen = {}
    monkeypatch.setattr(script, "train_grpo", lambda config, resume=False: seen.update(config=config, resume=resume))
    monkeypatch.setattr(script, "report", lambda output_dir: None)
    return seen


@pytest.fixture
def data(tmp_path) -> dict[str, Path]:
    """SFT records, GSM8K records and held-out questions of six small arithmetic problems (QUESTIONS), as files."""
    return write_data(tmp_path)


def write_data(tmp_path: Path) -> dict[str, Path]:
    """The `data` fixture's files, written into `tmp_path` (for a fixture of wider scope)."""
    template = load_prompt("r1_zero")
    sft = tmp_path / "sft.jsonl"
    sft.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": format_prompt(template, q),
                    "response": f"easy. </think> <answer> {a} </answer>",
                    "ground_truth": a,
                }
            )
            + "\n"
            for q, a in QUESTIONS
        )
    )
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text("".join(json.dumps({"question": q, "answer": f"so {a}\n#### {a}"}) + "\n" for q, a in QUESTIONS))
    held_out = tmp_path / "held_out.jsonl"  # questions the runs do not train on
    held_out.write_text(
        "".join(
            json.dumps({"question": f"What is {n} + {n}?", "answer": f"#### {2 * n}"}) + "\n" for n in range(10, 14)
        )
    )
    return {"sft": sft, "gsm8k": gsm8k, "held_out": held_out}
