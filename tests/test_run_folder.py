"""A run driven through the real command line: stopped after 2 steps and continued with `--resume DIR` alone, it
ends exactly where an uninterrupted run ends; its policy/ folder is then a model every backend loads."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from scripts import eval_zero_shot, train_grpo

runner = CliRunner()
PROBLEMS = [
    {"question": "What is 1 + 1?", "answer": "#### 2"},
    {"question": "What is 10 - 4?", "answer": "#### 6"},
    {"question": "What is 2 * 6?", "answer": "#### 12"},
]


def rows(run: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in lines]


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """An uninterrupted 3-step run and one stopped at step 2 then continued with --resume DIR alone."""
    root = tmp_path_factory.mktemp("runs")
    data = root / "problems.jsonl"
    data.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    config = root / "tiny.toml"
    config.write_text(
        f'model = "{tiny_model_dir}"\ndataset = "{data}"\nvalidation_dataset = "{data}"\nprompt = "question_only"\n'
        "rollout_batch_size = 4\ngroup_size = 2\ntrain_batch_size = 4\ngradient_accumulation_steps = 2\n"
        'sampling_max_tokens = 6\nsampling_min_tokens = 2\nsampling_temperature = 1.0\nloss_type = "grpo_clip"\n'
        'eval_every = 1\nn_eval_examples = 3\ncheckpoint_every = 1\ngrader_workers = 1\nbackend = "hf"\n'
        "kl_reference = false\nkl_prev = false\nlearning_rate = 0.01\n"
        "allow_validation_overlap = true\n"  # three questions serve both: these tests are about the run folder
    )
    straight, stopped = root / "straight", root / "stopped"
    for args in (["--output-dir", straight, "--n-grpo-steps", 3], ["--output-dir", stopped, "--n-grpo-steps", 2]):
        result = runner.invoke(train_grpo.app, ["--config", str(config), *map(str, args)])
        assert result.exit_code == 0, result.output
    result = runner.invoke(train_grpo.app, ["--resume", str(stopped), "--n-grpo-steps", "3"])
    assert result.exit_code == 0, result.output
    return {"straight": straight, "resumed": stopped}


def test_resume_alone_reaches_the_same_metrics_and_weights(runs):
    assert rows(runs["resumed"]) == rows(runs["straight"])
    assert [r["grpo_step"] for r in rows(runs["resumed"]) if "train_reward" in r] == [1, 2, 3]
    settings = json.loads((runs["resumed"] / "settings.json").read_text())
    assert settings["n_grpo_steps"] == 3 and settings["loss_type"] == "grpo_clip"  # the run's own, updated by --resume
    a, b = (
        load_file(runs["straight"] / "policy" / "model.safetensors"),
        load_file(runs["resumed"] / "policy" / "model.safetensors"),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("backend", ["hf", "transformer_lm"])
def test_the_trained_policy_folder_is_a_model_for_eval(runs, tmp_path, backend):
    data = runs["straight"].parent / "problems.jsonl"
    out = tmp_path / backend
    result = runner.invoke(
        eval_zero_shot.app,
        [
            "--dataset",
            str(data),
            "--model",
            str(runs["straight"] / "policy"),
            "--max-tokens",
            "4",
            "--prompt",
            "question_only",
            "--output-dir",
            str(out),
            "--backend",
            backend,
            "--grader-workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["num_examples"] == 3


def test_an_edited_settings_file_is_refused_naming_it(runs, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(runs["straight"], copy)
    settings = copy / "settings.json"
    settings.write_text(settings.read_text().replace('"learning_rate": 0.01', '"learning_rate": 0.02'))
    result = runner.invoke(train_grpo.app, ["--resume", str(copy), "--n-grpo-steps", "4"])
    text = " ".join(result.output.split())
    assert (
        result.exit_code != 0
        and "learning_rate: checkpoint 0.01 vs now 0.02" in text
        and f"{settings} was edited" in text
    )
