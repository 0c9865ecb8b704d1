"""What a CUDA graph of the static decode step needs, checked without a GPU (alignment/rollout/static_decoding.py).

A capture records the kernels one call of StaticDecoder._step launches and replays them at every later step of the
same bucket, span and sampling setting. That is right only if the step (the model's forward over the slot buffers,
then sampling) reads nothing back to the host, touches no CPU tensor (a pageable copy fails inside a capture, a CPU
scalar is frozen into it), and launches the same kernels with the same arguments at every step: whatever changes
from one step to the next must live in device tensors that the step reads. Here the step runs on fake CUDA tensors
(torch's FakeTensorMode: shapes, dtypes and devices, no data, no GPU), and every operation it dispatches is recorded:
- none may hold a CPU tensor, and a read of a value (`.item()`, a data-dependent shape) raises;
- a later step of the same key dispatches the same operations, on the same outside tensors (the slot state and the
  weights, at the same offsets, shapes and strides) or on what earlier operations of the step produced, with the
  same non-tensor arguments.
The captured path itself runs in tests/test_gpu_rollout.py on a GPU.
"""

from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from transformers import LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM

from alignment.models.transformer_lm import TransformerConfig, TransformerLM
from alignment.rollout import decoding
from alignment.rollout.hf_static import hf_step_logits, kv_spec
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_sampler import lm_kv_spec, lm_step_logits
from alignment.rollout.static_decoding import KVSpec, Prefill, SlotState, StaticDecoder
from tests.conftest import tiny_config

VOCAB = 640  # not a multiple of the sampler's 128-entry blocks: its padding is part of the step
CAPACITY, LENGTH = 12, 128
SETTINGS = {
    "greedy": SamplingConfig(temperature=0.0, max_tokens=64),
    "sampled, EOS banned": SamplingConfig(max_tokens=64, min_tokens=8),
    "tempered top-p": SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=64),
}
HF_MODELS = {"llama": LlamaForCausalLM, "qwen2": Qwen2ForCausalLM, "qwen3": Qwen3ForCausalLM}


class StepRecorder(TorchDispatchMode):
    """Records each dispatched operation with its arguments in a form two steps can be compared by: a tensor made
    earlier in the same step as ("made", op, output), any other as ("outside", its storage, offset, shape, stride,
    dtype, device); other arguments as they are. Notes every CPU tensor an operation holds."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, Any]] = []
        self.on_cpu: list[str] = []
        self.made: dict[int, tuple[str, int, int]] = {}  # storage -> the op and output that made it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        if any(t.device.type != "cuda" for t in tensors):
            self.on_cpu.append(f"{func}: {[str(t.device) for t in tensors]}")
        self.ops.append((str(func), tree_map(self._describe, (args, kwargs))))
        for i, t in enumerate(tree_flatten(out)[0]):
            if isinstance(t, torch.Tensor):
                self.made[t.untyped_storage()._cdata] = ("made", len(self.ops) - 1, i)
        return out

    def _describe(self, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        storage = value.untyped_storage()._cdata
        place = (value.storage_offset(), tuple(value.shape), value.stride(), value.dtype, str(value.device))
        return (*self.made[storage], *place) if storage in self.made else ("outside", storage, *place)


def recorded_step(decoder: StaticDecoder, state: SlotState, bucket: int, span: int, sampling: SamplingConfig):
    """One StaticDecoder._step (what a capture records), recorded."""
    with torch.inference_mode(), StepRecorder() as recorder:
        decoder._step(state, bucket, span, sampling.min_tokens > 0, sampling)
    return recorder


def check_step(decoder: StaticDecoder, vocab: int) -> None:
    """Steps of each setting at a partial bucket and span: no CPU tensor, and a later step of the same key launches
    what the first one did (the first runs as a capture's warm-up, the second is recorded, the third is a replay)."""
    state = SlotState(CAPACITY, LENGTH, decoder.kv, vocab, torch.device("cuda"))
    state.column.fill_(40)
    for sampling in SETTINGS.values():
        warm_up = recorded_step(decoder, state, 8, 64, sampling)
        captured = recorded_step(decoder, state, 8, 64, sampling)
        replayed = recorded_step(decoder, state, 8, 64, sampling)
        assert not warm_up.on_cpu and not captured.on_cpu and not replayed.on_cpu, captured.on_cpu
        assert len(captured.ops) > 20  # the model's forward was recorded, not just the sampling
        assert [op for op, _ in captured.ops] == [op for op, _ in replayed.ops]
        for (op, args), (_, replayed_args) in zip(captured.ops, replayed.ops):
            assert args == replayed_args, op


@pytest.fixture(params=["torch", "triton"])
def sampler(request, monkeypatch):
    """Which draw the step makes at a temperature with no nucleus: torch's, or the Triton kernel's
    (alignment/kernels/sampling.py), an operator of torch's with a fake form, as a GPU where Triton runs has it.
    Fake tensors launch no Triton kernel, so the question is answered here rather than by trying one."""
    if request.param == "triton":
        import alignment.kernels.sampling  # noqa: F401 - registers the operator
    monkeypatch.setattr(decoding, "sampling_kernel_serves", lambda logits: request.param == "triton")
    return request.param


def test_the_kernels_draw_is_in_the_step(sampler):
    with FakeTensorMode(), torch.device("cuda"):
        config = TransformerConfig(vocab_size=VOCAB, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)
        model = TransformerLM(config).eval()
        decoder = StaticDecoder(lm_step_logits(model), lm_kv_spec(model), lambda: [*model.parameters()], sync_every=4)
        state = SlotState(CAPACITY, LENGTH, decoder.kv, VOCAB, torch.device("cuda"))
        ops = [op for op, _ in recorded_step(decoder, state, 8, 64, SETTINGS["sampled, EOS banned"]).ops]
    assert ("alignment.sample_rows.default" in ops) == (sampler == "triton")


@pytest.mark.parametrize("kind", HF_MODELS)
def test_the_hf_static_step_can_be_captured(kind, sampler):
    with FakeTensorMode(), torch.device("cuda"):
        model = HF_MODELS[kind](tiny_config(kind, VOCAB, 0)).eval()
        decoder = StaticDecoder(hf_step_logits(model), kv_spec(model), lambda: [*model.parameters()], sync_every=4)
        check_step(decoder, VOCAB)


def test_the_transformer_lm_static_step_can_be_captured(sampler):
    config = TransformerConfig(vocab_size=VOCAB, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)
    with FakeTensorMode(), torch.device("cuda"):
        model = TransformerLM(config).eval()
        decoder = StaticDecoder(lm_step_logits(model), lm_kv_spec(model), lambda: [*model.parameters()], sync_every=4)
        check_step(decoder, VOCAB)


def test_the_recorder_sees_what_a_capture_cannot_take():
    """The checks above can fail: a CPU scalar (frozen into a capture), a read back to the host and a Python value that
    changes from step to step."""
    with FakeTensorMode(), torch.device("cuda"):
        state = SlotState(CAPACITY, LENGTH, KVSpec(1, 2, 16, torch.float32), VOCAB, torch.device("cuda"))
        with StepRecorder() as recorder:
            state.tokens[:4] += torch.tensor(1, device="cpu")
        assert recorder.on_cpu
        with pytest.raises(Exception, match="_local_scalar_dense"):
            state.step.item()
        records = []
        for scale in (1.0, 2.0):
            with StepRecorder() as recorder:
                state.out_logprobs.mul_(scale)
            records.append(recorder.ops)
        assert records[0] != records[1]


def test_a_batch_is_put_into_the_slots_on_the_device(sampler):
    """Outside the capture: the prefilled prompts, their rows' streams and first tokens (StaticDecoder._start) on fake
    CUDA tensors, where an operation mixing a CPU tensor of one or more dimensions with CUDA ones raises."""
    config = TransformerConfig(vocab_size=VOCAB, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)
    with FakeTensorMode(), torch.device("cuda"):
        model = TransformerLM(config).eval()
        decoder = StaticDecoder(lm_step_logits(model), lm_kv_spec(model), lambda: [*model.parameters()], sync_every=4)
        state = SlotState(CAPACITY, LENGTH, decoder.kv, VOCAB, torch.device("cuda"))
        kv = [torch.randn(3, 2, 20, 16) for _ in range(2)]
        prefill = Prefill(torch.randn(3, VOCAB), kv, kv, torch.ones(3, 20, dtype=torch.bool), torch.full((3,), 20))
        for sampling in SETTINGS.values():
            decoder._start(state, prefill, 4, [5, 6], sampling, None)
            assert state.tokens.device.type == "cuda" and state.tokens.shape == (CAPACITY,)
