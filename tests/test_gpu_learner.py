"""The learner on a CUDA GPU (`-m gpu`, skipped without one; bench/gpu_check.sh runs them): each precision's update
moves the weights as the CPU's float32 update does; a LoRA step; the sharded learner over NCCL (torchrun, a world of
one) equal to the plain learner; the memory plan against the measured peak at Qwen2.5-Math-1.5B's shape; the chunked
head and the packed rows equal to the whole logits and the padded batch.

Only torch, transformers and peft: random weights of real shapes and synthetic rows (alignment/grpo/synthetic.py),
no tokenizer, data, vLLM or Ray: tests/test_gpu_check.py runs bench/gpu_check.sh --tiny, which collects these, with
vLLM, Ray, datasets and math-verify hidden.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from torch import nn

import alignment.models.chunked_head as chunked_head
from alignment.grpo.synthetic import (
    QWEN_MATH_15B,
    TINY,
    planned_training_bytes,
    random_policy,
    synthetic_learner,
    synthetic_rows,
    synthetic_workload,
)
from alignment.logprobs import get_response_log_probs
from alignment.models.chunked_head import fused_log_probs_and_entropy
from alignment.models.packed_rows import Segments, segment_attention
from alignment.run.precision import PRECISIONS, use_tf32
from tests import sharded_gpu_worker  # imported here so that collecting these tests proves its imports too

ROOT = Path(__file__).resolve().parents[1]
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
SMALL = TINY | dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512)


def one_update(precision: str, device: str, **settings) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """The change one optimizer step (lr 1e-3) makes to each float32 weight of the same random policy, and the
    step's metrics; fp16-mixed takes steps until its loss scaler lets one through (a skipped step changes nothing,
    so that one is AdamW's first all the same)."""
    policy = random_policy(SMALL, precision, device)
    learner = synthetic_learner(policy, precision, 4, 2, learning_rate=1e-3, **settings)
    before = {name: p.detach().float().cpu().clone() for name, p in policy.named_parameters()}
    rows = synthetic_rows(4, 32, 64, SMALL["vocab_size"])
    for _ in range(4):
        row = learner.optimizer_step(rows)
        if "skipped_step" not in row:
            break
    masters = dict(zip([n for n, _ in policy.named_parameters()], learner.optimizer.params))
    return {n: masters[n].detach().float().cpu() - before[n] for n in before}, row


@contextmanager
def full_float32() -> Iterator[None]:
    """CUDA's float32 matmuls in full float32 inside (TF32 off), as they were outside after."""
    was = torch.backends.cuda.matmul.allow_tf32
    use_tf32(False)
    try:
        yield
    finally:
        use_tf32(was)


def agreement(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(cosine, norm ratio) of two updates flattened over every weight."""
    x, y = torch.cat([a[n].flatten() for n in a]).double(), torch.cat([b[n].flatten() for n in a]).double()
    return float(x @ y / (x.norm() * y.norm())), float(x.norm() / y.norm())


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("precision", PRECISIONS)
def test_each_precisions_update_moves_the_weights_as_the_cpus(precision):
    """AdamW's first step is about lr x sign(gradient) for every weight, so the update's direction is the
    gradients' signs: float32 (TF32 off) agrees with the CPU's to rounding; bfloat16 / float16 compute flips the
    sign of the smallest gradients, and bf16 (no master) moves each weight only by whole bfloat16 steps."""
    with full_float32():
        reference, cpu_row = one_update("fp32", "cpu")
        update, gpu_row = one_update(precision, "cuda:0")
    cosine, ratio = agreement(update, reference)
    # on the CPU in each precision: cosine 0.9953 (bf16-mixed), 0.9995 (fp16-mixed), 0.9949 (bf16), norm ratio 0.986
    # (bf16) and 1.000 otherwise, gradient norms within 1.3e-4
    least = {"fp32": 0.999, "bf16-mixed": 0.98, "fp16-mixed": 0.99, "bf16": 0.97}[precision]
    assert cosine >= least, (precision, cosine)
    assert 0.95 <= ratio <= 1.05, (precision, ratio)
    assert gpu_row["grad_norm"] == pytest.approx(cpu_row["grad_norm"], rel=1e-4 if precision == "fp32" else 2e-2)


@cuda
@pytest.mark.gpu
def test_adamw_is_fused_on_cuda_in_every_precision():
    for precision in PRECISIONS:
        learner = synthetic_learner(random_policy(SMALL, precision, "cuda:0"), precision, 4, 2)
        assert learner.optimizer.optimizer.defaults["fused"], precision


def lora_update(precision: str, device: str) -> dict[str, torch.Tensor]:
    """The change one optimizer step (lr 1e-3) makes to each adapter weight of the same random policy with rank-8
    LoRA on every projection (B drawn at random, so that A's gradient is not 0); the frozen weights must not move."""
    from alignment.models.lora import LoRASettings, apply_lora

    policy = random_policy(SMALL, precision, device)
    apply_lora(policy, LoRASettings(lora_rank=8))
    torch.manual_seed(1)
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            nn.init.normal_(p, std=0.02)
    learner = synthetic_learner(policy, precision, 4, 2, learning_rate=1e-3)
    before = {name: p.detach().float().cpu().clone() for name, p in policy.named_parameters()}
    learner.optimizer_step(synthetic_rows(4, 32, 64, SMALL["vocab_size"]))
    weights = dict(policy.named_parameters())
    masters = dict(zip([n for n, p in weights.items() if p.requires_grad], learner.optimizer.params))
    assert all(torch.equal(p.float().cpu(), before[n]) for n, p in weights.items() if not p.requires_grad)
    return {n: m.detach().float().cpu() - before[n] for n, m in masters.items()}


@cuda
@pytest.mark.gpu
def test_a_lora_step_moves_the_adapters_alone_as_on_the_cpu():
    reference, update = lora_update("fp32", "cpu"), lora_update("bf16-mixed", "cuda:0")  # on the CPU: cosine 0.992
    assert reference.keys() == update.keys() and all("lora_" in n for n in update)
    cosine, ratio = agreement(update, reference)
    assert cosine >= 0.98 and 0.95 <= ratio <= 1.05, (cosine, ratio)


@cuda
@pytest.mark.gpu
def test_the_sharded_learner_over_nccl_updates_as_the_plain_one(tmp_path):
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    for command in (
        [sys.executable, "-m", sharded_gpu_worker.__name__, str(tmp_path)],
        [*torchrun, "-m", sharded_gpu_worker.__name__, str(tmp_path)],
    ):
        done = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    from safetensors.torch import load_file

    plain, sharded = load_file(tmp_path / "plain.safetensors"), load_file(tmp_path / "sharded.safetensors")
    assert plain.keys() == sharded.keys()
    # float32, TF32 off: the sums of one process in another order (FSDP2's flat shards), two AdamW steps at lr 1e-3
    assert max((plain[k] - sharded[k]).abs().max().item() for k in plain) < 1e-5
    for a, b in zip(*(json.loads((tmp_path / f"{n}.json").read_text()) for n in ("plain", "sharded"))):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "checkpointed"])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_memory_plan_holds_the_measured_peak_within_10_percent(precision, checkpointing):
    """Qwen2.5-Math-1.5B's shape, the handout's microbatch (2 x (512 + 1,024) tokens), two optimizer steps of two
    microbatches (AdamW's states allocated at the first; the step's gradients held from the second microbatch on)."""
    torch.cuda.empty_cache()
    policy = random_policy(QWEN_MATH_15B, precision, "cuda:0", checkpointing)
    learner = synthetic_learner(policy, precision, 4, 2)
    rows = synthetic_rows(4, 512, 1024, QWEN_MATH_15B["vocab_size"])
    torch.cuda.reset_peak_memory_stats()
    for _ in range(2):
        learner.optimizer_step(rows)
    measured = torch.cuda.max_memory_allocated()
    del learner, policy
    torch.cuda.empty_cache()
    planned = planned_training_bytes(QWEN_MATH_15B, synthetic_workload(precision, 2, 2, 512, 1024, checkpointing))
    assert measured <= planned <= 1.1 * measured, (precision, checkpointing, measured / 2**30, planned / 2**30)


@cuda
@pytest.mark.gpu
def test_chunked_log_probs_on_cuda_equal_the_whole_logits():
    torch.manual_seed(0)
    for dtype, tolerance in ((torch.float64, 1e-9), (torch.bfloat16, 1e-2)):
        head = nn.Linear(256, 151936, bias=False, device="cuda", dtype=dtype)
        hidden = torch.randn(1000, 256, device="cuda", dtype=dtype, requires_grad=True)
        labels = torch.randint(0, 151936, (1000,), device="cuda")
        log_softmax = torch.log_softmax(head(hidden).double(), dim=-1)
        expected = log_softmax.gather(-1, labels[:, None]).squeeze(-1)
        expected_entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        expected.sum().backward()
        reference = [hidden.grad.clone(), head.weight.grad.clone()]
        hidden.grad = head.weight.grad = None
        log_probs, entropy = fused_log_probs_and_entropy(hidden, head, labels, chunk=384)
        torch.testing.assert_close(log_probs.double(), expected, rtol=0, atol=tolerance)
        torch.testing.assert_close(entropy.double(), expected_entropy.detach(), rtol=0, atol=tolerance)
        log_probs.sum().backward()
        for mine, theirs in zip((hidden.grad, head.weight.grad), reference):  # relative to the largest gradient
            scale = theirs.double().abs().max().item()
            torch.testing.assert_close(mine.double(), theirs.double(), rtol=0, atol=tolerance * scale)


@cuda
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_the_heads_triton_kernels_equal_its_torch_ops(dtype):
    """The head's compiled kernels (alignment/kernels/head.py), which a CUDA head takes, against the chain of
    torch kernels the CPU takes: forward and backward at the handout's vocabulary, chunks of 384 tokens of 1,000."""
    torch.manual_seed(0)
    head = nn.Linear(256, 151936, bias=False, device="cuda", dtype=dtype)
    hidden = torch.randn(1000, 256, device="cuda", dtype=dtype)
    labels = torch.randint(0, 151936, (1000,), device="cuda")
    upstream = torch.randn(1000, device="cuda")
    kernels = chunked_head.elementwise_ops(hidden)
    assert kernels is not chunked_head.TORCH_OPS
    results = []
    for ops in (chunked_head.TORCH_OPS, kernels):
        h = hidden.clone().requires_grad_()
        log_probs, entropy = fused_log_probs_and_entropy(h, head, labels, chunk=384, ops=ops)
        (log_probs * upstream).sum().backward()
        results.append((log_probs, entropy, h.grad, head.weight.grad))
        head.weight.grad = None
    for mine, theirs in zip(results[1], results[0], strict=True):  # relative to the largest value
        scale = theirs.double().abs().max().item()
        tolerance = 1e-5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(mine.double(), theirs.double(), rtol=0, atol=tolerance * scale)


@cuda
@pytest.mark.gpu
def test_packed_rows_on_cuda_equal_the_padded_batch():
    """Segment attention (torch's varlen flash kernel where this torch has it) against masked SDPA, and the learner's
    packed forward against the padded one, in bfloat16 and in float32 (copied key/value heads)."""
    torch.manual_seed(0)
    bounds = (0, 700, 1536, 2048)
    segments = Segments(bounds, torch.tensor(bounds, dtype=torch.int32, device="cuda"))
    row = torch.repeat_interleave(torch.arange(3, device="cuda"), torch.tensor([700, 836, 512], device="cuda"))
    mask = (row[:, None] == row[None, :]) & torch.ones(2048, 2048, dtype=torch.bool, device="cuda").tril()
    for dtype, tolerance in ((torch.bfloat16, 2e-2), (torch.float32, 1e-5)):
        q = torch.randn(1, 12, 2048, 128, device="cuda", dtype=dtype)
        k, v = (torch.randn(1, 2, 2048, 128, device="cuda", dtype=dtype) for _ in range(2))
        with full_float32():  # the masked reference runs on the math kernel, whose matmuls TF32 would round
            expected = torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), attn_mask=mask, enable_gqa=True
            )
        torch.testing.assert_close(
            segment_attention(q, k, v, segments).float(), expected, rtol=tolerance, atol=tolerance
        )
    policy = random_policy(SMALL, "bf16-mixed", "cuda:0")
    rows = synthetic_rows(4, 64, 128, SMALL["vocab_size"])
    rows.response_mask[1, 150:] = False  # rows of different lengths: the padded batch runs them to the longest
    rows.response_mask[3, 100:] = False
    ids, labels, mask = rows.input_ids.cuda(), rows.labels.cuda(), rows.response_mask.cuda()
    packed = get_response_log_probs(policy, ids, labels, True, response_mask=mask)
    padded = policy.model(input_ids=ids).last_hidden_state
    log_softmax = torch.log_softmax(policy.lm_head(padded).float(), dim=-1)
    expected = log_softmax.gather(-1, labels[..., None]).squeeze(-1)
    torch.testing.assert_close(packed["log_probs"][mask], expected[mask], rtol=0, atol=5e-2)
