"""Zero-shot evaluation: format prompts, roll out, grade, and summarize into the handouts' categories;
`evaluate_vllm` is CS336 A5 math_baseline's suggested function under its own name and arguments."""

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from alignment.data.task import Task
from alignment.grader import RewardFn
from alignment.grading.parallel import REWARD_PREFIX, ParallelGrader
from alignment.prompts import format_prompt
from alignment.rollout.interface import Rollout, RolloutEngine, SamplingConfig
from alignment.utils.atomic import atomic_write_jsonl


@dataclass
class GradedRollout:
    prompt: str
    ground_truth: Any  # an answer string, a keyword list, ...
    response: str
    format_reward: float
    answer_reward: float
    reward: float
    num_tokens: int
    mean_logprob: float
    finish_reason: str
    scores: dict[str, float] = field(default_factory=dict)  # a task's per-function rewards: reward_<name>
    # whether the rewards graded a format and an answer (returned the course graders' format_reward and
    # answer_reward), so that the handouts' categories apply; else both are 0
    answer_graded: bool = False

    def to_json(self) -> dict:
        record = asdict(self)
        scores = record.pop("scores")
        del record["answer_graded"]
        return record | {k: None if math.isnan(v) else v for k, v in scores.items()}  # a reward's None: null


def category(record: GradedRollout) -> str:
    """The handouts' three buckets."""
    if record.format_reward and record.answer_reward:
        return "format1_answer1"
    return "format1_answer0" if record.format_reward else "format0_answer0"


def generate_and_grade(
    engine: RolloutEngine,
    questions: Sequence[str],
    ground_truths: Sequence[Any],
    template: str,
    grader: ParallelGrader,
    sampling: SamplingConfig,
    n: int = 1,
) -> tuple[list[GradedRollout], dict[str, float]]:
    """n rollouts per question, graded; returns the records (question-major) and phase timings in seconds."""
    prompts = [format_prompt(template, q) for q in questions]
    start = time.perf_counter()
    rollouts: list[Rollout] = engine.generate(prompts, n, sampling)
    generated = time.perf_counter()
    truths = [ground_truths[r.prompt_index] for r in rollouts]
    scores = grader([r.text for r in rollouts], truths)
    graded = time.perf_counter()
    records = [
        GradedRollout(
            prompt=prompts[r.prompt_index],
            ground_truth=truth,
            response=r.text,
            format_reward=s.get("format_reward", 0.0),
            answer_reward=s.get("answer_reward", 0.0),
            reward=s["reward"],
            num_tokens=len(r.token_ids),
            mean_logprob=sum(r.logprobs) / max(1, len(r.logprobs)),
            finish_reason=r.finish_reason,
            scores={k: v for k, v in s.items() if k.startswith(REWARD_PREFIX)},
            answer_graded="format_reward" in s and "answer_reward" in s,
        )
        for r, truth, s in zip(rollouts, truths, scores)
    ]
    return records, {"generation_s": generated - start, "grading_s": graded - generated}


def summarize(records: Sequence[GradedRollout], timings: dict[str, float]) -> dict:
    """Counts per category, accuracy, format rate, response length and throughput."""
    counts = {"format1_answer1": 0, "format1_answer0": 0, "format0_answer0": 0}
    for record in records:
        counts[category(record)] += 1
    total = len(records)
    tokens = sum(r.num_tokens for r in records)
    return {
        "num_examples": total,
        "counts": counts,
        "accuracy": sum(r.answer_reward for r in records) / total,
        "format_rate": sum(r.format_reward for r in records) / total,
        "mean_response_tokens": tokens / total,
        "truncated_fraction": sum(r.finish_reason == "length" for r in records) / total,
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / timings["generation_s"] if timings["generation_s"] > 0 else None,
        "timings_s": timings,
    }


def evaluate_task(
    engine: RolloutEngine, task: Task, grader: ParallelGrader, sampling: SamplingConfig
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Mean reward, format reward and answer reward of one sample per validation question (`eval_reward`,
    `eval_format_reward`, `eval_answer_reward`), and a few example rollouts. An in-process engine samples the
    policy as it is: put it in eval mode first."""
    records, _ = generate_and_grade(engine, task.questions, task.truths, task.template, grader, sampling)
    examples = [
        {"prompt": r.prompt, "response": r.response, "truth": task.logged_truth(r.ground_truth), "reward": r.reward}
        for r in records[:3]
    ]
    n = len(records)
    summary = {
        "eval_reward": sum(r.reward for r in records) / n,
        "eval_format_reward": sum(r.format_reward for r in records) / n,
        "eval_answer_reward": sum(r.answer_reward for r in records) / n,
    }
    summary |= reward_means([r.scores for r in records], "eval_")
    if task.categories is not None:  # one sample per question, in question order
        summary |= category_means([r.reward for r in records], task.categories, "eval_reward@")
    return summary, examples


def task_summary(records: Sequence[GradedRollout], timings: dict[str, float], categories: Sequence[str] | None) -> dict:
    """A task's evaluation: mean reward, each reward function's mean, the mean reward per category (`categories[i]`:
    question i's, records question-major with the same number of samples each), lengths and throughput."""
    total, tokens = len(records), sum(r.num_tokens for r in records)
    summary = {"num_examples": total, "reward": sum(r.reward for r in records) / total}
    summary |= reward_means([r.scores for r in records], "")
    if categories:
        per_question = total // len(categories)
        summary |= category_means(
            [r.reward for r in records], [c for c in categories for _ in range(per_question)], "reward@"
        )
    return summary | {
        "mean_response_tokens": tokens / total,
        "truncated_fraction": sum(r.finish_reason == "length" for r in records) / total,
        "generated_tokens": tokens,
        "generated_tokens_per_s": tokens / timings["generation_s"] if timings["generation_s"] > 0 else None,
        "timings_s": timings,
    }


def reward_means(scores: Sequence[dict[str, float]], prefix: str) -> dict[str, float]:
    """`prefix + reward_<name>`: the mean of each reward function's scores over the rollouts it applied to (a
    reward that returned None, NaN in its score, is left out as TRL leaves it out); a function that applied to none
    is not logged."""
    means: dict[str, float] = {}
    for key in dict.fromkeys(k for s in scores for k in s if k.startswith(REWARD_PREFIX)):
        applied = [s[key] for s in scores if key in s and not math.isnan(s[key])]
        if applied:
            means[prefix + key] = sum(applied) / len(applied)
    return means


def category_means(rewards: Sequence[float], categories: Sequence[str], prefix: str) -> dict[str, float]:
    """`prefix + category`: the mean reward of each category's rollouts (rewards[i] belongs to categories[i])."""
    by: dict[str, list[float]] = {}
    for reward, name in zip(rewards, categories):
        by.setdefault(name, []).append(reward)
    return {prefix + name: sum(values) / len(values) for name, values in sorted(by.items())}


def sampling_of(params: Any) -> tuple[SamplingConfig, int]:
    """(our SamplingConfig, samples per prompt) from a `vllm.SamplingParams`, or a SamplingConfig as it is (n = 1)."""
    if isinstance(params, SamplingConfig):
        return params, 1
    if params.max_tokens is None:
        raise ValueError("eval_sampling_params.max_tokens must be set (the handouts use 1024)")
    stop = () if params.stop is None else (params.stop,) if isinstance(params.stop, str) else tuple(params.stop)
    config = SamplingConfig(
        temperature=params.temperature,
        top_p=params.top_p,
        max_tokens=params.max_tokens,
        min_tokens=params.min_tokens,
        stop=stop,
        include_stop_str_in_output=params.include_stop_str_in_output,
        seed=params.seed,
    )
    return config, params.n


def evaluate_vllm(
    vllm_model: Any,
    reward_fn: RewardFn,
    prompts: Sequence[str],
    eval_sampling_params: Any,
    ground_truths: Sequence[Any],
    output_path: str | Path | None = None,
    grader_workers: int | None = None,
) -> tuple[list[GradedRollout], dict]:
    """Generate for `prompts` (already formatted, e.g. with the r1_zero template), grade each response with
    `reward_fn(response, ground_truth)`, write one JSON line per response (prompt, ground truth, response, rewards,
    tokens, mean log-prob) to `output_path` when given, and return (records, summary): the summary counts the
    handouts' three categories and gives accuracy, format rate, response length and throughput.

    `vllm_model` is a `vllm.LLM` (sampled through our engine, so every prompt's samples are drawn as the GRPO loop
    draws them) or any RolloutEngine (hf, transformer_lm); `eval_sampling_params` a `vllm.SamplingParams` (its `n`
    samples per prompt) or our SamplingConfig. The handout's signature has no ground truths, which grading needs.
    Grading runs in `grader_workers` processes (default: CPU count, at most 8) when `reward_fn` is a module-level
    function, else in this process.
    """
    if type(vllm_model).__module__.startswith("vllm"):
        from alignment.rollout.vllm_engine import VLLMRolloutEngine

        vllm_model = VLLMRolloutEngine.from_llm(vllm_model)
    sampling, n = sampling_of(eval_sampling_params)
    try:
        grader = ParallelGrader(reward_fn, grader_workers)
    except ValueError:  # a lambda or closure cannot travel to worker processes
        if grader_workers is not None:
            raise
        grader = ParallelGrader(reward_fn, 1)
    with grader:
        records, timings = generate_and_grade(vllm_model, prompts, ground_truths, "{question}", grader, sampling, n)
    if output_path is not None:
        atomic_write_jsonl(Path(output_path), (r.to_json() for r in records))
    return records, summarize(records, timings)
