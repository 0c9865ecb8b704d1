"""The static decode path (alignment/rollout/static_decoding.py) against the eager loop, on the CPU where it runs
uncaptured: the same tokens, log-probs to float32 rounding, finish reasons and texts, through rows ending at different
steps, buckets shrinking, stop strings cut at a sync, streamed units and multi-turn token-id prompts; the rule that
picks the path (decode_choice.py); and each row's random stream (row_streams.py). The captured path on a GPU:
tests/test_gpu_rollout.py."""

import re
import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from alignment.envs.runner import run_episodes
from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.rollout.decode_choice import check_decode, decode_path
from alignment.rollout.forward_tape import ForwardTape
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.hf_static import static_support
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_engine import TransformerLMRolloutEngine
from alignment.rollout.row_streams import row_uniforms
from alignment.rollout.static_decoding import StaticDecoder, bucket_for, span_for
from alignment.rollout.streaming import Barrier, FinishedGroup, StreamFeed, Unit
from tests.conftest import tiny_config
from tests.test_envs import TwoTurns

PROMPTS = ["Hello", "The quick brown fox jumps over the lazy", "1 2 3 4", "Once upon a time"]
# about 6% of a tiny random model's next-token mass (as tests/test_forward_tape.py): rows end at many different steps
EOS = list(range(1000, 4000))
# float32 rounding: a fixed-length masked attention and other batch sizes sum in another order (measured <= 1.5e-6)
TOLERANCE = 1e-5
SETTINGS = {
    "greedy": SamplingConfig(temperature=0.0, max_tokens=24, stop=()),
    "sampled": SamplingConfig(max_tokens=24, min_tokens=3, stop=(), seed=3),
    "tempered": SamplingConfig(temperature=1.3, max_tokens=24, stop=(), seed=5),
    "stop strings": SamplingConfig(max_tokens=24, min_tokens=2, stop=("k", "q"), seed=7),
}


def hf_engine(model, tokenizer, decode: str, **options) -> HFRolloutEngine:
    engine = HFRolloutEngine(model, tokenizer, progress=False, decode=decode, **options)
    engine.eos_ids = torch.tensor(EOS)
    return engine


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return load_transformer_lm(tiny_model_dir)


@pytest.fixture(scope="module")
def llama(tiny_model_dir):
    """The tiny Llama alone, for what does not depend on the architecture (tiny_model is a Llama and a Qwen2)."""
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def lm_engine(lm, decode: str, **options) -> TransformerLMRolloutEngine:
    return TransformerLMRolloutEngine(*lm, progress=False, eos_ids=EOS, decode=decode, **options)


def assert_same_rollouts(static, eager) -> None:
    assert [r.token_ids for r in static] == [r.token_ids for r in eager]
    assert [(r.finish_reason, r.text, r.prompt_index) for r in static] == [
        (r.finish_reason, r.text, r.prompt_index) for r in eager
    ]
    worst = max(abs(a - b) for s, e in zip(static, eager) for a, b in zip(s.logprobs, e.logprobs, strict=True))
    assert worst <= TOLERANCE, worst


def step_rows(decoder: StaticDecoder, span_multiple: int = 8) -> tuple[list[int], set[int]]:
    """Record the slots each decode step runs (the bucket) and the spans it attends over from now on; spans of
    `span_multiple` columns (8: they change within the tests' 24 tokens), each checked against the column the step
    writes."""
    rows: list[int] = []
    spans: set[int] = set()
    step = decoder.step_logits
    decoder.span_multiple = span_multiple

    def recording(state, bucket, span):
        rows.append(bucket)
        column = int(state.column)  # written by this step, the last one its token attends to
        assert span == min(state.length, -(-(column + 1) // span_multiple) * span_multiple), (span, column)
        spans.add(span)
        return step(state, bucket, span)

    decoder.step_logits = recording
    return rows, spans


# by default the sampled and stop-string settings on the Llama and the tempered one on the Qwen2; the rest under -m slow
DEFAULT_SETTINGS = ("sampled", "stop strings")


@pytest.mark.parametrize(
    "tiny_model,setting",
    [
        pytest.param(
            architecture,
            setting,
            id=f"{architecture}-{setting}",
            marks=()
            if (architecture, setting) == ("qwen2", "tempered")
            or (architecture == "llama" and setting in DEFAULT_SETTINGS)
            else pytest.mark.slow,
        )
        for architecture in ("llama", "qwen2")
        for setting in SETTINGS
    ],
    indirect=["tiny_model"],
)
def test_hf_static_path_samples_what_the_eager_loop_samples(tiny_model, tokenizer, setting):
    sampling = SETTINGS[setting]
    eager = hf_engine(tiny_model, tokenizer, "eager").generate(PROMPTS, 3, sampling)
    engine = hf_engine(tiny_model, tokenizer, "static", sync_every=3)
    buckets, spans = step_rows(engine.static_decoder())
    static = engine.generate(PROMPTS, 3, sampling)
    assert_same_rollouts(static, eager)
    # 12 rows run in a bucket of 12 (the capacity), then 8, 6, 4, 3, 2, 1 as they end
    assert buckets[0] == 12 and buckets == sorted(buckets, reverse=True) and set(buckets) <= {12, 8, 6, 4, 3, 2, 1}
    assert len(spans) > 1  # steps attended over more columns as rows grew
    if sampling.temperature > 0:  # (greedy rows of a random model repeat one token: none ends)
        assert len({len(r.token_ids) for r in eager}) > 3  # rows really ended at different steps
        assert len(set(buckets)) > 1, buckets  # the rows still running moved to fewer slots


@pytest.mark.parametrize(
    "setting", [pytest.param(s, marks=() if s in DEFAULT_SETTINGS else pytest.mark.slow) for s in SETTINGS]
)
def test_transformer_lm_static_path_samples_what_the_eager_loop_samples(lm, setting):
    sampling = SETTINGS[setting]
    eager = lm_engine(lm, "eager").generate(PROMPTS, 3, sampling)
    engine = lm_engine(lm, "static", sync_every=3)
    buckets, spans = step_rows(engine.static_decoder())
    assert_same_rollouts(engine.generate(PROMPTS, 3, sampling), eager)
    assert len(spans) > 1
    if sampling.temperature > 0:
        assert len(set(buckets)) > 1, buckets  # the rows still running moved to fewer slots


def test_a_row_ends_at_its_stop_string_inside_a_window_and_the_overshoot_is_cut(llama, tokenizer):
    def run(decode: str, **kwargs):
        sampling = SamplingConfig(max_tokens=30, seed=5, **kwargs)
        return HFRolloutEngine(llama, tokenizer, progress=False, decode=decode, sync_every=8).generate(
            PROMPTS[:1], 1, sampling
        )[0]

    full = run("eager", stop=())
    stop = tokenizer.decode(full.token_ids[9:11]).strip()
    assert stop
    static, eager = run("static", stop=(stop,)), run("eager", stop=(stop,))
    # the row ends within the window of steps 8..15: the tokens sampled after its end in that window are discarded
    assert static.finish_reason == "stop" and 8 < len(static.token_ids) <= 11 and static.token_ids == eager.token_ids
    assert static.text == eager.text and static.text.endswith(stop)


def test_the_slot_state_is_kept_across_calls_and_follows_weight_loads(llama, tokenizer):
    import copy

    model = copy.deepcopy(llama)
    engine = hf_engine(model, tokenizer, "static")
    sampling = SamplingConfig(temperature=0.0, max_tokens=12, stop=())
    engine.generate(PROMPTS, 2, sampling)
    state = engine.static_decoder().state
    other = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
    engine.load_policy_weights(other)  # copied in place: the same addresses, so captured graphs would stay valid
    after = engine.generate(PROMPTS[:3], 2, sampling)  # fewer rows and the same length: the state serves again
    assert engine.static_decoder().state is state
    assert_same_rollouts(after, hf_engine(model, tokenizer, "eager").generate(PROMPTS[:3], 2, sampling))
    engine.generate(PROMPTS, 4, sampling)  # more rows than it holds: a new state
    assert engine.static_decoder().state is not state and engine.static_decoder().state.capacity == 16


def test_an_engine_colocated_with_training_frees_its_slots_after_each_call(llama, tokenizer):
    """build_engine's in-process engines train the policy on the same device between calls: the static path's memory
    goes back after each call (as a vLLM engine sharing the GPU sleeps), and the next call samples the same."""
    from alignment.run.setup import build_engine

    config = type("Config", (), {"decode": "static", "decode_sync_every": 4, "backend": "hf"})()
    engine = build_engine(config, llama, tokenizer, "cpu", "cpu")
    assert engine.keep_decode_state is False
    engine.eos_ids = torch.tensor(EOS)
    sampling = SamplingConfig(temperature=0.0, max_tokens=12, stop=())
    first = engine.generate(PROMPTS, 2, sampling)
    assert engine.static_decoder().state is None and not engine.static_decoder().graphs
    assert_same_rollouts(engine.generate(PROMPTS, 2, sampling), first)
    assert_same_rollouts(first, hf_engine(llama, tokenizer, "eager").generate(PROMPTS, 2, sampling))


def test_kept_slots_count_toward_the_next_calls_batch(llama, tokenizer, monkeypatch):
    """A dedicated engine keeps its slots between calls; the next call's memory budget (60% of free GPU memory)
    counts them as its own, so that its batches are not cut to what is left beside them."""
    from alignment.rollout import decoding

    engine = hf_engine(llama, tokenizer, "static")
    engine.generate(PROMPTS, 2, SamplingConfig(temperature=0.0, max_tokens=12, stop=()))
    state = engine.static_decoder().state
    expected = sum(t.numel() * t.element_size() for t in [*state.keys, *state.values])
    assert engine.static_decoder().held_bytes() > expected > 0  # the caches and every per-slot buffer

    free = 10 * 2**30
    monkeypatch.setattr(decoding.torch.cuda, "mem_get_info", lambda device: (free, 80 * 2**30))
    gpu = torch.device("cuda", 0)
    assert decoding.default_memory_budget(gpu) == int(0.6 * free)
    assert decoding.default_memory_budget(gpu, reusable=2**30) == int(0.6 * (free + 2**30))
    assert decoding.default_memory_budget(torch.device("cpu"), reusable=2**30) == 4 * 2**30


def test_static_path_keeps_the_seeding_guarantees(llama, tokenizer):
    engine = hf_engine(llama, tokenizer, "static")
    config = SamplingConfig(max_tokens=12, stop=(), seed=11)
    first, again = engine.generate(PROMPTS, 2, config), engine.generate(PROMPTS, 2, config)
    other = engine.generate(PROMPTS, 2, SamplingConfig(max_tokens=12, stop=(), seed=12))
    assert [r.token_ids for r in first] == [r.token_ids for r in again]
    assert [r.token_ids for r in first] != [r.token_ids for r in other]
    same_prompt = engine.generate(["Hello"] * 3, 2, SamplingConfig(max_tokens=6, stop=(), seed=11))
    assert len({tuple(r.token_ids) for r in same_prompt}) == 6  # every sample an independent draw


def test_a_streamed_unit_takes_the_static_path_without_partial_rollouts(llama, tokenizer):
    sampling = SamplingConfig(max_tokens=10, stop=("x",), seed=5)
    expected = hf_engine(llama, tokenizer, "eager").generate(PROMPTS[:3], 2, sampling)
    for partial in (False, True):  # partial rollouts may load weights between two steps: those decode eagerly
        engine = hf_engine(llama, tokenizer, "static", sync_every=4)
        feed = StreamFeed(version=2)
        feed.submit([Unit((0, 1, 2), tuple(PROMPTS[:3]), 2, sampling, floor=2), Barrier(2)])
        groups = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for item in engine.stream(feed, partial=partial):
                if isinstance(item, FinishedGroup):
                    groups[item.key] = item.rollouts
                else:
                    feed.stop()
        assert bool(caught) == partial  # --decode static asked for, and not served, says so
        streamed = [r for key in range(3) for r in groups[key]]
        assert_same_rollouts(streamed, expected)
        assert all(r.versions == [2] * len(r.token_ids) for r in streamed)
        assert (engine._static is None) == partial


def test_a_recording_forward_tape_takes_the_eager_path(llama, tokenizer):
    engine = hf_engine(llama, tokenizer, "static")
    sampling = SamplingConfig(max_tokens=8, min_tokens=1, stop=(), seed=0)
    tape = ForwardTape(llama, llama.lm_head)
    with pytest.warns(UserWarning, match="forward tape is recording"), tape.recording(engine):
        rollouts = engine.generate(PROMPTS[:2], 2, sampling)
    assert engine._static is None and tape.used > 0  # the eager loop fed the tape
    assert_same_rollouts(rollouts, hf_engine(llama, tokenizer, "eager").generate(PROMPTS[:2], 2, sampling))


@pytest.mark.parametrize("backend", ["hf", "transformer_lm"])
def test_multi_turn_token_id_prompts_take_the_static_path(tokenizer, llama, lm, backend):
    def engine(decode: str):
        if backend == "hf":
            return HFRolloutEngine(llama, tokenizer, progress=False, decode=decode, sync_every=2)
        return TransformerLMRolloutEngine(*lm, progress=False, decode=decode, sync_every=2)

    rows = [{"question": "Hi"}, {"question": "What is 2 + 2?"}]
    sampling = SamplingConfig(max_tokens=6, min_tokens=2, stop=(), seed=3)
    static_engine = engine("static")
    static = run_episodes(static_engine, tokenizer, TwoTurns, rows, 2, sampling, 256)
    eager = run_episodes(engine("eager"), tokenizer, TwoTurns, rows, 2, sampling, 256)
    assert static_engine._static is not None and static_engine._static.state is not None
    assert [(e.token_ids, e.sampled_mask, e.text) for e in static] == [
        (e.token_ids, e.sampled_mask, e.text) for e in eager
    ]
    assert max(abs(a - b) for s, e in zip(static, eager) for a, b in zip(s.logprobs, e.logprobs)) <= TOLERANCE


def test_the_rule_that_picks_the_decode_path():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert decode_path("auto", cpu) == "eager" and decode_path("auto", cuda) == "static"
    assert decode_path("static", cpu) == "static" and decode_path("eager", cuda) == "eager"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # auto falls back without a word
        for blocker in ("recording", "inflight", "sharded"):
            assert decode_path("auto", cuda, **{blocker: True}) == "eager"
        assert decode_path("auto", cuda, unsupported="model type 'gpt2'") == "eager"
    with pytest.warns(UserWarning, match="in-flight|between two decode steps"):
        assert decode_path("static", cuda, inflight=True) == "eager"
    with pytest.raises(ValueError, match="decode must be one of auto, static, eager"):
        check_decode("graph")
    with pytest.raises(ValueError, match="decode must be one of"):
        HFRolloutEngine(None, None, decode="fast")  # type: ignore[arg-type]


def test_models_the_static_step_does_not_cover_say_why(tokenizer):
    assert static_support(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2))) == (
        "model type 'gpt2' (the static path serves llama, qwen2, qwen3, olmo2)"
    )
    sliding = tiny_config("qwen2", len(tokenizer), use_sliding_window=True, sliding_window=8, max_window_layers=1)
    from transformers import Qwen2ForCausalLM

    assert "sliding_attention" in static_support(Qwen2ForCausalLM(sliding))
    assert static_support(Qwen2ForCausalLM(tiny_config("qwen2", len(tokenizer)))) is None
    dynamic = tiny_config("qwen2", len(tokenizer), rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    assert "rope_type 'dynamic'" in static_support(Qwen2ForCausalLM(dynamic))


def test_a_loaded_policy_takes_the_static_path(tiny_model_dir):
    """Loading switches Llama / Qwen2 / Qwen3 to sdpa_packed (the learner's packed rows), whose calls without packed
    rows are plain softmax attention: the static decode still serves it."""
    from alignment.models.loading import load_model_and_tokenizer
    from alignment.models.packed_rows import NAME

    model, _ = load_model_and_tokenizer(str(tiny_model_dir), "cpu")
    assert model.config._attn_implementation == NAME and static_support(model) is None


def test_buckets_are_powers_of_two_and_three_times_powers_of_two_up_to_the_capacity():
    rows = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 17, 24, 25, 129, 193)
    assert [bucket_for(r, 24) for r in rows] == [1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 16, 24, 24, 24, 24, 24]
    assert [bucket_for(r, 256) for r in rows[-4:]] == [24, 32, 192, 256]
    assert all(r <= bucket_for(r, 1024) < 2 * r for r in range(2, 1025))  # at most half the slots run empty


def test_a_step_attends_over_its_columns_rounded_up_to_the_span_multiple():
    assert [span_for(c, 80, 64) for c in (1, 64, 65, 80)] == [64, 64, 80, 80]
    assert [span_for(c, 24, 8) for c in (9, 16, 17)] == [16, 16, 24]


def splitmix64(key: int, step: int) -> float:
    """The reference: SplitMix64's output for counter step + 1 of a stream at `key`, as a float in [0, 1)."""
    mask = 2**64 - 1
    z = (key + (step + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z >> 11) / 2**53


def test_row_streams_are_splitmix64_and_uniform():
    keys = torch.tensor([0, 1, 2**62 - 1, 123456789012345678, 2**61 + 12345])
    for step in (0, 1, 7, 1023, 2**31):
        expected = torch.tensor([splitmix64(k, step) for k in keys.tolist()], dtype=torch.float64)
        assert torch.equal(row_uniforms(keys, step), expected)
        assert torch.equal(row_uniforms(keys, torch.tensor(step)), expected)  # a step tensor, as a captured graph has
    many = torch.stack([row_uniforms(torch.randint(0, 2**62, (2000,), generator=torch.Generator().manual_seed(0)), t)
                        for t in range(50)])  # fmt: skip
    counts = torch.histc(many, bins=20, min=0, max=1)
    assert ((counts - 5000).abs() < 5 * 5000**0.5).all()  # 100,000 draws in 20 bins, each within 5 sigma
    # neither successive steps of a row nor neighbouring rows at a step are correlated
    assert abs(torch.corrcoef(torch.stack([many[:-1].flatten(), many[1:].flatten()]))[0, 1]) < 0.02
    assert abs(torch.corrcoef(torch.stack([many[:, :-1].flatten(), many[:, 1:].flatten()]))[0, 1]) < 0.02


class StandInGraph:
    """A CUDA graph's stand-in on the CPU, as StaticDecoder._capture returns one: capturing records the step (runs
    nothing), a replay runs it again; a `wrong` one then adds 1 to every output log-prob it wrote."""

    def __init__(self, decoder: StaticDecoder, step, wrong: bool) -> None:
        self.decoder, self.step, self.wrong = decoder, step, wrong

    def replay(self) -> None:
        self.step()
        if self.wrong:
            self.decoder.state.out_logprobs.add_(1.0)


def captured_on_the_cpu(engine, capture: str) -> StaticDecoder:
    """The engine's static decoder capturing its steps on the CPU with StandInGraph: `capture` "faithful", "wrong"
    (each replay's log-probs off by 1) or "failing" (the capture raises as CUDA does for a step that syncs)."""
    decoder = engine.static_decoder()
    decoder._captures_on = lambda device: True

    def stand_in(device, step):
        if capture == "failing":
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return StandInGraph(decoder, step, wrong=capture == "wrong")

    decoder._capture = stand_in
    return decoder


@pytest.mark.parametrize(
    "capture, warning",
    [
        ("faithful", None),
        ("failing", "capturing a decode step failed .RuntimeError: CUDA error: operation not permitted"),
        ("wrong", "its first replay differs from the eager step in out_logprobs"),
    ],
)
def test_a_capture_that_fails_or_replays_wrongly_warns_and_the_batch_ends_uncaptured(lm, capture, warning):
    """The static path's CUDA-graph bookkeeping on the CPU, through a stand-in for the graph: a faithful one is captured
    and replayed (its first replay checked against the eager step); one whose capture raises, or whose first replay
    differs, warns once and the rest of the batch runs uncaptured; the rollouts are the eager loop's every time."""
    sampling = SETTINGS["sampled"]
    eager = lm_engine(lm, "eager").generate(PROMPTS, 3, sampling)
    engine = lm_engine(lm, "static", sync_every=3)
    decoder = captured_on_the_cpu(engine, capture)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        static = engine.generate(PROMPTS, 3, sampling)
    assert_same_rollouts(static, eager)
    messages = [str(w.message) for w in caught if "CUDA graph" in str(w.message)]
    if warning is None:
        assert not messages and decoder.uncaptured is None and decoder.captures > 3 and not decoder.unchecked
    else:
        assert len(messages) == 1 and re.search(warning, messages[0]), messages
        assert decoder.uncaptured is not None and not decoder.graphs
        assert_same_rollouts(engine.generate(PROMPTS, 3, sampling), eager)  # and the next batch, uncaptured
