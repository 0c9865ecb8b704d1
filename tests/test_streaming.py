"""Streaming generation with in-flight weight updates (alignment/rollout/streaming.py) on our hf sampler: groups as they
finish, per-token versions and behaviour log-probs, weights loaded between two decode steps (recompute: exactly the
new policy's samples; keep: the new weights over the old cache), or only between units (partial off)."""

import threading

import pytest
import torch
from transformers import AutoModelForCausalLM

from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.streaming import Barrier, FinishedGroup, StreamFeed, Unit

PROMPTS = ("Hello", "1 2 3 4 5", "The quick brown fox")
# |sampler - transformers forward| per token, float32, tiny model: the hf sampler's log-probs are exact up to the
# few-rows linear's summation order (measured 2.1e-5 to 3.6e-5 on this model)
TOLERANCE = 1e-4


def far_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Weights far from the model's (a tiny random model is near-uniform, so a wrong version is obvious)."""
    generator = torch.Generator().manual_seed(1)
    return {k: v + 0.5 * torch.randn(v.shape, generator=generator) for k, v in model.state_dict().items()}


def forward_log_probs(model: torch.nn.Module, prompt_ids: list[int], tokens: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + tokens])).logits[0, len(prompt_ids) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


@pytest.fixture
def models(tiny_model_dir):
    """(engine's model A, a copy of A, B = A far away)."""
    load = lambda: AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()  # noqa: E731
    a, reference_a, b = load(), load(), load()
    b.load_state_dict(far_weights(a))
    return a, reference_a, b


def run_stream(engine, feed: StreamFeed, **options) -> list:
    """Iterate the engine's stream until the feed runs dry (then stop it), collecting what it yields."""
    out = []
    for item in engine.stream(feed, **options):
        out.append(item)
        if isinstance(item, Barrier):
            feed.stop()
    return out


def offer_at_call(model: torch.nn.Module, feed: StreamFeed, weights: dict, version: int, call: int):
    """Offer weights to the feed when the model runs its `call`-th forward (1 = the prefill), as a learner's update
    arriving from another thread at that moment would; loaded before the next decode step."""
    calls = [0]

    def hook(module, args, kwargs):
        calls[0] += 1
        if calls[0] == call:
            feed.offer(weights, version)

    return model.register_forward_pre_hook(hook, with_kwargs=True)


def test_a_unit_streamed_without_new_weights_is_what_generate_samples(models, tokenizer):
    a, _, _ = models
    engine = HFRolloutEngine(a, tokenizer, progress=False)
    sampling = SamplingConfig(max_tokens=8, min_tokens=1, stop=("x", "k"), seed=5)
    expected = engine.generate(list(PROMPTS), 2, sampling)
    feed = StreamFeed(version=3)
    feed.submit([Unit((10, 11, 12), PROMPTS, 2, sampling, floor=3), Barrier(3)])
    streamed = run_stream(engine, feed)
    groups = [item for item in streamed if isinstance(item, FinishedGroup)]
    assert sorted(g.key for g in groups) == [10, 11, 12] and isinstance(streamed[-1], Barrier)
    by_key = {g.key: g.rollouts for g in groups}
    for i, key in enumerate((10, 11, 12)):
        for got, want in zip(by_key[key], expected[2 * i : 2 * i + 2]):
            assert (got.token_ids, got.logprobs, got.text) == (want.token_ids, want.logprobs, want.text)
            assert got.versions == [3] * len(got.token_ids) and want.versions is None


def test_the_parts_of_a_call_handed_out_as_units_draw_different_random_numbers(models, tokenizer):
    """A rollout batch handed out in two units (the async driver's admission may split one) shares one seed; its
    prompts' positions in the batch keep the second part from repeating the first's draws."""
    a, _, _ = models
    engine = HFRolloutEngine(a, tokenizer, progress=False)
    sampling = SamplingConfig(max_tokens=6, stop=(), seed=5)
    feed = StreamFeed()
    feed.submit(
        [Unit((0, 1), ("Hello",) * 2, 2, sampling), Unit((2, 3), ("Hello",) * 2, 2, sampling, positions=(2, 3))]
    )
    feed.submit([Barrier(0)])
    groups = [item for item in run_stream(engine, feed) if isinstance(item, FinishedGroup)]
    assert len({tuple(r.token_ids) for g in groups for r in g.rollouts}) == 8


def test_groups_come_out_as_they_finish_not_at_the_end_of_the_unit(models, tokenizer):
    a, _, _ = models
    engine = HFRolloutEngine(a, tokenizer, progress=False)
    # stop strings end rows at different steps; a group is out once its last row is
    sampling = SamplingConfig(max_tokens=16, min_tokens=1, stop=("x", "y", "k", "e"), seed=2)
    feed = StreamFeed()
    feed.submit([Unit((0, 1, 2), PROMPTS, 3, sampling), Barrier(0)])
    steps = [0]
    a.register_forward_pre_hook(lambda module, args: steps.__setitem__(0, steps[0] + 1))
    arrivals = {}
    for item in engine.stream(feed):
        if isinstance(item, FinishedGroup):
            arrivals[item.key] = (steps[0], max(len(r.token_ids) for r in item.rollouts))
        else:
            feed.stop()
    # each group arrives right after the decode step that finished its longest row (one forward per step)
    assert all(at == longest for at, longest in arrivals.values()), arrivals
    assert len({at for at, _ in arrivals.values()}) > 1, arrivals


@pytest.mark.parametrize("kv", ["recompute", "keep"])
def test_weights_loaded_between_decode_steps_continue_the_responses(models, tokenizer, kv):
    a, reference_a, b = models
    engine = HFRolloutEngine(a, tokenizer, progress=False)
    sampling = SamplingConfig(max_tokens=12, min_tokens=1, stop=("x", "y", "k"), seed=5)
    feed = StreamFeed()
    feed.submit([Unit((0, 1, 2), PROMPTS, 3, sampling), Barrier(0)])
    swap = 4  # B is offered during the 4th forward: tokens 0..3 come from A, 4.. from B
    offer_at_call(a, feed, b.state_dict(), 1, swap)
    groups = [item for item in run_stream(engine, feed, kv=kv) if isinstance(item, FinishedGroup)]
    rollouts = [(g.key, r) for g in groups for r in g.rollouts]
    lengths = [len(r.token_ids) for _, r in rollouts]
    assert min(lengths) < swap < max(lengths)  # rows ending before and after the swap
    worst = {"A": 0.0, "B": 0.0, "B vs A": 0.0}
    for key, r in rollouts:
        assert r.versions == [0 if t < swap else 1 for t in range(len(r.token_ids))]
        prompt_ids = tokenizer(PROMPTS[key])["input_ids"]
        behaviour = torch.tensor(r.logprobs)
        under_a = forward_log_probs(reference_a, prompt_ids, r.token_ids)
        under_b = forward_log_probs(b, prompt_ids, r.token_ids)
        worst["A"] = max(worst["A"], (behaviour[:swap] - under_a[:swap]).abs().max().item())
        if len(r.token_ids) > swap:
            worst["B"] = max(worst["B"], (behaviour[swap:] - under_b[swap:]).abs().max().item())
            worst["B vs A"] = max(worst["B vs A"], (behaviour[swap:] - under_a[swap:]).abs().max().item())
    assert worst["A"] < TOLERANCE and worst["B vs A"] > 1.0, worst
    if kv == "recompute":  # the cache rebuilt under B: exactly B's samples
        assert worst["B"] < TOLERANCE, worst
    else:  # B's weights attending to A's keys and values: neither policy's exact sample
        assert worst["B"] > 1.0, worst
        key, r = next((key, r) for key, r in rollouts if len(r.token_ids) > swap)
        prompt_ids = tokenizer(PROMPTS[key])["input_ids"]
        with torch.no_grad():  # A caches prompt + tokens 0..swap-2, B runs token swap-1 over that cache
            past = reference_a(torch.tensor([prompt_ids + r.token_ids[: swap - 1]]), use_cache=True).past_key_values
            logits = b(torch.tensor([[r.token_ids[swap - 1]]]), past_key_values=past).logits[0, -1]
        assert abs(torch.log_softmax(logits, -1)[r.token_ids[swap]].item() - r.logprobs[swap]) < TOLERANCE


def test_without_partial_rollouts_weights_wait_for_the_next_unit(models, tokenizer):
    a, _, b = models
    engine = HFRolloutEngine(a, tokenizer, progress=False)
    sampling = SamplingConfig(max_tokens=8, min_tokens=8, stop=(), seed=5)
    feed = StreamFeed()
    feed.submit([Unit((0,), PROMPTS[:1], 2, sampling), Unit((1,), PROMPTS[1:2], 2, sampling), Barrier(0)])
    offer_at_call(a, feed, b.state_dict(), 1, 3)
    groups = {g.key: g for g in run_stream(engine, feed, partial=False) if isinstance(g, FinishedGroup)}
    assert all(r.versions == [0] * 8 for r in groups[0].rollouts)  # finished on the weights it started with
    assert all(r.versions == [1] * 8 for r in groups[1].rollouts)  # the next unit starts on the newest
    assert feed.loads == 1


def test_a_unit_waits_for_its_floor_version_and_a_stopped_feed_ends_the_stream(models, tokenizer):
    a, _, b = models
    engine = HFRolloutEngine(a, tokenizer, progress=False)
    feed = StreamFeed()
    feed.submit([Unit((0,), PROMPTS[:1], 1, SamplingConfig(max_tokens=3, stop=(), seed=0), floor=2)])
    threading.Timer(0.3, feed.offer, (b.state_dict(), 1)).start()  # too old: the unit keeps waiting
    threading.Timer(0.6, feed.offer, (b.state_dict(), 2)).start()
    stream = engine.stream(feed)
    group = next(stream)
    assert group.rollouts[0].versions == [2, 2, 2] and feed.idle_s >= 0.5
    threading.Timer(0.2, feed.stop).start()
    assert next(stream, None) is None  # waited for work until stopped


def test_the_feed_keeps_only_the_newest_offer_newer_than_what_is_loaded():
    feed = StreamFeed(version=2)
    feed.offer({"w": torch.zeros(1)}, 2)  # not newer than what the engine holds
    assert not feed.has_weights()
    feed.offer({"w": torch.ones(1)}, 4)
    feed.offer({"w": torch.zeros(1)}, 3)  # older than the pending offer
    loaded = []
    assert feed.load(lambda state, version: loaded.append((state["w"].item(), version)))
    assert loaded == [(1.0, 4)] and feed.version == 4 and feed.loads == 1
