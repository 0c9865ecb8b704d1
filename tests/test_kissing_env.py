"""The kissing refinement environment: its observations on hand-written programs are the handout's prompts around
the course evaluator's exact verdicts; rewards, the end of an episode and the registry constructor."""

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from alignment.envs.base import Environment
from alignment.envs.loading import environment_tasks
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.learner import GRPOLearner
from alignment.grpo_run import grpo_step
from alignment.kissing.environment import (
    FAILED_PROMPT,
    HANDOUT_PROMPT,
    NO_PROGRAM_PROMPT,
    VALID_PROMPT,
    KissingSettings,
    extract_program,
    kissing_environment,
)
from alignment.kissing.sandbox import SandboxLimits
from alignment.rollout.interface import Rollout
from tests.conftest import tiny_config

FAST = SandboxLimits(timeout_s=10.0, memory_bytes=1024**3)
TOO_CLOSE = "```python\npoints = [[6, 2] + [0] * 9, [0, 2] + [0] * 9]\n```"  # squared distance 36, norms 40 and 4
AXES = (
    "Here it is:\n```python\nimport numpy as np\n\ndef run_code():\n    e = 2 * np.eye(11, dtype=np.int64)\n"
    "    return np.vstack([e, -e]), 11\n```\n"
)


def test_observations_are_the_handouts_prompts_around_the_exact_verdict():
    env = kissing_environment(max_turns=3, limits=FAST)
    protocol: Environment = env  # the interface the episode runner takes
    assert protocol.name == "kissing" and protocol.max_turns == 3
    assert env.reset({}) == HANDOUT_PROMPT
    assert "defines a global variable `points` as a list of such vectors" in HANDOUT_PROMPT

    failed = env.step(TOO_CLOSE)
    assert failed.observation == (
        "Your previous attempt failed with this error: `Minimum squared distance 36 < maximum squared norm 40`. "
        "This means the condition was violated. Please analyze your set of vectors and propose a new, corrected set "
        "that fixes this error."
    )
    assert (failed.reward, failed.done, failed.info["points"]) == (0.0, False, 0)
    assert failed.info["verdict"]["closest_pair"] == (0, 1)

    valid = env.step(AXES)
    assert valid.observation == VALID_PROMPT.format(score=22)
    assert valid.observation.startswith("Your previous set of vectors was valid and achieved a score of 22.")
    assert "*add more vectors*" in valid.observation
    assert valid.reward == pytest.approx(22 / 593) and not valid.done  # the course's combined_score

    last = env.step("I could not find more vectors.")  # no program: said so, and the episode ends here
    assert last.done and last.observation == "" and last.info["feedback"] == NO_PROGRAM_PROMPT
    assert last.info["program"] is None and last.reward == pytest.approx(22 / 593)  # final="best": the best so far
    with pytest.raises(RuntimeError, match="all 3 turns were taken"):
        env.step(AXES)


def test_last_program_rewards_in_points_and_a_starting_program_with_its_verdict():
    env = kissing_environment(max_turns=2, reward="points", final="last", limits=FAST)
    first = env.reset({"program": "points = [[2] + [0] * 10]\n"})
    assert first.startswith(HANDOUT_PROMPT) and "Evaluator: Need at least 2 points." in first
    assert "```python\npoints = [[2] + [0] * 10]\n```" in first
    assert env.step(AXES).reward == 22.0
    broken = env.step(TOO_CLOSE)
    assert broken.reward == 0.0 and broken.done and broken.info["best_points"] == 22
    assert broken.info["feedback"] == FAILED_PROMPT.format(
        error="Minimum squared distance 36 < maximum squared norm 40"
    )


def test_programs_are_found_in_replies_and_bad_settings_are_refused():
    assert extract_program("<think>```python\npoints = []\n```</think>no code") is None
    assert extract_program(
        "```python\nx = 1\n```\n```python\ndef get_centers():\n    return []\n```\n```\nok\n```"
    ) == ("def get_centers():\n    return []\n")
    assert extract_program("points = [[1] * 11]") == "points = [[1] * 11]\n"
    for bad, message in (({"max_turns": 0}, "max_turns must be >= 1"), ({"reward": "score"}, "reward must be")):
        with pytest.raises(ValueError, match=message):
            KissingSettings(**bad)


HANDOUT = Path(__file__).resolve().parents[2] / "shared" / "handouts" / "pku-nlpdl-hw3.md"


def test_the_prompts_are_the_handouts_word_for_word():
    if not HANDOUT.is_file():
        pytest.skip(f"the PKU handout is not at {HANDOUT} (a fresh clone has no ../shared)")
    text = HANDOUT.read_text(encoding="utf-8")
    assert f'**Prompt:** "{HANDOUT_PROMPT}"' in text
    assert FAILED_PROMPT.format(error="Minimum squared distance 36 < maximum squared norm 40") in text
    assert VALID_PROMPT.format(score="[Your Score]") in text


class RefiningEngine:
    """A rollout engine that answers by rule: its first program is too close; then the prompt at an even position of
    its call writes the ±2e_i set, the odd one repeats its mistake (rewards differ within a group). Token ids in."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.seen = tokenizer, []

    def generate(self, prompts, n, sampling):
        assert n == 1 and all(isinstance(p, list) for p in prompts)
        out = []
        for i, ids in enumerate(prompts):
            text = self.tokenizer.decode(ids)
            self.seen.append(text)
            reply = TOO_CLOSE if "failed with this error" not in text or i % 2 else AXES
            token_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"]
            out.append(Rollout(i, self.tokenizer.decode(token_ids), token_ids, [-0.5] * len(token_ids), "stop"))
        return out

    def load_policy_weights(self, state_dict) -> None:
        pass


def test_grpo_trains_on_the_refinement_loop_through_the_registry(tokenizer, tmp_path):
    preset = GRPOConfig(**tomllib.loads((Path(__file__).parents[1] / "configs/pku/kissing_grpo.toml").read_text()))
    validate(preset)
    config = replace(
        preset,
        model="unused",
        n_train_prompts=2,
        rollout_batch_size=2,
        group_size=2,
        train_batch_size=2,
        gradient_accumulation_steps=1,
        env_max_turns=2,
        env_max_tokens=4096,
        learning_rate=1e-3,
        grader_workers=1,
        output_dir=tmp_path,
    )
    train, _ = environment_tasks("kissing", config)
    torch.manual_seed(0)
    policy = LlamaForCausalLM(tiny_config("llama", len(tokenizer), tokenizer.pad_token_id))
    engine = RefiningEngine(tokenizer)
    sampler, learner = EpisodeSampler(config, engine, train, tokenizer), GRPOLearner(config, policy, tokenizer, train)
    before = [p.detach().clone() for p in policy.parameters()]
    rows = grpo_step(sampler, learner, engine)
    # the second turn read the evaluator's exact verdict of the first program, inside the handout's prompt
    assert sum(
        FAILED_PROMPT.format(error="Minimum squared distance 36 < maximum squared norm 40") in t for t in engine.seen
    )
    assert rows[0]["train_reward"] == pytest.approx(22 / 593 / 2)  # one episode of the two found the 22-point set
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
