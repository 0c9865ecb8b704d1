"""The CS336 2026 on-policy variants side by side at laptop size, and RFT's pruning speed-up: what
docs/benchmarks/cs336_2026_variants.md reports.

    uv run python bench/cs336_2026_variants.py sweep     # 5 arms x 4 seeds (configs/experiments/cpu/...)
    uv run python bench/cs336_2026_variants.py sweep --streams 2   # two sweeps side by side, seeds split
    uv run python bench/cs336_2026_variants.py pruning   # grpo_train_step on one RFT batch, pruned vs unpruned
    uv run python bench/cs336_2026_variants.py report    # the page's tables, and its figures into docs/figures/

`sweep` runs scripts/sweep.py on configs/experiments/cpu/cs336_2026_variants_cpu.toml seed by seed (--seeds 0, then
0,1, then 0,1,2,3: finished runs are skipped), so that a sweep cut short has every arm at the same seeds; with
--streams 2, two such sweeps side by side (seeds 0 and 2, seeds 1 and 3), gathered into one folder (`gather`). `pruning`
samples one batch of keyword rollouts from SmolLM2-135M, grades it, and times `grpo_train_step` with RFT's settings
(baseline none, normalizer none, constant normalization) with and without `skip_zero_advantage`, alternating, after
checking that both give the same gradient step. `report` prints each arm's final validation reward over its seeds
(mean, std, min, max, 95% band), its wall time per run and its seconds per step by phase, from the sweep's folders.
"""

import json
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import typer

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "configs" / "experiments" / "cpu" / "cs336_2026_variants_cpu.toml"
FIGURES = ROOT / "docs" / "figures" / "cs336_2026_variants"
SEED_STAGES = ("0", "0,1", "0,1,2,3")

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def sweep_dir(output_root: Path) -> Path:
    return output_root / "cpu" / PRESET.stem


@app.command()
def sweep(
    output_root: Path = typer.Option(Path("outputs/bench"), help="Where the sweep's runs go."),
    streams: int = typer.Option(
        1, help="Sweeps side by side, each over its share of the seeds in a folder of its own, gathered at the end."
    ),
) -> None:
    """Every arm at seed 0, then at seed 1, then at seeds 2 and 3; with --streams N, N sweeps side by side (seed k
    in stream k mod N), their runs gathered into one folder at the end (gather)."""
    if streams == 1:
        for seeds in SEED_STAGES:
            started = time.perf_counter()
            run_sweep(seeds, output_root)
            typer.echo(f"seeds {seeds}: {time.perf_counter() - started:.0f} s")
        return
    roots = [output_root / f"stream{k}" for k in range(streams)]

    def stream(k: int) -> None:
        for seed in range(k, len(SEED_STAGES[-1].split(",")), streams):
            run_sweep(str(seed), roots[k])

    with ThreadPoolExecutor(streams) as pool:
        list(pool.map(stream, range(streams)))
    gather(output_root, roots)


def run_sweep(seeds: str, output_root: Path) -> None:
    command = [sys.executable, str(ROOT / "scripts" / "sweep.py"), str(PRESET), "--seeds", seeds]
    subprocess.run(command + ["--output-root", str(output_root)], check=True)


@app.command()
def gather(
    output_root: Path = typer.Option(Path("outputs/bench"), help="The folder the report reads."),
    sources: list[Path] = typer.Argument(..., help="Output roots of other sweeps of the same preset."),
) -> None:
    """Move the run folders of sweeps of this preset made elsewhere (other seeds) into output_root's."""
    target = sweep_dir(output_root)
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        for run in sorted(sweep_dir(source).glob("*_seed*")):
            if not (target / run.name).exists():
                shutil.move(str(run), str(target / run.name))
                typer.echo(f"{run} -> {target / run.name}")


@app.command()
def pruning(
    prompts: int = typer.Option(8, help="Keyword prompts in the batch."),
    group_size: int = typer.Option(4, help="Rollouts per prompt."),
    max_tokens: int = typer.Option(16, help="Tokens per rollout."),
    microbatch: int = typer.Option(4, help="Rows per accumulation step (the pruned step keeps it)."),
    repeats: int = typer.Option(3, help="Timed steps of each kind, alternating."),
    correct_per_group: int = typer.Option(
        1, help="Rollouts of each group made correct (the prompt's words appended): RFT trains on these alone."
    ),
) -> None:
    """RFT's step on one batch: every row through the model vs only the rows with a non-zero advantage (the correct
    ones). The batch is sampled, then `correct_per_group` rollouts of each group get the prompt's words appended,
    so that the fraction RFT keeps is set rather than left to a few samples of an untrained model."""
    from alignment.grpo_train_step import grpo_train_step
    from alignment.models.loading import load_model_and_tokenizer

    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer("smollm2-135m", "cpu", torch.float32)
    batch = keyword_batch(model, tokenizer, prompts, group_size, max_tokens)
    for i in range(0, len(batch["responses"]), group_size):
        for j in range(i, i + correct_per_group):
            batch["responses"][j] += " " + " ".join(batch["truths"][j]["keywords"])
    rewards = [batch["reward_fn"](r, t)["reward"] for r, t in zip(batch["responses"], batch["truths"])]
    kept = sum(1 for r in rewards if r != 0)
    typer.echo(f"{len(rewards)} rollouts, {kept} correct (RFT passes only these through the model)")
    initial = {k: v.clone() for k, v in model.state_dict().items()}

    def step(skip: bool) -> tuple[float, dict]:
        model.load_state_dict(initial)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)  # the update is the clipped gradient itself
        started = time.perf_counter()
        _, metadata = grpo_train_step(
            model,
            tokenizer,
            optimizer,
            len(rewards) // microbatch,
            1.0,
            batch["reward_fn"],
            batch["prompts"],
            batch["responses"],
            batch["truths"],
            group_size,
            baseline="none",
            advantage_normalizer="none",
            loss_normalization="constant",
            normalization_constant=len(rewards) * max_tokens,
            skip_zero_advantage=skip,
        )
        return time.perf_counter() - started, metadata | {
            "after": {k: v.clone() for k, v in model.state_dict().items()}
        }

    times: dict[bool, list[float]] = {True: [], False: []}
    results = {}
    for _ in range(repeats):
        for skip in (False, True):
            seconds, results[skip] = step(skip)
            times[skip].append(seconds)
    gap = max((results[True]["after"][k] - results[False]["after"][k]).abs().max().item() for k in initial)
    moved = max((results[False]["after"][k] - initial[k]).abs().max().item() for k in initial)
    unpruned, pruned = statistics.median(times[False]), statistics.median(times[True])
    typer.echo(
        json.dumps(
            {
                "rollouts": len(rewards),
                "rows_in_backward": results[True]["rows_in_backward"],
                "microbatches": [results[False]["microbatches"], results[True]["microbatches"]],
                "unpruned_s": [round(t, 2) for t in times[False]],
                "pruned_s": [round(t, 2) for t in times[True]],
                "speed_up": round(unpruned / pruned, 2),
                "largest_update": moved,
                "largest_difference_pruned_vs_unpruned": gap,
            }
        )
    )


def keyword_batch(model, tokenizer, prompts: int, group_size: int, max_tokens: int) -> dict:
    """One step's rollouts of the keyword demo's task, sampled from the model itself."""
    from alignment.grpo.config import GRPOConfig
    from alignment.prompts import chat_renderer, format_prompt
    from alignment.rollout.hf_engine import HFRolloutEngine
    from alignment.rollout.interface import SamplingConfig
    from alignment.tasks.building import run_tasks

    config = GRPOConfig(
        model="smollm2-135m",
        task="keywords",
        keywords_file=ROOT / "data" / "keywords" / "stand_in.txt",
        keyword_match="word",
    )
    task, _ = run_tasks(config, chat_renderer(tokenizer), check=False)
    texts = [format_prompt(task.template, q) for q in task.questions[:prompts]]
    engine = HFRolloutEngine(model, tokenizer)
    sampling = SamplingConfig(temperature=1.0, max_tokens=max_tokens, min_tokens=4, stop=(), seed=0)
    rollouts = engine.generate(texts, group_size, sampling)
    return {
        "prompts": [texts[r.prompt_index] for r in rollouts],
        "responses": [r.text for r in rollouts],
        "truths": [task.truths[r.prompt_index] for r in rollouts],
        "reward_fn": task.reward_fn,
    }


@app.command()
def report(output_root: Path = typer.Option(Path("outputs/bench"), help="Where the sweep's runs went.")) -> None:
    """Per arm, over the seeds whose runs finished: final validation reward (mean, std, min, max, 95% band), wall
    time per run, seconds per step by phase, rows through the model; the sweep's figures (each arm's mean with its
    band) and results.md redrawn over those seeds, the figures copied into docs/figures/cs336_2026_variants/."""
    from alignment.experiments.plotting import plot_rows, time_per_step
    from alignment.experiments.run_table import final_rewards
    from alignment.experiments.seeds import spread
    from alignment.experiments.sweep import load_preset, read_metrics, results_table, run_state, run_styles

    root = sweep_dir(output_root)
    steps = load_preset(PRESET).runs[0].settings.get("n_grpo_steps")
    ran = {p.name for p in root.glob("*_seed*") if run_state(p, None if steps is None else int(steps)) == "finished"}
    seeds = sorted({int(name.rsplit("_seed", 1)[1]) for name in ran})
    preset = load_preset(PRESET, seeds=seeds)
    runs = [r for r in preset.runs if r.label in ran]
    rows = {r.label: read_metrics(root / r.label) for r in runs}
    plot_rows(rows, root / "plots", run_styles(runs), phases=False, arms={r.label: r.arm for r in runs})
    (root / "results.md").write_text(results_table(preset, root))
    lines = [
        "| arm | seeds | final held-out reward: mean | std | min | max | 95% band | wall time per run (s) | "
        "rollout s/step | train s/step | rows through the model |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm in preset.arms:
        finished = [rows[r.label] for r in runs if r.arm == arm]
        finished = [r for r in finished if final_rewards(r) is not None and final_rewards(r)["step"] > 0]
        if not finished:
            lines.append(f"| {arm} | 0 | not run | | | | | | | | |")
            continue
        finals = spread([final_rewards(r)["final"] for r in finished])
        wall = statistics.fmean(final_rewards(r)["time_s"] for r in finished)
        steps = [time_per_step(r) for r in finished]
        rollout = statistics.fmean(s["rollout"] for s in steps)
        train = statistics.fmean(s["train"] for s in steps)
        kept = [1 - row["rows_without_backward"] for r in finished for row in r if "rows_without_backward" in row]
        through = f"{statistics.fmean(kept):.2f}" if kept else "-"
        band = "-" if finals.n < 2 else f"{finals.low:.3f} to {finals.high:.3f}"
        std = "-" if finals.n < 2 else f"{finals.std:.3f}"
        lines.append(
            f"| {arm} | {finals.n} | {finals.mean:.3f} | {std} | {finals.min:.3f} | {finals.max:.3f} | {band} | "
            f"{wall:.0f} | {rollout:.1f} | {train:.1f} | {through} |"
        )
    typer.echo("\n".join(lines))
    FIGURES.mkdir(parents=True, exist_ok=True)
    for name in ("eval_reward_vs_step.png", "eval_reward_vs_time.png", "train_reward.png", "time_per_step.png"):
        if (root / "plots" / name).is_file():
            shutil.copy(root / "plots" / name, FIGURES / name)
            typer.echo(f"copied {FIGURES / name}")


if __name__ == "__main__":
    app()
