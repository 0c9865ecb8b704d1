"""train_sft.py and expert_iteration.py end to end on a tiny random model: files, resume, and bad input."""

import json
from dataclasses import fields
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from alignment.expert_iteration import correct_examples
from alignment.rollout.interface import Rollout
from alignment.run.checkpoint import complete_step
from alignment.sft_run import train_sft
from alignment.supervised import trainer as sft_trainer
from alignment.supervised.config import EIConfig, SFTConfig, flag
from scripts import expert_iteration
from scripts import train_sft as train_sft_script
from tests.conftest import write_data

runner = CliRunner()


def sft_flags(data, out: Path, *extra) -> list[str]:
    flags = [
        "--model",
        data["model"],
        "--dataset",
        data["sft"],
        "--data-format",
        "sft",
        "--validation-dataset",
        data["held_out"],
        "--n-eval-examples",
        2,
        "--eval-max-tokens",
        4,
        "--batch-size",
        4,
        "--gradient-accumulation-steps",
        2,
        "--learning-rate",
        1e-3,
        "--max-seq-length",
        256,
        "--eval-every",
        1,
        "--checkpoint-every",
        1,
        "--backend",
        "hf",
        "--grader-workers",
        1,
        "--output-dir",
        out,
        *extra,
    ]
    return [str(f) for f in flags]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def sft_run(tiny_model_dir, tmp_path_factory) -> tuple[dict, Path]:
    """One SFT run the module's tests read (none writes into it: the bad-input test checks that it stays as it is)."""
    folder = tmp_path_factory.mktemp("sft-run")
    data = write_data(folder) | {"model": tiny_model_dir}
    out = folder / "sft"
    result = runner.invoke(train_sft_script.app, sft_flags(data, out))
    assert result.exit_code == 0, result.output
    return data, out


def test_train_sft_end_to_end(sft_run, tiny_model_dir):
    data, out = sft_run
    metrics = rows(out / "metrics.jsonl")
    steps = [r for r in metrics if "loss" in r]
    assert [r["grpo_step"] for r in steps] == [1, 2]  # 6 examples in batches of 4: 4 + 2
    assert [r["response_tokens"] > 0 and r["grad_norm"] > 0 for r in steps] == [True, True]
    assert [r["grpo_step"] for r in metrics if "eval_reward" in r] == [0, 1, 2]
    assert metrics[0] == {"grpo_step": 0, "n_examples_loaded": 6}
    generations = rows(out / "rollouts.jsonl")
    assert len(generations) == 3 * 2 and {g["kind"] for g in generations} == {"eval"}
    assert {"prompt", "response", "ground_truth", "format_reward", "answer_reward", "reward", "token_entropy"} <= set(
        generations[0]
    )
    assert complete_step(out) == 2
    # policy/ is a standard HF folder with trained weights
    assert (out / "policy" / "config.json").is_file() and (out / "policy" / "tokenizer.json").is_file()
    trained, initial = load_file(out / "policy" / "model.safetensors"), load_file(tiny_model_dir / "model.safetensors")
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    assert (out / "plots" / "eval_rewards.png").is_file() and (out / "plots" / "train_loss.png").is_file()


def test_resume_continues_exactly(tiny_model_dir, data, tmp_path, monkeypatch):
    base = dict(
        model=str(tiny_model_dir),
        dataset=str(data["sft"]),
        data_format="sft",
        validation_dataset=str(data["held_out"]),
        n_eval_examples=1,
        eval_max_tokens=2,
        batch_size=2,
        gradient_accumulation_steps=1,
        learning_rate=1e-3,
        max_seq_length=256,
        eval_every=10,
        checkpoint_every=1,
        backend="hf",
        grader_workers=1,
    )
    whole = SFTConfig(**base, output_dir=tmp_path / "whole")
    train_sft(whole)
    calls = {"n": 0}
    real_step = sft_trainer.SFTTrainer.step

    def crash_on_third(self, examples):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("killed")
        return real_step(self, examples)

    monkeypatch.setattr(sft_trainer.SFTTrainer, "step", crash_on_third)
    stopped = SFTConfig(**base, output_dir=tmp_path / "stopped")
    with pytest.raises(RuntimeError, match="killed"):
        train_sft(stopped)
    assert complete_step(stopped.output_dir) == 2 and not (stopped.output_dir / "policy").exists()
    monkeypatch.setattr(sft_trainer.SFTTrainer, "step", real_step)
    resumed = runner.invoke(train_sft_script.app, ["--resume", str(stopped.output_dir)])  # its settings.json alone
    assert resumed.exit_code == 0, resumed.output
    assert [r["grpo_step"] for r in rows(stopped.output_dir / "metrics.jsonl") if "loss" in r] == [1, 2, 3]
    a, b = (
        load_file(whole.output_dir / "policy" / "model.safetensors"),
        load_file(stopped.output_dir / "policy" / "model.safetensors"),
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
    losses = lambda folder: [r["loss"] for r in rows(folder / "metrics.jsonl") if "loss" in r]  # noqa: E731
    assert losses(stopped.output_dir) == losses(whole.output_dir)


def test_bad_input_is_named_and_keeps_the_earlier_run(sft_run, tmp_path):
    data, out = sft_run
    before = (out / "metrics.jsonl").read_text()
    no_response = tmp_path / "no_response.jsonl"
    no_response.write_text(json.dumps({"prompt": "P", "response": "R"}) + "\n" + json.dumps({"prompt": "P"}) + "\n")
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"prompt": "P", "response": "no format at all", "ground_truth": "1"}) + "\n")
    cases = [
        (["--dataset", str(tmp_path / "missing.jsonl")], "missing.jsonl"),
        (["--dataset", str(no_response)], "no_response.jsonl:2: missing field 'response'"),
        (["--dataset", str(wrong), "--filter-correct"], "--filter-correct kept none of the 1 examples"),
        (["--max-seq-length", "16"], "--max-seq-length 16 leaves no room for a response"),
        (["--batch-size", "3"], "--batch-size 3 is not a multiple of --gradient-accumulation-steps 2"),
    ]
    for extra, message in cases:
        result = runner.invoke(
            train_sft_script.app, sft_flags(data, out, "--overwrite", *extra), env={"COLUMNS": "300"}
        )
        assert result.exit_code != 0
        assert message in " ".join(result.output.replace("│", " ").split()), (extra, result.output)
        assert (out / "metrics.jsonl").read_text() == before
    again = runner.invoke(train_sft_script.app, sft_flags(data, out))
    assert again.exit_code != 0 and "--overwrite" in again.output


def test_expert_iteration_from_an_sft_policy(sft_run, tmp_path):
    data, sft_out = sft_run
    out = tmp_path / "ei"
    flags = [
        "--model",
        sft_out / "policy",
        "--dataset",
        data["gsm8k"],
        "--validation-dataset",
        data["held_out"],
        "--n-eval-examples",
        2,
        "--eval-max-tokens",
        4,
        "--n-ei-steps",
        2,
        "--questions-per-step",
        2,
        "--rollouts-per-question",
        2,
        "--sampling-max-tokens",
        5,
        "--batch-size",
        2,
        "--gradient-accumulation-steps",
        1,
        "--max-seq-length",
        256,
        "--backend",
        "hf",
        "--grader-workers",
        1,
        "--output-dir",
        out,
    ]
    result = runner.invoke(expert_iteration.app, [str(f) for f in flags])
    assert result.exit_code == 0, result.output
    metrics = rows(out / "metrics.jsonl")
    steps = [r for r in metrics if "kept_fraction" in r]
    assert [r["grpo_step"] for r in steps] == [1, 2]
    assert all(r["n_rollouts"] == 4 and r["kept_fraction"] == r["n_kept"] / 4 for r in steps)
    assert all(r["token_entropy"] > 0 for r in steps)  # every step: the rollouts' entropy, as GRPO logs it
    assert [r["grpo_step"] for r in metrics if "eval_token_entropy" in r] == [0, 1, 2]
    assert complete_step(out) == 2 and (out / "policy" / "model.safetensors").is_file()


def test_correct_rollouts_become_sft_examples():
    rollouts = [
        Rollout(0, "a </answer>", [1], [0.0], "stop"),
        Rollout(0, "b", [1], [0.0], "length"),
        Rollout(1, "c </answer>", [1], [0.0], "stop"),
    ]
    kept = correct_examples(["P0", "P1"], ["5", "8"], rollouts, [{"reward": 1.0}, {"reward": 0.0}, {"reward": 1.0}])
    assert [(e.prompt, e.response, e.ground_truth) for e in kept] == [
        ("P0", "a </answer>", "5"),
        ("P1", "c </answer>", "8"),
    ]


@pytest.mark.parametrize(("app", "config_cls"), [(train_sft_script.app, SFTConfig), (expert_iteration.app, EIConfig)])
def test_every_setting_is_a_documented_flag(app, config_cls):
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    for f in fields(config_cls):
        assert flag(f.name) in result.output, f.name
        assert f.metadata["help"].split()[0] in result.output


def test_validation_questions_that_are_trained_on_are_refused(tiny_model_dir, data, tmp_path):
    trained_on = sft_flags(data | {"model": tiny_model_dir}, tmp_path / "o", "--validation-dataset", data["gsm8k"])
    result = runner.invoke(train_sft_script.app, trained_on, env={"COLUMNS": "300"})
    assert result.exit_code != 0 and "2 of 2 validation questions" in result.output  # --n-eval-examples 2
    assert "--allow-validation-overlap" in result.output and not (tmp_path / "o" / "metrics.jsonl").exists()


def test_sft_then_expert_iteration_with_lora(tiny_model_dir, data, tmp_path):
    """Both scripts train adapters only (--lora-rank): the checkpoint holds the adapter, policy/ is the merged model
    (the next script's --model) and policy/adapter/ the adapter."""
    lora = ["--lora-rank", "4", "--lora-alpha", "8"]
    sft_out = tmp_path / "sft"
    result = runner.invoke(train_sft_script.app, sft_flags(data | {"model": tiny_model_dir}, sft_out, *lora))
    assert result.exit_code == 0, result.output
    assert [r["grad_norm"] > 0 for r in rows(sft_out / "metrics.jsonl") if "loss" in r] == [True, True]
    adapter = load_file(sft_out / "checkpoint" / "policy" / "adapter_model.safetensors")
    assert adapter and all(".lora_A." in k or ".lora_B." in k for k in adapter)
    trained, initial = (
        load_file(sft_out / "policy" / "model.safetensors"),
        load_file(tiny_model_dir / "model.safetensors"),
    )
    changed = {k for k in initial if not torch.equal(trained[k], initial[k])}
    assert changed and all("proj" in k for k in changed)  # the frozen embedding and norms are as they were
    assert (sft_out / "policy" / "adapter" / "adapter_config.json").is_file()
    out = tmp_path / "ei"
    flags = [
        "--model",
        sft_out / "policy",
        "--dataset",
        data["gsm8k"],
        "--validation-dataset",
        data["held_out"],
        "--n-eval-examples",
        2,
        "--eval-max-tokens",
        4,
        "--n-ei-steps",
        2,
        "--questions-per-step",
        2,
        "--rollouts-per-question",
        2,
        "--sampling-max-tokens",
        5,
        "--batch-size",
        2,
        "--gradient-accumulation-steps",
        1,
        "--max-seq-length",
        256,
        "--backend",
        "hf",
        "--grader-workers",
        1,
        "--output-dir",
        out,
        *lora,
    ]
    result = runner.invoke(expert_iteration.app, [str(f) for f in flags])
    assert result.exit_code == 0, result.output
    assert [r["grpo_step"] for r in rows(out / "metrics.jsonl") if "kept_fraction" in r] == [1, 2]
    assert complete_step(out) == 2 and (out / "policy" / "adapter" / "adapter_model.safetensors").is_file()
