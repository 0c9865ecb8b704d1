"""Train a policy with GRPO.

    uv run scripts/train_grpo.py --loss-type grpo_clip --epochs-per-rollout-batch 2
    uv run scripts/train_grpo.py --config my_run.toml --learning-rate 2e-5     # flags override the file
    uv run scripts/train_grpo.py --resume outputs/grpo                          # continue a stopped run

Every field of alignment.grpo_config.GRPOConfig is a flag (`--n-grpo-steps`, `--no-use-std-normalization`,
...); defaults are the handouts' starter values. Writes metrics.jsonl, rollouts.jsonl and checkpoint/ to
--output-dir.
"""

import inspect
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import typer
import yaml

from alignment.cli import option_parameters
from alignment.grpo_config import GRPOConfig, field_names
from alignment.grpo_run import train_grpo
from alignment.plotting import plot_runs, read_rows

HELP = {
    "model": "Policy to train: a local HF folder, a hub id, or `smollm2-135m` (packaged); with --backend transformer_lm also one of our TransformerLM folders.",
    "task": "math (graded answers to --dataset) or keywords (write text that uses given words).",
    "keywords_file": "keywords task: one word per line (default: data/keywords.txt).",
    "keywords_dataset": "keywords task: a folder built by scripts/build_keyword_dataset.py (train.jsonl, validation.jsonl) instead of prompts generated from --keywords-file.",
    "keywords_per_prompt": "keywords task: words each prompt asks for.",
    "n_train_prompts": "keywords task: training prompts generated.",
    "dataset": "Training questions: `math`, `gsm8k`, a .jsonl file, a local dataset folder or a hub id.",
    "dataset_split": "Split of --dataset to train on (folders and hub ids).",
    "validation_dataset": "Validation questions (default: the test split of --dataset).",
    "prompt": "r1_zero or question_only; picks the matching reward function.",
    "n_grpo_steps": "GRPO steps (rollout batches) to run.",
    "learning_rate": "AdamW learning rate.",
    "advantage_eps": "Added to the group std before dividing.",
    "rollout_batch_size": "Rollouts per step (questions x group size).",
    "group_size": "Samples per question.",
    "sampling_temperature": "Rollout temperature.",
    "sampling_top_p": "Rollout nucleus mass.",
    "sampling_min_tokens": "Rollouts are at least this long.",
    "sampling_max_tokens": "Rollouts are at most this long.",
    "epochs_per_rollout_batch": "Passes over each rollout batch (> 1 is off-policy).",
    "train_batch_size": "Rollouts per optimizer step (< rollout batch is off-policy).",
    "gradient_accumulation_steps": "Microbatches per optimizer step.",
    "gpu_memory_utilization": "vLLM: fraction of the rollout GPU's memory.",
    "loss_type": "no_baseline, reinforce_with_baseline, grpo_clip or grpo_no_clip.",
    "use_std_normalization": "Divide advantages by the group std.",
    "cliprange": "GRPO-Clip epsilon.",
    "tis_cap": "Truncated importance sampling: weight each token's policy-gradient loss by min(pi_train / pi_rollout, C) to correct the rollout engine's log-prob mismatch (off by default).",
    "length_normalization": "masked_mean (per-sequence mean) or masked_normalize (sum / constant, Dr. GRPO).",
    "normalize_constant": "Constant for masked_normalize (default: --sampling-max-tokens).",
    "max_grad_norm": "Gradient clipping norm.",
    "weight_decay": "AdamW weight decay.",
    "adam_beta1": "AdamW beta1.",
    "adam_beta2": "AdamW beta2.",
    "eval_every": "Validate every N steps (and at the end).",
    "n_eval_examples": "Validation questions per evaluation.",
    "eval_max_tokens": "Validation max tokens (default: --sampling-max-tokens).",
    "grader_workers": "Grading processes (default: CPU count, at most 8).",
    "kl_reference": "Keep a frozen copy of the initial policy and log KL to it (costs its memory).",
    "kl_prev": "Log KL between the policies before and after each step (one extra forward pass).",
    "gradient_checkpointing": "Recompute activations in backward to save memory.",
    "backend": "Rollout backend: auto, hf, vllm, or transformer_lm (the policy is our own TransformerLM, sampled by its own decoder).",
    "policy_device": "Policy device (default: cuda:0, else cpu).",
    "rollout_device": "Rollout device (default: cuda:1 with two GPUs, else the policy device).",
    "dtype": "Policy dtype: bfloat16, float32, ... (default: bfloat16 on GPU, float32 on CPU).",
    "seed": "Seed for prompt order, sampling and initialization.",
    "output_dir": "Where metrics, rollouts and the checkpoint go.",
    "overwrite": "Let a fresh run replace an earlier run's files in --output-dir.",
    "checkpoint_every": "Save a checkpoint every N steps (and at the end).",
    "wandb_project": "wandb project name.",
    "wandb_mode": "online, offline (no network needed) or disabled.",
}


PATH_SETTINGS = {f.name for f in fields(GRPOConfig) if "Path" in str(f.type)}  # files hold them as strings


def read_config_file(path: Path, known: set[str] | None = None) -> dict[str, Any]:
    """Values from a TOML or YAML file; keys outside `known` (default: GRPOConfig's fields) are an error naming them."""
    if not path.is_file():
        raise typer.BadParameter(f"no such file: {path}", param_hint="'--config'")
    text = path.read_text()
    values = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text) or {}
    unknown = sorted(set(values) - (known or field_names()))
    if unknown:
        raise typer.BadParameter(f"{path}: unknown settings {', '.join(unknown)}", param_hint="'--config'")
    return {k: Path(v) if k in PATH_SETTINGS and v is not None else v for k, v in values.items()}


def settings(ctx: typer.Context, config: Path | None, resume: Path | None, flags: dict[str, Any],
             known: set[str] | None = None) -> dict[str, Any]:
    """The --config file's values, overridden by flags given on the command line; --resume sets the output folder."""
    values = read_config_file(config, known) if config else {}
    for name, value in flags.items():  # a flag given on the command line wins over the file
        source = ctx.get_parameter_source(name)  # typer may vendor click: compare the enum by name
        if (source is not None and source.name == "COMMANDLINE") or name not in values:
            values[name] = value
    if resume is not None:
        values["output_dir"] = resume
    return values


def main(ctx: typer.Context, config: Path | None = None, resume: Path | None = None, **flags: Any) -> None:
    run = GRPOConfig(**settings(ctx, config, resume, flags))
    try:
        train_grpo(run, resume=resume is not None)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    report(run.output_dir)


def report(output_dir: Path) -> None:
    """Print how held-out reward moved over the whole run, and write its plots."""
    metrics = output_dir / "metrics.jsonl"
    evals = [(row["grpo_step"], row["eval_reward"]) for row in read_rows(metrics) if "eval_reward" in row]
    if evals:
        (first_step, first), (last_step, last) = evals[0], evals[-1]
        typer.echo(f"held-out reward: {first:.3f} at step {first_step} -> {last:.3f} at step {last_step} "
                   f"({100 * (last - first):+.1f} points)")
    for path in plot_runs([metrics], [output_dir.name], output_dir / "plots"):
        typer.echo(f"plot: {path}")


def command_parameters(config_cls: type = GRPOConfig, help_texts: dict[str, str] = HELP) -> list[inspect.Parameter]:
    """ctx, --config and --resume, then one flag per field of `config_cls`."""
    return [
        inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context),
        inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                          default=typer.Option(None, help="TOML or YAML file of settings; flags override it.")),
        inspect.Parameter("resume", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                          default=typer.Option(None, help="Continue the run whose output folder this is.")),
    ] + option_parameters(config_cls, help_texts)


main.__signature__ = inspect.Signature(command_parameters())  # type: ignore[attr-defined]
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
app.command(help="Train a policy with GRPO (see the module docstring).")(main)

if __name__ == "__main__":
    app()
