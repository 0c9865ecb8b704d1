"""-m gpu: the static decode path captured as CUDA graphs (alignment/rollout/static_decoding.py) against the eager loop,
for the hf backend and our TransformerLM's sampler, and that sampler end to end on CUDA. Tiny random models and a
synthetic tokenizer: torch and transformers only. bench/gpu_check.sh runs them; without CUDA they are skipped."""

import copy
from dataclasses import replace

import pytest
import torch
from transformers import LlamaForCausalLM, Qwen2ForCausalLM

from alignment.grpo.synthetic import random_lm
from alignment.models.synthetic_tokenizer import word_tokenizer
from alignment.models.transformer_lm import TransformerConfig
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_engine import TransformerLMRolloutEngine
from tests.conftest import tiny_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

VOCAB = 4096
PROMPTS = ["t5 t6 t7", "t100 t200 t300 t400 t500 t600 t700", "t9", "t42 t43 t44 t45"]
EOS = list(range(1000, 1300))  # about 7% of a random model's mass: rows end at many different steps
# float32 on the GPU (TF32 off): other batch sizes and a fixed-length masked attention round differently
TOLERANCE = 1e-4
SETTINGS = (
    SamplingConfig(temperature=0.0, max_tokens=48, stop=()),
    SamplingConfig(max_tokens=48, min_tokens=3, stop=(), seed=3),
    SamplingConfig(temperature=1.3, max_tokens=48, stop=("t77",), seed=5),
)


@pytest.fixture(scope="module")
def tokenizer():
    return word_tokenizer(VOCAB)


@pytest.fixture(autouse=True)
def exact_float32_matmuls():
    """Plain float32 products (a run may have switched TF32 on), restored afterwards."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = before


def assert_same_rollouts(static, eager) -> None:
    assert [r.token_ids for r in static] == [r.token_ids for r in eager]
    assert [(r.finish_reason, r.text) for r in static] == [(r.finish_reason, r.text) for r in eager]
    worst = max(abs(a - b) for s, e in zip(static, eager) for a, b in zip(s.logprobs, e.logprobs, strict=True))
    assert worst <= TOLERANCE, worst


def hf_model(kind: str, tokenizer) -> torch.nn.Module:
    torch.manual_seed(0)
    config = tiny_config(kind, VOCAB, tokenizer.pad_token_id)
    return (LlamaForCausalLM if kind == "llama" else Qwen2ForCausalLM)(config).to("cuda").eval()


def with_eos(engine: HFRolloutEngine) -> HFRolloutEngine:
    engine.eos_ids = torch.tensor(EOS)
    return engine


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_captured_hf_decode_equals_eager(kind, tokenizer):
    model = hf_model(kind, tokenizer)
    static = with_eos(HFRolloutEngine(model, tokenizer, progress=False, decode="static", sync_every=4))
    static.static_decoder().span_multiple = 16  # spans of 16, 32, ... columns: several per call
    eager = with_eos(HFRolloutEngine(model, tokenizer, progress=False, decode="eager"))
    for sampling in SETTINGS:
        assert_same_rollouts(static.generate(PROMPTS, 3, sampling), eager.generate(PROMPTS, 3, sampling))
    decoder = static.static_decoder()
    assert decoder.captures >= 3 and len(decoder.graphs) == decoder.captures  # buckets 12, 8, 6, ... were captured
    assert len({span for _, span, *_ in decoder.graphs}) > 1
    captured = decoder.captures
    # new weights copied in place: the graphs replay them, nothing is captured again
    other = {k: v + 0.02 * torch.randn_like(v) for k, v in model.state_dict().items()}
    static.load_policy_weights(other)
    assert_same_rollouts(static.generate(PROMPTS, 3, SETTINGS[1]), eager.generate(PROMPTS, 3, SETTINGS[1]))
    assert decoder.captures == captured


def test_an_engine_beside_training_captures_anew_each_call_and_frees_its_graphs(tokenizer):
    """keep_decode_state=False, as an engine colocated with the policy is built: each call captures its graphs and
    frees them with the slots afterwards, sampling what the eager loop samples."""
    model = hf_model("qwen2", tokenizer)
    static = HFRolloutEngine(model, tokenizer, progress=False, decode="static", keep_decode_state=False)
    eager = HFRolloutEngine(model, tokenizer, progress=False, decode="eager")
    for sampling in SETTINGS[:2]:
        assert_same_rollouts(
            with_eos(static).generate(PROMPTS, 3, sampling), with_eos(eager).generate(PROMPTS, 3, sampling)
        )
        decoder = static.static_decoder()
        assert decoder.state is None and not decoder.graphs and decoder.pool is None and decoder.captures > 0


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs: a model off the current device")
def test_a_model_off_the_current_device_is_captured_on_its_own(tokenizer):
    """Rollouts on cuda:1 while cuda:0 is current (a policy on cuda:0, its rollout engine on cuda:1): the graphs are
    captured and replayed on the model's device, and sample what the eager loop samples there."""
    model = hf_model("llama", tokenizer).to("cuda:1")
    static = with_eos(HFRolloutEngine(model, tokenizer, progress=False, decode="static", sync_every=4))
    eager = with_eos(HFRolloutEngine(model, tokenizer, progress=False, decode="eager"))
    with torch.cuda.device(0):
        for sampling in SETTINGS:
            assert_same_rollouts(static.generate(PROMPTS, 3, sampling), eager.generate(PROMPTS, 3, sampling))
    assert static.static_decoder().captures >= 3


def test_captured_transformer_lm_decode_equals_eager(tokenizer):
    model = random_lm(
        TransformerConfig(vocab_size=VOCAB, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128),
        "cuda",
        torch.float32,
    )
    static = TransformerLMRolloutEngine(model, tokenizer, progress=False, eos_ids=EOS, decode="static", sync_every=4)
    static.static_decoder().span_multiple = 16
    eager = TransformerLMRolloutEngine(model, tokenizer, progress=False, eos_ids=EOS, decode="eager")
    for sampling in SETTINGS:
        assert_same_rollouts(static.generate(PROMPTS, 3, sampling), eager.generate(PROMPTS, 3, sampling))
    decoder = static.static_decoder()
    assert decoder.captures >= 3
    copied = copy.deepcopy(model.state_dict())
    static.load_policy_weights({k: v * 1.01 for k, v in copied.items()})
    captured = decoder.captures
    assert_same_rollouts(static.generate(PROMPTS, 3, SETTINGS[0]), eager.generate(PROMPTS, 3, SETTINGS[0]))
    assert decoder.captures == captured


def test_transformer_lm_sampler_on_cuda_end_to_end(tokenizer):
    """bfloat16 as GPU runs hold it, --decode auto (static on CUDA): well-formed rows the seed reproduces."""
    config = TransformerConfig(vocab_size=VOCAB, d_model=128, n_layers=3, n_heads=8, n_kv_heads=2, d_ff=256)
    model = random_lm(config, "cuda", torch.bfloat16)
    engine = TransformerLMRolloutEngine(model, tokenizer, progress=False, eos_ids=EOS)
    sampling = SamplingConfig(temperature=0.9, top_p=0.95, max_tokens=64, min_tokens=4, stop=("t7",), seed=21)
    rollouts = engine.generate(PROMPTS, 4, sampling)
    assert engine.static_decoder().captures > 0  # auto took the captured path
    assert [r.prompt_index for r in rollouts] == [i for i in range(len(PROMPTS)) for _ in range(4)]
    for r in rollouts:
        assert 4 <= len(r.token_ids) == len(r.logprobs) <= 64
        assert all(0 <= t < VOCAB for t in r.token_ids) and all(lp <= 0 and lp > -float("inf") for lp in r.logprobs)
        if r.finish_reason == "length":
            assert len(r.token_ids) == 64
        else:
            assert r.token_ids[-1] in EOS or r.text.endswith("t7")
        assert not any(t in EOS for t in r.token_ids[:-1])  # nothing after a row's end
    assert len({tuple(r.token_ids) for r in rollouts}) == len(rollouts)  # every sample its own draw
    again = engine.generate(PROMPTS, 4, sampling)
    assert [(r.token_ids, r.logprobs) for r in again] == [(r.token_ids, r.logprobs) for r in rollouts]
    other = engine.generate(PROMPTS, 4, replace(sampling, seed=22))
    assert [r.token_ids for r in other] != [r.token_ids for r in rollouts]


def test_the_sampling_kernel_draws_what_the_torch_path_draws_on_cuda():
    """alignment/kernels/sampling.py, compiled, against decoding.sample_tokens_at over the log-softmax's exp:
    256 rows of Qwen2.5's 151,936 words in bfloat16 with the EOS ban's -inf, as the 1.5B decode step draws them."""
    from alignment.kernels.sampling import sample_rows
    from alignment.rollout.decoding import choose_tokens, sample_tokens_at, sampling_log_probs
    from alignment.rollout.row_streams import row_uniforms

    generator = torch.Generator(device="cuda").manual_seed(0)
    logits = (torch.randn(256, 151936, device="cuda", generator=generator) * 3).bfloat16()
    logits[:, 151643:151646] = float("-inf")
    keys = torch.arange(256, device="cuda")
    for temperature in (1.0, 0.7):
        uniforms = row_uniforms(keys, 5)
        tokens, log_probs = sample_rows(logits, uniforms, temperature)
        expected = sampling_log_probs(logits, temperature, 1.0)
        expected_tokens = sample_tokens_at(expected.exp(), uniforms)
        assert (tokens != expected_tokens).sum() <= 2  # a point within rounding of a boundary may differ
        assert not ((tokens >= 151643) & (tokens < 151646)).any()
        torch.testing.assert_close(log_probs, expected.gather(-1, tokens[:, None]).squeeze(-1), rtol=0, atol=5e-6)
        chosen, _ = choose_tokens(logits, SamplingConfig(temperature=temperature), keys, 5)
        assert torch.equal(chosen, tokens)  # the decode loops draw with the kernel on CUDA


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs: tensors off the current device")
def test_the_kernels_run_on_their_tensors_device():
    """The sampling kernel and the head's kernels given tensors on cuda:1 while cuda:0 is current (a sampler beside the
    policy's GPU): each launches there and computes what torch's kernels compute there."""
    from alignment.kernels import head
    from alignment.kernels.sampling import sample_rows
    from alignment.models.chunked_head import TORCH_OPS
    from alignment.rollout.decoding import sampling_log_probs

    generator = torch.Generator(device="cuda:1").manual_seed(0)
    logits = (torch.randn(64, 50000, device="cuda:1", generator=generator) * 3).bfloat16()
    labels = torch.randint(0, 50000, (64,), device="cuda:1", generator=generator)
    uniforms = torch.rand(64, device="cuda:1", dtype=torch.float64, generator=generator)
    with torch.cuda.device(0):
        tokens, log_probs = sample_rows(logits, uniforms, 0.7)
        stats = head.chunk_stats(logits, labels)
    expected = sampling_log_probs(logits, 0.7, 1.0).gather(-1, tokens[:, None]).squeeze(-1)
    torch.testing.assert_close(log_probs, expected, rtol=0, atol=5e-6)
    for mine, theirs in zip(stats, TORCH_OPS.stats(logits.clone(), labels), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=2e-5)
