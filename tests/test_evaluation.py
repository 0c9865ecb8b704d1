"""evaluate_vllm (CS336 A5 math_baseline's function) on the transformers backend, and the sampling that GRPO's
validation shares with the zero-shot evaluation."""

import pytest

from alignment import evaluate_vllm
from alignment.grader import r1_zero_reward_fn
from alignment.grpo.config import GRPOConfig
from alignment.grpo.sampler import rollout_sampling, validation_sampling
from alignment.models.loading import load_model_and_tokenizer
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.run.generation import GenerationConfig
from tests.test_pku_presets import PKU


def test_evaluate_vllm_over_an_hf_engine_grades_and_counts(tiny_model_dir, tmp_path):
    engine = HFRolloutEngine(*load_model_and_tokenizer(str(tiny_model_dir)))
    prompts = ["What is 2 + 3?", "What is 4 * 2?"]
    records, summary = evaluate_vllm(
        engine,
        lambda response, truth: r1_zero_reward_fn(f"x </think> <answer> {truth} </answer>", truth),
        prompts,
        SamplingConfig(max_tokens=4, stop=(), seed=1),
        ["5", "8"],
        tmp_path / "out.jsonl",
    )  # a lambda grades in this process; this one scores every response right
    assert [r.prompt for r in records] == prompts and all(r.num_tokens == 4 for r in records)
    assert summary["counts"] == {"format1_answer1": 2, "format1_answer0": 0, "format0_answer0": 0}
    assert summary["accuracy"] == 1.0 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 2
    with pytest.raises(ValueError, match="must be a module-level function"):
        evaluate_vllm(engine, lambda r, t: {}, prompts, SamplingConfig(max_tokens=2), ["5", "8"], grader_workers=2)


@pytest.mark.parametrize("preset", [None, PKU / "grpo.toml"])
def test_grpo_validation_samples_as_the_zero_shot_evaluation_does(preset):
    from alignment.config.cli import read_config_file

    config = GRPOConfig(**(read_config_file(preset, GRPOConfig) if preset else {}))
    assert rollout_sampling(config, 0).min_tokens == 4  # the handouts' rollouts: no empty responses
    validation, zero_shot = validation_sampling(config), GenerationConfig()
    assert validation.min_tokens == zero_shot.min_tokens == 0  # step 0 measures what the baseline measures
    assert (validation.temperature, validation.top_p, validation.max_tokens) == (
        zero_shot.temperature,
        zero_shot.top_p,
        zero_shot.max_tokens,
    )
