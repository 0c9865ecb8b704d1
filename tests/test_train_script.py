"""scripts/train_grpo.py: a --config file (TOML or YAML) with command-line flags overriding it."""

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scripts import train_grpo as script
from tests.test_grpo_loop import TASK, tiny_config


@pytest.fixture
def captured(monkeypatch):
    seen = {}
    monkeypatch.setattr(script, "train_grpo", lambda config, resume=False: seen.update(config=config, resume=resume))
    monkeypatch.setattr(script, "report", lambda output_dir: None)
    return seen


@pytest.mark.parametrize("suffix,text", [
    (".toml", 'task = "keywords"\nlearning_rate = 3e-5\noutput_dir = "from_file"\ngroup_size = 4\nkeywords_dataset = "kw"\n'),
    (".yaml", "task: keywords\nlearning_rate: 3.0e-5\noutput_dir: from_file\ngroup_size: 4\nkeywords_dataset: kw\n"),
])
def test_flags_override_the_config_file(tmp_path, captured, suffix, text):
    path = tmp_path / f"run{suffix}"
    path.write_text(text)
    result = CliRunner().invoke(script.app, ["--config", str(path), "--learning-rate", "0.5", "--no-use-std-normalization"])
    assert result.exit_code == 0, result.output
    config = captured["config"]
    assert config.task == "keywords" and config.group_size == 4 and config.output_dir == Path("from_file")  # file
    assert config.keywords_dataset == Path("kw")  # path settings arrive as paths, as the loaders expect
    assert config.learning_rate == 0.5 and config.use_std_normalization is False  # flags win
    assert config.n_grpo_steps == 200 and captured["resume"] is False  # defaults stay


def test_unknown_setting_is_named(tmp_path, captured):
    bad = tmp_path / "bad.toml"
    bad.write_text("learning_rat = 1.0\n")
    result = CliRunner().invoke(script.app, ["--config", str(bad)])
    assert result.exit_code != 0 and "unknown settings learning_rat" in result.output and not captured


def test_invalid_flags_are_reported_before_any_model_loads(tmp_path):
    result = CliRunner().invoke(script.app, ["--rollout-batch-size", "10", "--group-size", "4", "--model", "/nonexistent"])
    text = " ".join(result.output.replace("│", " ").split())  # the message is wrapped inside an error panel
    assert result.exit_code != 0 and "--rollout-batch-size (10) must be divisible by --group-size (4)" in text


def test_wandb_offline_needs_no_network(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    from alignment.grpo_run import train_grpo

    config = replace(tiny_config(tiny_model_dir, tmp_path), wandb_mode="offline", wandb_project="tests")
    rows = train_grpo(config, TASK, TASK)
    assert rows and list((config.output_dir / "wandb").glob("offline-run-*"))
