"""Every script's command line: help fits 80 columns with every choice whole, wrong choices are refused before
anything heavy loads, and `--resume DIR` alone continues with the run folder's own settings."""

import importlib
import re
import typing
from dataclasses import fields, replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.config.settings import SETTINGS_FILE, choices_of, flag, help_of, write_run_settings
from alignment.grpo.config import GRPOConfig

SCRIPTS = sorted(p.stem for p in (Path(__file__).parents[1] / "scripts").glob("*.py") if p.stem != "__init__")
runner = CliRunner()


def app_of(name: str):
    return importlib.import_module(f"scripts.{name}").app


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_fits_80_columns_and_lists_every_choice_whole(script, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app_of(script), ["--help"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    words = set(re.findall(r"[\w.-]+", result.output))
    command = app_of(script).registered_commands[0].callback
    for name, annotation in typing.get_type_hints(command).items():
        for choice in choices_of(annotation) or ():
            assert choice in words, f"{script}: {flag(name)} choice {choice} not shown whole"


@pytest.mark.parametrize("script", ["train_grpo", "train_grpo_ray", "train_sft", "expert_iteration", "sweep"])
def test_help_shows_what_the_docstring_says_and_names_its_file(script, monkeypatch):
    """--help once said "see the module docstring" and showed none: it now shows its prose and names the file whose
    docstring holds the example commands."""
    monkeypatch.setenv("COLUMNS", "80")
    output = "".join(runner.invoke(app_of(script), ["--help"]).output.split())  # click breaks lines at hyphens too
    doc = importlib.import_module(f"scripts.{script}").__doc__
    prose = [p for p in doc.split("\n\n")[1:] if not p.startswith(" ")]
    assert prose and all("".join(p.split()) in output for p in prose), output
    assert f"Examples:thedocstringatopscripts/{script}.py." in output and "moduledocstring" not in output


def test_every_setting_has_help_beside_its_field():
    from alignment.ray.config import RayGRPOConfig
    from alignment.run.generation import GenerationConfig

    for config_cls in (GRPOConfig, RayGRPOConfig, GenerationConfig):
        assert all(help_of(f) for f in fields(config_cls)), config_cls


@pytest.mark.parametrize(
    "script,args,message",
    [
        (
            "train_grpo",
            ["--loss-type", "ppo"],
            "'ppo' is not one of 'no_baseline', 'reinforce_with_baseline', 'grpo_clip', 'grpo_no_clip'",
        ),
        ("train_grpo_ray", ["--strategy", "sync"], "'sync' is not one of 'colocated-sync', 'colocated-multistep'"),
        ("eval_zero_shot", ["--backend", "tpu"], "'tpu' is not one of 'auto', 'hf', 'vllm', 'transformer_lm'"),
        ("train_grpo", ["--precision", "int8"], "'int8' is not one of 'fp32', 'bf16', 'bf16-mixed', 'fp16-mixed'"),
        ("train_sft", ["--precision", "bfloat16"], "'bfloat16' is not one of 'fp32', 'bf16', 'bf16-mixed'"),
        ("train_grpo_ray", ["--precision", "fp16"], "'fp16' is not one of 'fp32', 'bf16', 'bf16-mixed'"),
        ("expert_iteration", ["--precision", "mixed"], "'mixed' is not one of 'fp32', 'bf16', 'bf16-mixed'"),
        ("expert_iteration", ["--wandb-mode", "on"], "'on' is not one of 'online', 'offline', 'disabled'"),
    ],
)
def test_a_wrong_choice_is_refused_by_the_parser_naming_flag_and_values(script, args, message, captured):
    result = runner.invoke(app_of(script), [*args, "--model", "/nonexistent"])
    assert result.exit_code == 2 and f"Invalid value for '{args[0]}'" in result.output and message in result.output
    assert not captured  # refused before anything ran


def test_a_wrong_choice_in_a_config_file_is_named_too(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('loss_type = "ppo"\n')
    result = runner.invoke(app_of("train_grpo"), ["--config", str(path), "--model", "/nonexistent"])
    assert result.exit_code != 0 and "--loss-type 'ppo' is not one of no_baseline" in " ".join(result.output.split())


def test_resume_alone_continues_with_the_run_folder_settings(tmp_path, captured):
    run = tmp_path / "run"
    config = GRPOConfig(
        task="keywords",
        learning_rate=3e-5,
        group_size=4,
        rollout_batch_size=16,
        train_batch_size=16,
        gradient_accumulation_steps=4,
        output_dir=run,
        keywords_file=tmp_path / "words.txt",
    )
    write_run_settings(config)
    result = runner.invoke(app_of("train_grpo"), ["--resume", str(run)])
    assert result.exit_code == 0, result.output
    assert captured == {"config": config, "resume": True}  # not the defaults: task math on MATH from the hub
    result = runner.invoke(app_of("train_grpo"), ["--resume", str(run), "--n-grpo-steps", "300", "--eval-every", "2"])
    assert result.exit_code == 0, result.output
    assert captured["config"] == replace(config, n_grpo_steps=300, eval_every=2)


def test_resume_refuses_a_change_that_would_alter_the_run(tmp_path, captured):
    run = tmp_path / "run"
    write_run_settings(GRPOConfig(output_dir=run, learning_rate=3e-5))
    result = runner.invoke(
        app_of("train_grpo"), ["--resume", str(run), "--learning-rate", "1e-4", "--n-grpo-steps", "9"]
    )
    text = " ".join(result.output.split())
    assert result.exit_code != 0 and "--learning-rate was 3e-05, now 0.0001" in text and "--n-grpo-steps" in text
    config_file = tmp_path / "other.toml"
    config_file.write_text('loss_type = "grpo_clip"\n')
    result = runner.invoke(app_of("train_grpo"), ["--resume", str(run), "--config", str(config_file)])
    assert result.exit_code != 0 and "--loss-type was 'reinforce_with_baseline', now 'grpo_clip'" in " ".join(
        result.output.split()
    )
    assert not captured


def test_resume_of_a_folder_without_settings_is_an_error_naming_it(tmp_path, captured):
    result = runner.invoke(app_of("train_grpo"), ["--resume", str(tmp_path)])
    assert result.exit_code != 0 and f"has no {SETTINGS_FILE}" in " ".join(result.output.split())
    assert not captured
