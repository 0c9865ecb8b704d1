"""Our TransformerLM as the train loop's policy (--backend transformer_lm), and keyword datasets as a run's data."""

import json
import math
from dataclasses import replace

import pytest
import torch

from alignment.grpo.config import validate
from alignment.grpo_run import train_grpo
from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.models.transformer_lm import TransformerLM
from tests.test_grpo_loop import TASK, tiny_config


def test_transformer_lm_trains_like_the_transformers_model_with_its_weights(tiny_model_dir, tmp_path):
    """Same weights, same seeded samples: the first step's metrics agree between the two implementations."""
    runs = {}
    for backend in ("hf", "transformer_lm"):
        config = tiny_config(
            tiny_model_dir,
            tmp_path / backend,
            backend=backend,
            loss_type="grpo_clip",
            n_grpo_steps=2,
            kl_reference=True,
            kl_prev=True,
        )
        runs[backend] = train_grpo(config, TASK, TASK)
    hf, ours = runs["hf"], runs["transformer_lm"]
    assert [r["train_reward"] for r in ours] == [r["train_reward"] for r in hf]
    assert [r["response_length_mean"] for r in ours] == [r["response_length_mean"] for r in hf]
    for key in ("loss", "grad_norm", "token_entropy", "kl_ref_k3", "kl_prev_k3"):
        assert math.isclose(ours[0][key], hf[0][key], rel_tol=1e-3, abs_tol=1e-6), key
    assert ours[0]["grad_norm"] > 0 and ours[0]["kl_prev_k3"] > 0

    initial, _ = load_transformer_lm(tiny_model_dir)
    trained = load_transformer_lm(tmp_path / "transformer_lm" / "run" / "policy")[
        0
    ].state_dict()  # saved as a Llama folder
    assert isinstance(initial, TransformerLM) and set(trained) == set(initial.state_dict())
    assert any(not torch.equal(trained[k], v) for k, v in initial.state_dict().items())


def test_gradient_checkpointing_is_refused_for_transformer_lm(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path, backend="transformer_lm", gradient_checkpointing=True)
    with pytest.raises(ValueError, match="--gradient-checkpointing .* --backend transformer_lm"):
        validate(config)


def write_records(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_run_trains_on_a_built_keyword_dataset(tiny_model_dir, tmp_path):
    folder = tmp_path / "keywords"
    folder.mkdir()
    words = ["river", "apple", "lamp", "cloud", "stone", "bread"]
    records = [
        {"prompt": f"Write a sentence with the word {w}.", "answer": f"The {w} is here.", "keywords": [w]}
        for w in words
    ]
    write_records(folder / "train.jsonl", records[:4])
    write_records(folder / "validation.jsonl", records[4:])
    config = tiny_config(tiny_model_dir, tmp_path, task="keywords", keywords_dataset=folder, n_eval_examples=1)
    rows = train_grpo(config)
    assert len(rows) == 1 and 0.0 <= rows[0]["train_reward"] <= 1.0
    evals = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    assert {e["truth"][0] for e in evals} == {"stone"}  # validation capped at --n-eval-examples, from validation.jsonl
    prompts = [json.loads(line)["prompt"] for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    assert all("<|im_start|>" in p and "the word stone" in p for p in prompts)  # wrapped in the chat template


def test_a_bad_keyword_dataset_fails_before_the_model_loads(tmp_path):
    folder = tmp_path / "keywords"
    folder.mkdir()
    write_records(
        folder / "train.jsonl", [{"prompt": "Use river.", "answer": "no keyword here", "keywords": ["river"]}]
    )
    write_records(folder / "validation.jsonl", [{"prompt": "Use lamp.", "answer": "a lamp", "keywords": ["lamp"]}])
    config = replace(tiny_config("no-such-model", tmp_path), task="keywords", keywords_dataset=folder)
    with pytest.raises(ValueError, match=r"train.jsonl:1.*'answer'"):
        train_grpo(config)
