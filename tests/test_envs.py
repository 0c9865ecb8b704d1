"""Multi-turn environments: the arithmetic parser, the calculator environment, token-in/token-out episodes driven by
a scripted policy through a real GRPO step, the turn and token limits, --env errors, and a real hf engine."""

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM
from typer.testing import CliRunner

from alignment.data.task import Task
from alignment.envs.arithmetic import MAX_CHARS, CalculatorError, evaluate, format_value
from alignment.envs.base import EnvStep, context_messages
from alignment.envs.calculator import CalculatorEnv, arithmetic_tasks, grade
from alignment.envs.episode import ChatRendering
from alignment.envs.loading import environment_maker, environment_tasks
from alignment.envs.runner import run_episodes
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.learner import GRPOLearner
from alignment.grpo_run import grpo_step
from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.rollout.lm_engine import TransformerLMRolloutEngine
from tests.conftest import GSM8K, tiny_config

# --- the parser -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, value",
    [
        ("3*(4+5)", 27),
        ("  -2 + 3 * -4 ", -14),
        ("--3", 3),
        ("7/2", Fraction(7, 2)),
        ("2**10", 1024),
        ("2^3^2", 512),  # right-associative
        ("-2**2", 4),  # unary minus binds tighter than ** here (documented grammar)
        ("1,234 + 0.5", Fraction(2469, 2)),
        ("10 % 4", 2),
        ("((((1))))", 1),
    ],
)
def test_the_parser_evaluates_arithmetic_exactly(expression, value):
    assert evaluate(expression) == value


def test_values_print_as_integers_or_short_decimals():
    assert format_value(evaluate("408")) == "408"
    assert format_value(evaluate("1/3")) == "0.333333"
    assert format_value(evaluate("5/2")) == "2.5"


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os').system('ls')", "unexpected"),
        ("().__class__", "unexpected"),
        ("2**10**10", "exponents must be"),
        ("9**64", "result longer than"),
        ("10**30 * 10**30 * 10**30", "result longer than"),
        ("1/0", "division by zero"),
        ("0**-1", "division by zero"),
        ("2**0.5", "exponents must be"),
        ("(" * 40 + "1" + ")" * 40, "nested deeper"),
        ("-" * 40 + "1", "nested deeper"),
        ("1" * (MAX_CHARS + 1), "longer than"),
        ("1e999", "unexpected"),
        ("", "empty"),
        ("(1+2", "ends too early"),
        ("1+2)", "unexpected ')'"),
        ("3 4", "unexpected '4'"),
    ],
)
def test_the_parser_refuses_what_is_not_arithmetic(expression, message):
    with pytest.raises(CalculatorError, match=re.escape(message)):
        evaluate(expression)


def test_the_parser_agrees_with_gsm8k_s_own_calculator_annotations():
    """GSM8K's solutions carry <<expression=value>> annotations: the parser gets each value (GSM8K rounds some)."""
    checked = 0
    for line in (GSM8K / "test.jsonl").read_text().splitlines()[:200]:
        for expression, value in re.findall(r"<<([^=<>]+)=([^<>]+)>>", json.loads(line)["answer"]):
            want = Fraction(value.replace(",", ""))
            assert abs(evaluate(expression) - want) <= abs(want) / 100, expression
            checked += 1
    assert checked > 500


def test_the_calculator_env_reads_gsm8k_through_the_registry(tmp_path):
    config = env_config(
        tmp_path, env="calculator", dataset=str(GSM8K / "train.jsonl"), validation_dataset=str(GSM8K / "test.jsonl")
    )
    train, validation = environment_tasks("calculator", config)
    assert len(train.questions) > 7000 and len(validation.questions) == config.n_eval_examples
    env = environment_maker("calculator", config)()
    assert env.reset(train.truths[0]) == train.questions[0]
    assert env.step(f"<answer>{train.truths[0]['answer']}</answer>").reward == 1.0


# --- the calculator environment ----------------------------------------------------------------------------------


def test_the_calculator_answers_calls_and_errors_and_grades_the_answer():
    env = CalculatorEnv(max_turns=4)
    assert env.reset({"question": "What is 12 * 34?", "answer": "408"}) == "What is 12 * 34?"
    assert "<calculator>" in env.context[0]["content"] and env.stop == ("</calculator>", "</answer>")
    assert env.step("Let me compute <calculator>12*34</calculator>") == EnvStep("408", 0.0, False, env.counts())
    bad = env.step("<calculator>__import__('os')</calculator>")
    assert bad.observation.startswith("error: unexpected") and not bad.done
    right = env.step("So <answer>408</answer>")
    assert right.done and right.reward == 1.0 and right.info["tool_calls"] == 2 and right.info["tool_errors"] == 1
    env.reset({"question": "?", "answer": "408"})
    assert env.step("<answer>407</answer>").reward == 0.0
    env.reset({"question": "?", "answer": "408"})
    rambling = env.step("I think it is four hundred")
    assert rambling.done and rambling.reward == 0.0 and rambling.info["format_reward"] == 0.0


def test_without_the_tool_a_call_is_just_text_and_the_turn_is_final():
    env = CalculatorEnv(max_turns=1, tool=False)
    env.reset({"question": "?", "answer": "6"})
    assert env.stop == ("</answer>",) and "calculator" not in env.context[0]["content"]
    step = env.step("<calculator>2*3</calculator>")
    assert step.done and step.reward == 0.0 and step.info["tool_calls"] == 0


def test_generated_validation_problems_are_held_out():
    train, validation = arithmetic_tasks(200, 32, seed=3)
    assert len(validation.questions) == 32 and not set(validation.questions) & set(train.questions)
    assert all(str(eval_free_answer(q)) == a for q, a in zip(train.questions, train.truths))


def eval_free_answer(question: str) -> int:
    """The generator's answer recomputed from the question's numbers and wording."""
    a, b = (int(x) for x in re.findall(r"\d+", question))
    return a + b if "more" in question else a - b if "away" in question else a * b


# --- a scripted policy -------------------------------------------------------------------------------------------


class ScriptedEngine:
    """A rollout engine that answers by rule: to a question with two numbers it calls the calculator on them, to a
    calculator result it answers with that result, to anything else it answers at once (at an odd position of
    its call, one too many: rewards vary within a group). `always_call`: it never answers.
    Records every call's prompts and returned tokens."""

    def __init__(self, tokenizer, always_call: bool = False) -> None:
        self.tokenizer, self.always_call = tokenizer, always_call
        self.calls: list[list[list[int]]] = []
        self.returned: list[list[list[int]]] = []

    def generate(self, prompts: Sequence[Sequence[int]], n: int, sampling: SamplingConfig) -> list[Rollout]:
        assert n == 1 and all(isinstance(p, list) for p in prompts)  # token ids in, never text
        self.calls.append([list(p) for p in prompts])
        out = []
        for i, ids in enumerate(prompts):
            text = self.tokenizer.decode(ids)
            last_user = text.rsplit("<|im_start|>user\n", 1)[1]
            result = re.match(r"(-?\d+)<\|im_end\|>", last_user)
            numbers = re.findall(r"\d+", last_user)
            if self.always_call:
                reply = "<calculator>1+1</calculator>"
            elif len(numbers) < 2 and result is None:  # nothing to compute
                reply = "<answer>none</answer>"
            elif result is None:
                reply = f"<calculator>{numbers[0]}*{numbers[1]}</calculator>"
            else:
                reply = f"<answer>{int(result.group(1)) + i % 2}</answer>"
            token_ids = self.tokenizer(reply, add_special_tokens=False)["input_ids"][: sampling.max_tokens]
            logprobs = [-0.25 - 0.01 * k for k in range(len(token_ids))]
            out.append(Rollout(i, self.tokenizer.decode(token_ids), token_ids, logprobs, "stop"))
        self.returned.append([r.token_ids for r in out])
        return out

    def load_policy_weights(self, state_dict) -> None:
        pass


PROBLEMS = [
    {"question": f"Sam has {a} boxes with {b} pens in each. How many pens?", "answer": str(a * b)}
    for a, b in [(12, 34), (21, 43), (15, 17)]
]
TURN = SamplingConfig(max_tokens=32, stop=("</calculator>", "</answer>"), seed=5)


def test_episodes_are_token_in_token_out_and_the_mask_covers_sampled_tokens_only(tokenizer):
    engine = ScriptedEngine(tokenizer)
    episodes = run_episodes(engine, tokenizer, lambda: CalculatorEnv(4), PROBLEMS, 2, TURN, 512)
    assert [e.prompt_index for e in episodes] == [0, 0, 1, 1, 2, 2] and all(e.turns == 2 for e in episodes)
    assert [e.reward for e in episodes] == [1.0, 0.0] * 3 and [e.turn_rewards for e in episodes][1] == [0.0, 0.0]
    for j, e in enumerate(episodes):
        whole = e.prompt_ids + e.token_ids
        # the second call's prompt is the episode so far, verbatim: the first turn's sampled ids, then observation
        second_prompt = engine.calls[1][j]
        assert whole[: len(second_prompt)] == second_prompt and second_prompt[: len(e.prompt_ids)] == e.prompt_ids
        sampled = [t for t, m in zip(e.token_ids, e.sampled_mask) if m]
        assert sampled == engine.returned[0][j] + engine.returned[1][j]  # mask 1 exactly on what the engine drew
        observation = [t for t, m in zip(e.token_ids, e.sampled_mask) if not m]
        assert tokenizer.decode(observation).startswith("<|im_end|>\n<|im_start|>user\n")
        assert all(lp == 0.0 for lp, m in zip(e.logprobs, e.sampled_mask) if not m)
        assert all(lp < 0 for lp, m in zip(e.logprobs, e.sampled_mask) if m)
    # finished episodes leave the batch: both turns had all six (every episode calls, then answers)
    assert [len(c) for c in engine.calls] == [6, 6]


def test_finished_episodes_leave_the_batch(tokenizer):
    engine = ScriptedEngine(tokenizer)
    rows = PROBLEMS + [{"question": "Say nothing.", "answer": "none"}]  # answered at once
    episodes = run_episodes(engine, tokenizer, lambda: CalculatorEnv(4), rows, 2, TURN, 512)
    assert [len(c) for c in engine.calls] == [8, 6] and [e.turns for e in episodes][-2:] == [1, 1]


def test_the_turn_limit_and_the_token_cap_end_episodes_and_say_so(tokenizer):
    engine = ScriptedEngine(tokenizer, always_call=True)
    episodes = run_episodes(engine, tokenizer, lambda: CalculatorEnv(3), PROBLEMS[:1], 2, TURN, 4096)
    assert all(e.turns == 3 and e.stopped_by == "max_turns" and e.reward == 0.0 for e in episodes)
    assert [len(c) for c in engine.calls] == [2, 2, 2]
    cap = len(episodes[0].prompt_ids) + 40  # room for one call and its observation, not a second call
    capped = run_episodes(
        ScriptedEngine(tokenizer, always_call=True), tokenizer, lambda: CalculatorEnv(9), PROBLEMS[:1], 2, TURN, cap
    )
    for e in capped:
        assert e.stopped_by == "max_tokens" and len(e.prompt_ids) + len(e.token_ids) <= cap
        assert e.finish_reason == "length"


def test_an_episode_near_the_cap_does_not_shorten_its_siblings_turns(tokenizer):
    long = {"question": "Sam has 12 boxes with 34 pens in each. " + "The pens are blue. " * 40 + "How many?"}
    rows = [PROBLEMS[0], long | {"answer": "408"}]
    engine = ScriptedEngine(tokenizer)
    prompt = len(
        ChatRendering(tokenizer, context_messages(CalculatorEnv(4))).prompt_ids(CalculatorEnv(4).reset(rows[1]))
    )
    short, near = run_episodes(engine, tokenizer, lambda: CalculatorEnv(4), rows, 1, TURN, prompt + 5)
    # the short episode's turns are whole (its call, then its answer), as with no sibling
    assert short.stopped_by == "done" and short.reward == 1.0 and short.turns == 2
    # the one near the cap got the first 5 tokens the engine drew for it, its environment the cut turn (no whole call:
    # a final answer, wrong), and it ended there
    assert near.token_ids == engine.returned[0][1][:5] and near.turns == 1 and near.reward == 0.0
    assert len(near.prompt_ids) + len(near.token_ids) == prompt + 5 and len(near.logprobs) == 5
    assert near.text == tokenizer.decode(near.token_ids) and len(engine.returned[0][1]) > 5


def small_policy(tokenizer) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config("llama", len(tokenizer), tokenizer.pad_token_id)).eval()


def env_config(tmp_path, **overrides) -> GRPOConfig:
    base = GRPOConfig(
        model="unused",
        env="calculator_arithmetic",
        n_train_prompts=8,
        n_eval_examples=4,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=32,
        env_max_tokens=512,
        learning_rate=1e-3,
        grader_workers=1,
        output_dir=tmp_path,
    )
    return replace(base, **overrides)


@pytest.mark.parametrize("turn_rewards", [False, True])
def test_a_scripted_policy_drives_episodes_through_a_grpo_step(tokenizer, tmp_path, turn_rewards):
    config = env_config(tmp_path, turn_rewards=turn_rewards)
    validate(config)
    train = Task([p["question"] for p in PROBLEMS], [p["answer"] for p in PROBLEMS], "{question}", grade)
    policy, engine = small_policy(tokenizer), ScriptedEngine(tokenizer)
    sampler, learner = EpisodeSampler(config, engine, train, tokenizer), GRPOLearner(config, policy, tokenizer, train)
    drawn = sampler.draw(0)
    batch = learner.make_batch(drawn.questions, drawn.rollouts, drawn.scores)
    for row, e in enumerate(drawn.rollouts):  # the learner's ids are the sampler's, and its mask their sampled mask
        n = len(e.prompt_ids) + len(e.token_ids)
        assert batch.input_ids[row, : n - 1].tolist() + [batch.labels[row, n - 2].item()] == e.prompt_ids + e.token_ids
        assert batch.response_mask[row, len(e.prompt_ids) - 1 : n - 1].tolist() == [bool(m) for m in e.sampled_mask]
        assert (
            not batch.response_mask[row, : len(e.prompt_ids) - 1].any() and not batch.response_mask[row, n - 1 :].any()
        )
    advantages = batch.advantages
    if turn_rewards:  # (batch, seq): the first turn (reward 0, return = the episode's) and the answer turn alike here
        assert advantages.shape == batch.input_ids.shape
    else:
        assert advantages.shape == (4, 1) and sorted(advantages.flatten().sign().tolist()) == [-1, -1, 1, 1]
    before = [p.detach().clone() for p in policy.parameters()]
    rows = grpo_step(sampler, learner, engine)
    assert learner.step == 1 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    assert rows[0]["train_tool_calls_rate"] == 1.0 and rows[0]["train_reward"] == 0.5


def test_turn_rewards_give_each_turn_its_return(tokenizer, tmp_path):
    config = env_config(tmp_path, turn_rewards=True, use_std_normalization=False)
    train, _ = arithmetic_tasks(8, 4, config.seed)
    learner = GRPOLearner(config, small_policy(tokenizer), tokenizer, train)
    episodes = run_episodes(ScriptedEngine(tokenizer), tokenizer, lambda: CalculatorEnv(4), PROBLEMS[:2], 2, TURN, 512)
    episodes[0].turn_rewards = [0.5, 1.0]  # a shaped first turn: its tokens get 1.5 - mean, the answer's 1.0 - mean
    episodes[0].reward = 1.0
    scores = [{"reward": e.turn_rewards[0] + e.turn_rewards[1]} for e in episodes]
    batch = learner.make_batch([0, 1], episodes, scores)
    e = episodes[0]
    mean = (1.5 + 0.0) / 2
    start = len(e.prompt_ids) - 1  # label positions of the episode's tokens
    first, second = e.turn_starts[1], len(e.token_ids)
    assert torch.allclose(batch.advantages[0, start : start + first], torch.tensor(1.5 - mean))
    assert torch.allclose(batch.advantages[0, start + first : start + second], torch.tensor(1.0 - mean))
    assert torch.allclose(batch.advantages[1, start : start + 1], torch.tensor(0.0 - mean))


# --- settings ----------------------------------------------------------------------------------------------------


def test_a_bad_env_name_is_refused_naming_the_flag_before_any_model_loads(tmp_path):
    import scripts.train_grpo as script

    result = CliRunner().invoke(script.app, ["--env", "nope", "--model", "/nonexistent", "--output-dir", str(tmp_path)])
    assert result.exit_code != 0 and "--env 'nope'" in result.output and "calculator" in result.output
    with pytest.raises(ValueError, match="--turn-rewards needs --env"):
        validate(replace(env_config(tmp_path), env=None, turn_rewards=True))
    with pytest.raises(ValueError, match="--env-max-turns must be >= 1"):
        validate(env_config(tmp_path, env_max_turns=0))
    with pytest.raises(ValueError, match="--dynamic-sampling .* --env"):
        validate(env_config(tmp_path, dynamic_sampling=True))


# --- a real engine -----------------------------------------------------------------------------------------------


class TwoTurns:
    """Answers any first turn with a fixed observation, ends after the second."""

    name, max_turns, stop = "two_turns", 2, ()

    def reset(self, task):
        return task["question"]

    def step(self, action: str) -> EnvStep:
        self.turn = getattr(self, "turn", 0) + 1
        return EnvStep("Now say more.", float(len(action) % 2), self.turn == 2)


@pytest.mark.parametrize("backend", ["hf", "transformer_lm"])
def test_multi_turn_episodes_on_in_process_engines_score_as_the_policy_does(tokenizer, tiny_model_dir, backend):
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    if backend == "hf":
        engine = HFRolloutEngine(policy, tokenizer, progress=False)
    else:  # our TransformerLM with the same weights
        engine = TransformerLMRolloutEngine(load_transformer_lm(tiny_model_dir)[0], tokenizer, progress=False)
    rows = [{"question": "Hi"}, {"question": "What is 2 + 2?"}]
    sampling = SamplingConfig(max_tokens=5, min_tokens=5, stop=(), seed=3)
    episodes = run_episodes(engine, tokenizer, TwoTurns, rows, 2, sampling, 256)
    assert episodes[0].token_ids != episodes[1].token_ids  # a group's episodes are independent draws
    for e in episodes:
        assert e.turns == 2 and sum(e.sampled_mask) == 10 and len(e.token_ids) > 10
        ids = torch.tensor([e.prompt_ids + e.token_ids])
        with torch.no_grad():
            log_probs = torch.log_softmax(policy(ids).logits[0, :-1].float(), -1)
        scored = log_probs.gather(-1, ids[0, 1:, None]).squeeze(-1)[len(e.prompt_ids) - 1 :]
        sampled = torch.tensor(e.sampled_mask, dtype=torch.bool)
        # the engine's behaviour log-probs are the policy's on exactly the tokens it sampled, in the episode's context
        assert torch.allclose(scored[sampled], torch.tensor(e.logprobs)[sampled], atol=1e-4)
