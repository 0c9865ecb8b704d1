"""Our TransformerLM sampler and its rollout backend: exact log-probs, cache = no cache, stops, order, seeds."""

import pytest
import torch

from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.rollout.backends import make_rollout_engine, resolve_backend
from alignment.rollout.decoding import sampling_log_probs
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_engine import TransformerLMRolloutEngine
from alignment.rollout.lm_sampler import sample

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy", "1 2 3 4"]


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return load_transformer_lm(tiny_model_dir)


@pytest.fixture
def engine(lm):
    return TransformerLMRolloutEngine(*lm, progress=False)


def teacher_forced(model, tokenizer, prompt: str, tokens: list[int], sampling: SamplingConfig) -> torch.Tensor:
    """Log-probs of each sampled token under the processed distribution, from one pass over prompt + response."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + tokens]))[0, len(prompt_ids) - 1 : -1]
    log_probs = sampling_log_probs(logits, sampling.temperature, sampling.top_p)
    return log_probs.gather(-1, torch.tensor(tokens).unsqueeze(-1)).squeeze(-1).double()


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.8, 0.9)])
def test_reported_log_probs_equal_a_teacher_forced_pass(engine, lm, temperature, top_p):
    model, tokenizer = lm
    sampling = SamplingConfig(temperature=temperature, top_p=top_p, max_tokens=20, stop=(), seed=3)
    rollouts = engine.generate(PROMPTS, 3, sampling)
    assert [r.prompt_index for r in rollouts] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    plain = SamplingConfig(stop=())
    for r in rollouts:
        assert len(r.logprobs) == len(r.token_ids) == 20 and r.finish_reason == "length"
        got = torch.tensor(r.logprobs, dtype=torch.float64)
        expected = teacher_forced(model, tokenizer, PROMPTS[r.prompt_index], r.token_ids, sampling)
        assert (got - expected).abs().max() <= 1e-4
        if temperature != 1.0:  # the processed distribution, not the policy's own
            assert (
                got - teacher_forced(model, tokenizer, PROMPTS[r.prompt_index], r.token_ids, plain)
            ).abs().max() > 1e-2


def test_cache_and_no_cache_sample_the_same_tokens(lm):
    model, tokenizer = lm
    prompt_ids = tokenizer(PROMPTS)["input_ids"]
    # a quarter of the vocabulary ends a row, so rows finish at different steps and leave the batch
    eos_ids = list(range(0, len(tokenizer), 4))
    sampling = SamplingConfig(temperature=0.9, top_p=0.95, max_tokens=16, min_tokens=2, stop=())
    runs = [
        sample(model, tokenizer, prompt_ids, 3, sampling, eos_ids, torch.Generator().manual_seed(7), use_cache=cached)
        for cached in (True, False)
    ]
    cached, recomputed = runs
    assert [r.token_ids for r in cached] == [r.token_ids for r in recomputed]
    # the cached decode multiplies a few rows as W @ x^T, the full re-run many as x @ W^T (few_rows_linear): the
    # same sums in another order, so log-probs of about -10 agree to float32 rounding, not bit for bit
    for a, b in zip(cached, recomputed):
        assert (
            a.finish_reason == b.finish_reason
            and (torch.tensor(a.logprobs) - torch.tensor(b.logprobs)).abs().max() <= 1e-4
        )
    lengths = {len(r.token_ids) for r in cached}
    assert len(lengths) > 2 and min(lengths) >= 2  # rows really were pruned at different steps, none before min_tokens


def test_same_tokens_and_log_probs_as_the_hf_backend_on_the_same_weights(engine, tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    hf = HFRolloutEngine(reference, tokenizer, progress=False)
    for sampling in (
        SamplingConfig(temperature=0.0, max_tokens=12, stop=()),
        SamplingConfig(max_tokens=12, stop=(), seed=5),
    ):
        ours, theirs = engine.generate(PROMPTS, 2, sampling), hf.generate(PROMPTS, 2, sampling)
        assert [r.token_ids for r in ours] == [r.token_ids for r in theirs]
        assert max(abs(a - b) for r, s in zip(ours, theirs) for a, b in zip(r.logprobs, s.logprobs)) <= 1e-4


def test_same_seed_repeats_and_other_seed_differs(engine):
    config = SamplingConfig(max_tokens=16, stop=(), seed=11)
    first, again = engine.generate(PROMPTS, 2, config), engine.generate(PROMPTS, 2, config)
    other = engine.generate(PROMPTS, 2, SamplingConfig(max_tokens=16, stop=(), seed=12))
    assert [r.token_ids for r in first] == [r.token_ids for r in again]
    assert [r.logprobs for r in first] == [r.logprobs for r in again]
    assert [r.token_ids for r in first] != [r.token_ids for r in other]


def test_identical_prompts_are_sampled_independently_and_the_seed_reproduces_the_call(lm):
    """In one batch, and one group per batch (each batch seeded from its first prompt's seed)."""
    sampling = SamplingConfig(max_tokens=4, stop=(), seed=11)
    one_batch = TransformerLMRolloutEngine(*lm, progress=False).generate(["Hello"] * 3, 2, sampling)
    per_group = TransformerLMRolloutEngine(*lm, memory_budget_bytes=1, progress=False)
    first, again = per_group.generate(["Hello"] * 3, 2, sampling), per_group.generate(["Hello"] * 3, 2, sampling)
    assert len({tuple(r.token_ids) for r in one_batch}) == len({tuple(r.token_ids) for r in first}) == 6
    assert [r.token_ids for r in first] == [r.token_ids for r in again]


def test_samples_are_prompt_major_and_batching_does_not_change_them(lm):
    greedy = SamplingConfig(temperature=0.0, max_tokens=8, stop=())
    one_batch = TransformerLMRolloutEngine(*lm, progress=False).generate(PROMPTS, 2, greedy)
    one_group_per_batch = TransformerLMRolloutEngine(*lm, memory_budget_bytes=1, progress=False).generate(
        PROMPTS, 2, greedy
    )
    alone = [TransformerLMRolloutEngine(*lm, progress=False).generate([p], 1, greedy)[0] for p in PROMPTS]
    for rollouts in (one_batch, one_group_per_batch):
        assert [r.prompt_index for r in rollouts] == [0, 0, 1, 1, 2, 2]
        assert [r.token_ids for r in rollouts] == [a.token_ids for a in alone for _ in range(2)]
    assert len({tuple(a.token_ids) for a in alone}) == 3  # the prompts really lead to different text


def test_stop_string_truncates_text_and_tokens(engine, tokenizer):
    def run(**kwargs):
        return engine.generate(PROMPTS[:1], 1, SamplingConfig(max_tokens=30, seed=5, **kwargs))[0]

    full = run(stop=())
    stop = tokenizer.decode(full.token_ids[8:10]).strip()
    assert full.finish_reason == "length" and stop
    before = full.text[: full.text.find(stop)]
    with_stop, without = run(stop=(stop,)), run(stop=(stop,), include_stop_str_in_output=False)
    assert with_stop.finish_reason == without.finish_reason == "stop"
    assert with_stop.text == before + stop and without.text == before
    n = len(with_stop.token_ids)
    assert n <= 10 and with_stop.token_ids == full.token_ids[:n] == without.token_ids
    assert stop in tokenizer.decode(with_stop.token_ids) and stop not in tokenizer.decode(with_stop.token_ids[:-1])


def test_eos_ends_a_row_and_is_left_out_of_the_text(lm):
    greedy = SamplingConfig(temperature=0.0, max_tokens=12, stop=())
    full = TransformerLMRolloutEngine(*lm, progress=False).generate(PROMPTS[:1], 1, greedy)[0]
    eos = full.token_ids[3]
    stopped = TransformerLMRolloutEngine(*lm, progress=False, eos_ids=[eos]).generate(PROMPTS[:1], 1, greedy)[0]
    n = full.token_ids.index(eos) + 1
    assert stopped.finish_reason == "stop" and stopped.token_ids == full.token_ids[:n]
    assert stopped.text == lm[1].decode(full.token_ids[: n - 1], skip_special_tokens=True)


def test_min_tokens_holds_back_eos_and_stop_strings(lm):
    model, tokenizer = lm
    half = list(range(0, len(tokenizer), 2))  # half the vocabulary is EOS: rows end within a few tokens
    sampling = SamplingConfig(max_tokens=30, min_tokens=6, stop=(), seed=2)
    rollouts = TransformerLMRolloutEngine(model, tokenizer, progress=False, eos_ids=half).generate(PROMPTS, 4, sampling)
    assert all(len(r.token_ids) >= 6 and not set(r.token_ids[:5]) & set(half) for r in rollouts)
    assert sum(r.finish_reason == "stop" and len(r.token_ids) < 12 for r in rollouts) >= 8
    # a stop string seen in the first tokens does not end the row before min_tokens either
    engine = TransformerLMRolloutEngine(model, tokenizer, progress=False)
    full = engine.generate(PROMPTS[:1], 1, SamplingConfig(max_tokens=16, min_tokens=10, stop=(), seed=4))[0]
    stop = tokenizer.decode(full.token_ids[1:3]).strip()
    held = engine.generate(PROMPTS[:1], 1, SamplingConfig(max_tokens=16, min_tokens=10, stop=(stop,), seed=4))[0]
    assert stop and len(held.token_ids) >= 10 and held.token_ids == full.token_ids[: len(held.token_ids)]


def test_policy_weights_are_shared_or_copied(lm, tiny_model_dir):
    model, tokenizer = lm
    engine = TransformerLMRolloutEngine(model, tokenizer, progress=False)
    pointers = [p.data_ptr() for p in model.parameters()]
    engine.load_policy_weights(model.state_dict())  # the policy itself: nothing to do
    assert [p.data_ptr() for p in model.parameters()] == pointers
    copy, _ = load_transformer_lm(tiny_model_dir)
    other = {k: v + 0.01 for k, v in model.state_dict().items()}
    TransformerLMRolloutEngine(copy, tokenizer, progress=False).load_policy_weights(other)
    assert all(torch.equal(copy.state_dict()[k], other[k]) for k in other)


def test_transformer_lm_is_a_backend(tiny_model_dir):
    assert resolve_backend("transformer_lm") == "transformer_lm" and resolve_backend("auto") != "transformer_lm"
    engine = make_rollout_engine(str(tiny_model_dir), "transformer_lm", device="cpu")
    assert isinstance(engine, TransformerLMRolloutEngine)
    rollouts = engine.generate(PROMPTS[:2], 2, SamplingConfig(max_tokens=4, stop=(), seed=0))
    assert [r.prompt_index for r in rollouts] == [0, 0, 1, 1] and all(len(r.token_ids) == 4 for r in rollouts)
    with pytest.raises(ValueError, match="must be >= 1"):
        engine.generate(PROMPTS, 0, SamplingConfig())
