"""PKU NLPDL HW3's runs (configs/pku/): Qwen3-0.6B on GSM8K. Every preset starts and writes its results here, on a
tiny random Qwen3 (the same architecture, 2 layers) and a local copy of GSM8K laid out as the hub's; the settings
each preset carries are the handout's."""

import json
import tomllib
from pathlib import Path

import pytest
import torch
from transformers import Qwen3ForCausalLM
from typer.testing import CliRunner

from alignment.data.splits import run_data
from alignment.experiments.sweep import load_preset
from alignment.grpo.config import GRPOConfig, validate
from alignment.prompts import stop_strings
from scripts import best_of_n, eval_zero_shot, train_grpo
from tests.conftest import tiny_config

PKU = Path(__file__).resolve().parents[1] / "configs" / "pku"
SWEEPS = sorted(p for p in PKU.glob("grpo_*.toml"))
runner = CliRunner()


def invoke(app, *args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory, tokenizer) -> Path:
    """A 2-layer random Qwen3 (head size 32, not hidden / heads) over SmolLM2's tokenizer, saved as a model folder."""
    torch.manual_seed(0)
    config = tiny_config("qwen3", len(tokenizer), tokenizer.pad_token_id, head_dim=32, max_position_embeddings=2048)
    folder = tmp_path_factory.mktemp("tiny-qwen3")
    Qwen3ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_the_presets_carry_the_handouts_settings():
    zero_shot = tomllib.loads((PKU / "zero_shot.toml").read_text())
    assert (zero_shot["model"], zero_shot["dataset"], zero_shot["prompt"]) == ("Qwen/Qwen3-0.6B", "gsm8k", "r1_zero")
    assert (zero_shot["temperature"], zero_shot["top_p"], zero_shot["max_tokens"]) == (1.0, 1.0, 1024)
    assert stop_strings(zero_shot["prompt"]) == ("</answer>",)
    bon = tomllib.loads((PKU / "best_of_n.toml").read_text())
    assert bon["ns"] == [1, 4, 8, 16] and bon["n_max"] == 16
    assert bon["zero_shot_generations"] == zero_shot["output_dir"] + "/generations.jsonl"
    grpo = GRPOConfig(**tomllib.loads((PKU / "grpo.toml").read_text()))
    validate(grpo)
    starter = {
        "n_grpo_steps": 200,
        "learning_rate": 1e-5,
        "advantage_eps": 1e-6,
        "rollout_batch_size": 256,
        "group_size": 8,
        "sampling_temperature": 1.0,
        "sampling_min_tokens": 4,
        "sampling_max_tokens": 1024,
        "epochs_per_rollout_batch": 1,
        "train_batch_size": 256,
        "gradient_accumulation_steps": 128,
        "gpu_memory_utilization": 0.85,
        "loss_type": "reinforce_with_baseline",
        "use_std_normalization": True,
        "weight_decay": 0.0,
        "adam_beta1": 0.9,
        "adam_beta2": 0.95,
        "max_grad_norm": 1.0,
        "eval_every": 5,
        "n_eval_examples": 1024,
    }
    assert {k: getattr(grpo, k) for k in starter} == starter
    assert (grpo.model, grpo.dataset, grpo.stop) == ("Qwen/Qwen3-0.6B", "gsm8k", ("</answer>",))
    arms = {path.stem: {run.arm: run.settings for run in load_preset(path).runs} for path in SWEEPS}
    assert [s["learning_rate"] for s in arms["grpo_learning_rate"].values()] == [5e-6, 1e-5, 2e-5, 5e-5]
    assert {s["loss_type"] for s in arms["grpo_baselines"].values()} == {"no_baseline", "reinforce_with_baseline"}
    assert {s["use_std_normalization"] for s in arms["grpo_group_standard_deviation"].values()} == {True, False}
    normalize = arms["grpo_length_normalization"]["masked_normalize"]
    assert normalize["loss_aggregation"] == "constant" and normalize["normalize_constant"] == 1024
    assert {s["loss_type"] for s in arms["grpo_off_policy_clip_ablation"].values()} == {"grpo_clip", "grpo_no_clip"}
    assert {s["rollout_batch_size"] for s in arms["grpo_off_policy_sweep"].values()} == {256}
    assert all(s["n_grpo_steps"] < 50 for s in arms["grpo_off_policy_sweep"].values())
    question_only = GRPOConfig(**arms["grpo_prompt_ablation"]["question_only"])
    assert question_only.stop == ()  # no </answer> stop, graded by question_only_reward_fn


@pytest.mark.parametrize("preset", SWEEPS, ids=lambda p: p.stem)
def test_every_arm_is_valid_and_loads_gsm8k(preset, hub_mirror):
    for run in load_preset(preset).runs:
        config = GRPOConfig(**run.settings)
        validate(config)
        data = run_data(config.dataset, config.dataset_split, config.validation_dataset, config.n_eval_examples)
        assert data.validation and data.train and "test" in data.notes[0]  # GSM8K's test split validates


def test_zero_shot_then_best_of_n_reuse_its_generations_for_n1(tiny_qwen3, hub_mirror, tmp_path):
    zero = tmp_path / "zero_shot"
    common = ["--model", tiny_qwen3, "--limit", 4, "--max-tokens", 8, "--backend", "hf", "--grader-workers", 1]
    result = invoke(eval_zero_shot.app, "--config", PKU / "zero_shot.toml", *common, "--output-dir", zero)
    assert result.exit_code == 0, result.output
    summary = json.loads((zero / "summary.json").read_text())
    assert summary["num_examples"] == 4 and summary["config"]["dataset"] == "gsm8k"
    assert summary["config"]["temperature"] == 1.0 and summary["config"]["stop"] is None  # the prompt's own
    # problem 1(b) reads at least 10 responses of each category: the preset prints up to 10 (here all 4)
    shown = [line.split("]")[0] + "]" for line in result.output.splitlines() if line.startswith("[format")]
    assert sorted(shown) == sorted(f"[{name}]" for name, n in summary["counts"].items() for _ in range(min(n, 10)))
    assert len(shown) == 4 and summary["config"]["show_examples"] == 10
    rows = [json.loads(line) for line in (zero / "generations.jsonl").read_text().splitlines()]
    # a random model rarely answers right: make two right, so that N=1 provably comes from this file
    for row in rows[:2]:
        row["response"] = f"easy </think> <answer>{row['ground_truth']}</answer>"
    (zero / "generations.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    bon = tmp_path / "best_of_n"
    flags = ["--n-max", 2, "--ns", 1, "--ns", 2, "--zero-shot-generations", zero / "generations.jsonl"]
    result = invoke(best_of_n.app, "--config", PKU / "best_of_n.toml", *common, *flags, "--output-dir", bon)
    assert result.exit_code == 0, result.output
    summary = json.loads((bon / "summary.json").read_text())
    assert summary["pass_at"]["1"] == summary["best_at"]["1"] == 0.5
    assert summary["n1_from"] == str(zero / "generations.jsonl") and (bon / "best_of_n.png").is_file()
    other = invoke(best_of_n.app, "--config", PKU / "best_of_n.toml", *common, *flags, "--limit", 3)
    assert other.exit_code == 2 and "responses to other prompts" in other.output


@pytest.mark.slow  # a whole preset run, 10-12 s; its arms are checked in the default suite
def test_the_grpo_preset_trains_and_writes_its_run_folder(tiny_qwen3, hub_mirror, tmp_path):
    out = tmp_path / "grpo"
    tiny = [
        "--model",
        tiny_qwen3,
        "--n-grpo-steps",
        1,
        "--rollout-batch-size",
        4,
        "--group-size",
        2,
        "--train-batch-size",
        4,
        "--gradient-accumulation-steps",
        2,
        "--sampling-max-tokens",
        8,
        "--n-eval-examples",
        2,
        "--backend",
        "hf",
        "--grader-workers",
        1,
        "--output-dir",
        out,
    ]
    result = invoke(train_grpo.app, "--config", PKU / "grpo.toml", *tiny)
    assert result.exit_code == 0, result.output
    settings = json.loads((out / "settings.json").read_text())
    assert (settings["dataset"], settings["learning_rate"], settings["grader"]) == ("gsm8k", 1e-5, "course")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["grpo_step"] for r in rows if "eval_reward" in r] == [0, 1]
    assert (out / "policy" / "config.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("preset", SWEEPS, ids=lambda p: p.stem)
def test_every_arm_trains_a_step(preset, tiny_qwen3, hub_mirror, tmp_path):
    """Each arm of each ablation, one tiny GRPO step (about 10 s an arm on 2 cores)."""
    from alignment.grpo_run import train_grpo

    for run in load_preset(preset).runs:
        config = GRPOConfig(
            **run.settings
            | dict(
                model=str(tiny_qwen3),
                n_grpo_steps=1,
                rollout_batch_size=8,
                group_size=2,
                train_batch_size=8 if run.settings["train_batch_size"] >= 256 else 4,
                gradient_accumulation_steps=2,
                sampling_max_tokens=8,
                normalize_constant=8 if run.settings.get("normalize_constant") else None,
                n_eval_examples=2,
                backend="hf",
                grader_workers=1,
                output_dir=tmp_path / run.label,
            )
        )
        rows = train_grpo(config)
        assert rows and all(r["grpo_step"] == 1 for r in rows)
        assert (tmp_path / run.label / "policy" / "config.json").is_file()
