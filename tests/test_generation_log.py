"""log_generations: per-example records and the summary's means, lengths by correctness, and entropies."""

import math

import pytest
import torch

from alignment.data.task import Task
from alignment.evaluation import GradedRollout
from alignment.generation_log import generation_summary, log_generations, response_entropies
from alignment.grader import r1_zero_reward_fn
from alignment.grading.parallel import ParallelGrader
from alignment.logprobs import compute_entropy
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig


def record(reward: float, fmt: float, tokens: int) -> GradedRollout:
    return GradedRollout("p", "1", "r", fmt, reward, reward, tokens, 0.0, "stop")


def test_summary_means_and_lengths_by_correctness():
    records = [record(1.0, 1.0, 10), record(0.0, 1.0, 20), record(0.0, 0.0, 60), record(1.0, 1.0, 30)]
    summary = generation_summary(records, [1.0, 2.0, float("nan"), 3.0])
    assert summary["eval_reward"] == summary["eval_answer_reward"] == 0.5
    assert summary["eval_format_reward"] == 0.75
    assert summary["eval_response_length"] == 30.0
    assert summary["eval_response_length_correct"] == 20.0
    assert summary["eval_response_length_incorrect"] == 40.0
    assert summary["eval_token_entropy"] == 2.0  # an empty response's NaN is left out
    assert math.isnan(generation_summary([record(0.0, 0.0, 5)], [1.0])["eval_response_length_correct"])


def test_response_entropy_is_the_mean_over_response_tokens(tiny_model, tokenizer):
    prompts, responses = ["Question: 2+2?", "A much longer question about apples?"], [" 4 </answer>", " five"]
    got = response_entropies(tiny_model, tokenizer, prompts, responses, batch_size=1)
    for prompt, response, value in zip(prompts, responses, got):
        p, r = tokenizer(prompt)["input_ids"], tokenizer(response, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = tiny_model(torch.tensor([p + r])).logits[0]
        expected = compute_entropy(logits[len(p) - 1 : len(p) + len(r) - 1]).mean().item()
        assert value == pytest.approx(expected, rel=1e-5)


def test_log_generations_records_every_example(tiny_model, tokenizer):
    task = Task(
        ["What is 1+1?", "What is 2+3?", "What is 3+3?"], ["2", "5", "6"], "{question} <think>", r1_zero_reward_fn
    )
    with ParallelGrader(r1_zero_reward_fn, 1) as grader:
        summary, rows = log_generations(
            HFRolloutEngine(tiny_model, tokenizer, progress=False),
            tiny_model,
            tokenizer,
            task,
            grader,
            SamplingConfig(max_tokens=6, seed=0),
        )
    assert [r["ground_truth"] for r in rows] == ["2", "5", "6"]
    assert {
        "prompt",
        "response",
        "ground_truth",
        "format_reward",
        "answer_reward",
        "reward",
        "token_entropy",
        "num_tokens",
    } <= set(rows[0])
    assert rows[0]["prompt"] == "What is 1+1? <think>"
    assert summary["eval_response_length"] == pytest.approx(sum(r["num_tokens"] for r in rows) / 3)
    finite = [r["token_entropy"] for r in rows if r["token_entropy"] == r["token_entropy"]]
    assert summary["eval_token_entropy"] == pytest.approx(sum(finite) / len(finite))
    assert 0 < summary["eval_token_entropy"] < math.log(len(tokenizer))  # below the uniform distribution's
