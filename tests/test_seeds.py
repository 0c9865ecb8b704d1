"""Seeds of sampling calls: each prompt of a call draws from its own seed (interface.prompt_seed), and no two calls of
a run share a seed. The engines' draws are checked on the real engines in test_vllm_rollout.py, test_hf_rollout.py,
test_lm_sampler.py and test_streaming.py."""

from dataclasses import replace

from alignment.grpo.config import GRPOConfig
from alignment.grpo.sampler import rollout_sampling, validation_sampling
from alignment.rollout.interface import prompt_seed


def test_prompt_seeds_are_fixed_apart_and_leave_room_for_each_prompts_samples():
    assert prompt_seed(7, 3) == prompt_seed(7, 3)
    seeds = [prompt_seed(seed, position) for seed in range(50) for position in range(200)]
    assert all(0 <= s < 2**62 for s in seeds)
    # vLLM seeds a request's i-th sample with its seed + i: 16 samples per prompt, and no two (prompt, sample) meet
    draws = {s + i for s in seeds for i in range(16)}
    assert len(draws) == 16 * len(seeds)
    # consecutive call seeds (successive steps) give unrelated prompt seeds, not shifted copies of each other
    assert not {prompt_seed(1, p) for p in range(200)} & {prompt_seed(0, p) + 1 for p in range(200)}


def test_no_two_calls_of_a_run_share_a_seed():
    """Every step's rollouts (and each dynamic-sampling draw) have their own seed, never the validations' (the run's
    seed, as eval_zero_shot samples with)."""
    for run_seed in range(3):
        config = replace(GRPOConfig(), seed=run_seed)
        calls = [rollout_sampling(config, step, draw).seed for step in range(100) for draw in range(4)]
        assert len(set(calls)) == len(calls)
        assert validation_sampling(config).seed == run_seed not in calls
        assert rollout_sampling(config, 5) == rollout_sampling(replace(config), 5)  # the run's seed reproduces it
