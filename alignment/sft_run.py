"""SFT end to end (CS336 A5 §4): the run `scripts/train_sft.py` starts.

The training examples are loaded (and with --filter-correct, graded), checked against the held-out questions,
then trained on in seeded order, one optimizer step per batch (alignment/supervised/trainer.py), with held-out
evaluations, checkpoints and resume from the shared scaffolding (alignment/supervised/session.py). Under torchrun,
one policy sharded over the processes.

`warm_start` is the same run before GRPO, in GRPO's command (its settings: alignment/run/warm_start.py).
"""

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from alignment.data.math_datasets import spread_subset
from alignment.data.sft_examples import SFTExample, load_sft_examples, record_format, sft_rows
from alignment.data.splits import EVALUATION_SPLITS, check_overlap, check_trainable, evaluation_examples, source_splits
from alignment.data.task import Task
from alignment.distributed.sharding import ShardGroup
from alignment.grader import RewardFn, reward_fn_for
from alignment.grading.parallel import ParallelGrader
from alignment.prompts import load_prompt, prompt_kind, prompt_question
from alignment.run.metrics_log import read_metrics_jsonl
from alignment.run.setup import learner_group
from alignment.run.training_settings import check_output_dir
from alignment.run.warm_start import WARM_START_DIR, check_warm_start
from alignment.supervised.config import SFTConfig, validate
from alignment.supervised.session import n_optimizer_steps, open_run, sft_steps
from alignment.tasks import builtin
from alignment.tasks.building import build_task
from alignment.tasks.loading import reward_set


def validation_source(config: SFTConfig) -> str:
    """--validation-dataset, else --dataset's own evaluation set: the validation.jsonl or test.jsonl beside a .jsonl
    file, a source's test or validation split, else MATH's test problems for prompt/response traces (the handout's
    MATH sft.jsonl) and GSM8K's test split for GSM8K records."""
    if config.validation_dataset is not None:
        return config.validation_dataset
    path = Path(config.dataset)
    if path.is_file():
        beside = [path.parent / f"{split}.jsonl" for split in EVALUATION_SPLITS]
        found = next((str(p) for p in beside if p.is_file() and p != path), None)
        if found is not None:
            return found
    elif set(source_splits(config.dataset)) & set(EVALUATION_SPLITS):
        return config.dataset
    where, first = sft_rows(config.dataset, config.dataset_split)[0]
    return "math" if record_format(first, where) == "sft" else "gsm8k"


def sft_validation(config: SFTConfig, examples: Sequence[SFTExample]) -> Task:
    """--n-eval-examples held-out questions, none of which (beyond 1%) is the question of a training prompt, as the
    math task's rows graded by its reward."""
    try:
        source = validation_source(config)
        pool, note = evaluation_examples(source)
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--validation-dataset: {err}") from None
    if note:
        tqdm.write(note)
    validation = spread_subset(pool, config.n_eval_examples)
    template = load_prompt(config.prompt)
    questions = [prompt_question(template, e.prompt) for e in examples]
    known = [q for q in questions if q is not None]
    overlap = check_overlap(
        known, [e.question for e in validation], config.dataset, source, config.allow_validation_overlap
    )
    unknown = f" ({len(questions) - len(known)} training prompts are not in the --prompt template, so not compared)"
    tqdm.write(
        f"validating on {len(validation)} questions of {source}; {overlap}"
        + (unknown if len(known) < len(questions) else "")
    )
    definition = builtin.math(config)  # its rows and rewards as the math task's, on SFT's validation questions
    rows = [builtin.math_row(e, template) for e in validation]
    return build_task(definition, rows, reward_set("math", definition, config), "math", None)


def filter_correct(examples: Sequence[SFTExample], reward_fn: RewardFn, workers: int | None) -> list[SFTExample]:
    """The examples whose response the grader scores correct (reward 1) against their ground truth."""
    missing = [i for i, e in enumerate(examples) if e.ground_truth is None]
    if missing:
        raise ValueError(f"--filter-correct needs a ground_truth on every example; example {missing[0]} has none")
    with ParallelGrader(reward_fn, workers) as grader:
        scores = grader([e.response for e in examples], [e.ground_truth for e in examples])
    return [e for e, s in zip(examples, scores) if s["reward"] == 1.0]


def load_training_examples(config: SFTConfig) -> tuple[list[SFTExample], dict[str, int]]:
    """The examples to train on and how many were loaded / kept; every data error names its flag."""
    template = load_prompt(config.prompt)
    try:
        check_trainable(
            config.dataset,
            None if Path(config.dataset).is_file() else config.dataset_split,
            config.train_on_evaluation_split,
        )
        examples = load_sft_examples(
            config.dataset, config.data_format, template, config.dataset_split, config.n_examples
        )
    except (FileNotFoundError, ValueError) as err:
        raise ValueError(f"--dataset: {err}") from None
    counts = {"n_examples_loaded": len(examples)}
    if config.filter_correct:
        reward_fn = reward_fn_for(prompt_kind(config.prompt), config.grader)
        examples = filter_correct(examples, reward_fn, config.grader_workers)
        counts["n_examples_kept"] = len(examples)
        if not examples:
            raise ValueError(
                f"--filter-correct kept none of the {counts['n_examples_loaded']} examples of {config.dataset}: "
                "the grader scored no response correct"
            )
    return examples, counts


def train_sft(config: SFTConfig, resume: bool = False) -> list[dict[str, Any]]:
    """Run (or resume) SFT; returns the metrics rows of this invocation's optimizer steps. Under torchrun, one
    policy sharded over the processes (learner_group)."""
    validate(config)
    with learner_group(config) as group:
        return _train_sft(config, resume, group)


def _train_sft(config: SFTConfig, resume: bool, group: ShardGroup | None) -> list[dict[str, Any]]:
    check_output_dir(config, resume)
    examples, counts = load_training_examples(config)
    tqdm.write(
        f"training on {len(examples)} examples"
        + (
            f" (kept {counts['n_examples_kept']} of {counts['n_examples_loaded']} graded correct)"
            if config.filter_correct
            else ""
        )
    )
    run = open_run(config, resume, examples, sft_validation(config, examples), group)
    n_steps = n_optimizer_steps(len(examples), config.epochs, config.batch_size)
    rows: list[dict[str, Any]] = []
    try:
        if run.step == 0:
            run.log.log({"grpo_step": 0} | counts)
            if config.eval_at_start:
                run.evaluate()
        bar = tqdm(total=n_steps, initial=run.step, desc="SFT", unit="step", disable=not run.main)

        def after_step(row: dict[str, float], position: int) -> None:
            run.step += 1
            row |= {"grpo_step": run.step, "time_elapsed_s": run.elapsed()}
            run.log.log(row)
            rows.append(row)
            bar.set_postfix(loss=f"{row['loss']:.3f}")
            bar.update(1)
            if run.step % config.eval_every == 0 or run.step == n_steps:
                bar.set_postfix(eval_reward=f"{run.evaluate()['eval_reward']:.2f}")
            if run.step % config.checkpoint_every == 0 or run.step == n_steps:
                run.checkpoint({"order_position": position})

        sft_steps(
            run, examples, config.epochs, config.seed, position=run.state.get("order_position", 0), on_step=after_step
        )
        bar.close()
        run.finish()
    finally:
        run.close()
    return rows


def warm_start_config(config: Any) -> SFTConfig:
    """The SFT run the warm start is: --model on warm_start_sft_steps batches of --dataset's training split,
    validated on the GRPO run's held-out questions at its evaluation settings, at the start and the end."""
    steps, batch = config.warm_start_sft_steps, config.warm_start_sft_batch_size
    return SFTConfig(
        model=config.model,
        dataset=config.dataset,
        dataset_split=config.dataset_split,
        validation_dataset=config.validation_dataset,
        data_format="gsm8k",
        n_examples=steps * batch,
        prompt=config.prompt,
        grader=config.grader,
        seed=config.seed,
        learning_rate=config.warm_start_sft_learning_rate,
        batch_size=batch,
        gradient_accumulation_steps=1,
        max_seq_length=512,
        epochs=1,
        eval_every=steps + 1,  # at the start and after the last step only
        checkpoint_every=steps,
        n_eval_examples=config.n_eval_examples,
        eval_max_tokens=config.eval_max_tokens or config.sampling_max_tokens,
        eval_temperature=config.sampling_temperature if config.eval_temperature is None else config.eval_temperature,
        eval_top_p=config.sampling_top_p,
        backend=config.backend,
        grader_workers=config.grader_workers,
        torch_threads=config.torch_threads,
        allow_validation_overlap=config.allow_validation_overlap,
        output_dir=config.output_dir / WARM_START_DIR,
        overwrite=config.overwrite,
    )


def warm_start(config: Any) -> tuple[Any, str | None]:
    """Run the warm start when asked for: (the GRPO config now starting from its policy, a line with its gain).
    Without one: (config, None)."""
    check_warm_start(config)
    if config.warm_start_sft_steps == 0:
        return config, None
    sft = warm_start_config(config)
    train_sft(sft)
    evals = [row for row in read_metrics_jsonl(sft.output_dir / "metrics.jsonl") if "eval_reward" in row]
    first, last = evals[0], evals[-1]
    line = (
        f"warm start (SFT, {config.warm_start_sft_steps} step{'s' * (config.warm_start_sft_steps != 1)} of "
        f"{config.warm_start_sft_batch_size}): held-out "
        f"reward {first['eval_reward']:.3f} -> {last['eval_reward']:.3f} "
        f"({100 * (last['eval_reward'] - first['eval_reward']):+.1f} points), format reward "
        f"{first.get('eval_format_reward', float('nan')):.3f} -> {last.get('eval_format_reward', float('nan')):.3f}, "
        f"{last['time_elapsed_s']:.0f} s"
    )
    return replace(config, model=str(Path(sft.output_dir) / "policy")), line
