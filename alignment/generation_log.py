"""log_generations (CS336 A5 §4): sample held-out answers, grade them, and describe them for the logs.

Per example: prompt, response, ground truth, format / answer / total reward and the mean token entropy of the
response under the policy; overall: the rewards' means, mean entropy, and the mean response length over all,
correct and incorrect responses.
"""

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from alignment.data.task import Task
from alignment.distributed.sharding import gathered, shard_group
from alignment.evaluation import GradedRollout, generate_and_grade, reward_means
from alignment.grading.parallel import ParallelGrader
from alignment.logprobs import get_response_log_probs
from alignment.masked import masked_mean
from alignment.rollout.interface import RolloutEngine, SamplingConfig
from alignment.sft import tokenize_prompt_and_output


def response_entropies(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    responses: Sequence[str],
    batch_size: int = 8,
) -> list[float]:
    """Mean next-token entropy (nats) over each response's tokens; NaN for an empty response.

    A policy sharded over processes (alignment/distributed/sharding.py): each rank scores its share with the weights
    gathered whole (no collective per call, so shares may differ in size), and every rank gets all of them.
    """
    group = shard_group(policy)
    if group is None:
        return _entropies(policy, tokenizer, prompts, responses, batch_size)
    with gathered(policy):  # entered outside inference mode: FSDP's gathered buffers stay ordinary tensors
        return group.split_work(
            len(prompts), lambda share: _entropies(policy, tokenizer, prompts[share], responses[share], batch_size)
        )


@torch.inference_mode()
def _entropies(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    responses: Sequence[str],
    batch_size: int,
) -> list[float]:
    device = next(policy.parameters()).device
    means: list[float] = []
    for start in range(0, len(prompts), batch_size):
        batch = tokenize_prompt_and_output(
            prompts[start : start + batch_size], responses[start : start + batch_size], tokenizer
        )
        mask = batch["response_mask"].to(device)
        out = get_response_log_probs(
            policy,
            batch["input_ids"].to(device),
            batch["labels"].to(device),
            return_token_entropy=True,
            response_mask=mask,
        )
        means += masked_mean(out["token_entropy"], mask, dim=1).tolist()
    return means


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def generation_summary(records: Sequence[GradedRollout], entropies: Sequence[float]) -> dict[str, float]:
    """Means over the records; lengths are response tokens, NaN over an empty group (e.g. no correct answer)."""
    correct = [r.num_tokens for r in records if r.reward == 1.0]
    incorrect = [r.num_tokens for r in records if r.reward != 1.0]
    finite = [e for e in entropies if e == e]
    return {
        "eval_reward": _mean([r.reward for r in records]),
        "eval_format_reward": _mean([r.format_reward for r in records]),
        "eval_answer_reward": _mean([r.answer_reward for r in records]),
        "eval_token_entropy": _mean(finite),
        "eval_response_length": _mean([r.num_tokens for r in records]),
        "eval_response_length_correct": _mean(correct),
        "eval_response_length_incorrect": _mean(incorrect),
    } | reward_means([r.scores for r in records], "eval_")  # a task's reward functions, each


def log_generations(
    engine: RolloutEngine,
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    task: Task,
    grader: ParallelGrader,
    sampling: SamplingConfig,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """One sample per question of `task`: (summary metrics, one record per example)."""
    policy.eval()
    records, _ = generate_and_grade(engine, task.questions, task.truths, task.template, grader, sampling)
    entropies = response_entropies(policy, tokenizer, [r.prompt for r in records], [r.response for r in records])
    rows = [
        {
            "prompt": r.prompt,
            "response": r.response,
            "ground_truth": task.logged_truth(r.ground_truth),
            "format_reward": r.format_reward,
            "answer_reward": r.answer_reward,
            "reward": r.reward,
            "token_entropy": h,
            "num_tokens": r.num_tokens,
        }
        for r, h in zip(records, entropies)
    ]
    return generation_summary(records, entropies), rows
