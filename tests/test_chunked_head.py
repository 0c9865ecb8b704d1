"""The LM head fused with the log-softmax in chunks (alignment/models/chunked_head.py) against the whole logits: label
log-probs, entropies and every gradient (hidden states, weight, bias) in float64; the loss scale on both paths; the
heads it leaves to the plain path, with the reason."""

import copy
import math

import pytest
import torch
import torch.distributed as dist
from torch import nn

import alignment.models.chunked_head as chunked_head
from alignment.logprobs import get_response_log_probs
from alignment.models.chunked_head import (
    CHUNK_BYTES,
    chunk_tokens,
    fused_log_probs_and_entropy,
    scale_gradients,
    unsupported,
)


def whole_logits(hidden: torch.Tensor, head: nn.Linear, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_softmax = torch.log_softmax(head(hidden).double(), dim=-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(dim=-1)
    return log_softmax.gather(-1, labels[:, None]).squeeze(-1), entropy.detach()


def gradients(*tensors: torch.Tensor) -> list[torch.Tensor]:
    out = [t.grad.clone() for t in tensors if t is not None]
    for t in tensors:
        if t is not None:
            t.grad = None
    return out


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("chunk", [1, 3, 64])
def test_chunks_give_the_whole_logits_log_probs_entropy_and_gradients_in_float64(bias, chunk):
    torch.manual_seed(0)
    head = nn.Linear(16, 50, bias=bias).double()
    hidden = (torch.randn(10, 16, dtype=torch.float64) * 3).requires_grad_()
    labels = torch.randint(0, 50, (10,))
    upstream = torch.randn(10, dtype=torch.float64)
    expected, expected_entropy = whole_logits(hidden, head, labels)
    (expected * upstream).sum().backward()
    reference = gradients(hidden, head.weight, head.bias)
    log_probs, entropy = fused_log_probs_and_entropy(hidden, head, labels, chunk)
    assert log_probs.dtype == entropy.dtype == torch.float64 and not entropy.requires_grad
    torch.testing.assert_close(log_probs, expected, rtol=0, atol=1e-9)
    torch.testing.assert_close(entropy, expected_entropy, rtol=0, atol=1e-9)
    (log_probs * upstream).sum().backward()
    for mine, theirs in zip(gradients(hidden, head.weight, head.bias), reference, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-9)


def test_the_chunked_function_passes_gradcheck():
    torch.manual_seed(1)
    hidden = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(7, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 6, 3, 3, 1])

    def log_probs(h, w, b):
        return chunked_head._ChunkedHead.apply(h, w, b, labels, 2, None, chunked_head.TORCH_OPS)[0]

    assert torch.autograd.gradcheck(log_probs, (hidden, weight, bias))


def test_a_masked_vocabulary_and_huge_logits_stay_finite():
    head = nn.Linear(2, 6).double()
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[1e4, 0], [1e4, 0], [-1e4, 0], [0, 1], [0, 1], [0, 1]], dtype=torch.float64))
        head.bias.copy_(torch.tensor([0, 0, 0, 0, float("-inf"), float("-inf")], dtype=torch.float64))
    hidden = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64, requires_grad=True)
    log_probs, entropy = fused_log_probs_and_entropy(hidden, head, torch.tensor([0, 3]), chunk=1)
    # two tied logits of 1e4: log-prob log(1/2), entropy log 2; logits (0, 0, 0, 1, -inf, -inf): the label's is 1, and
    # the -inf words add 0, not NaN
    expected = torch.tensor([-math.log(2), 1 - math.log(math.e + 3)], dtype=torch.float64)
    torch.testing.assert_close(log_probs, expected, rtol=0, atol=1e-12)
    assert entropy[0].item() == pytest.approx(0.6931471805599453, abs=1e-12)
    log_probs.sum().backward()
    assert torch.isfinite(hidden.grad).all() and torch.isfinite(head.weight.grad).all()


def test_bfloat16_chunks_match_the_whole_bfloat16_logits():
    torch.manual_seed(2)
    head = nn.Linear(32, 300, bias=False).to(torch.bfloat16)
    hidden = torch.randn(40, 32).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 300, (40,))
    expected, expected_entropy = whole_logits(hidden, head, labels)
    expected.sum().backward()
    reference = gradients(hidden, head.weight)
    log_probs, entropy = fused_log_probs_and_entropy(hidden, head, labels, chunk=16)
    assert log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs.double(), expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy.double(), expected_entropy, rtol=0, atol=1e-5)
    log_probs.sum().backward()
    mine = gradients(hidden, head.weight)
    assert [g.dtype for g in mine] == [torch.bfloat16, torch.bfloat16]
    # bfloat16 gradients: 8 significant bits, and the weight's summed over 3 chunks in bfloat16 (each chunk's
    # product rounded once, as Liger Kernel sums it): within 1% of the largest, where a single product rounds once
    for a, b in zip(mine, reference):
        torch.testing.assert_close(a.float(), b.float(), rtol=0, atol=1e-2 * b.abs().max().item())


def test_the_loss_scale_multiplies_the_logit_gradient_on_both_paths():
    torch.manual_seed(3)
    head = nn.Linear(8, 20).double()
    hidden = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 20, (6,))
    fused_log_probs_and_entropy(hidden, head, labels, chunk=4)[0].sum().backward()
    plain = gradients(hidden, head.weight, head.bias)
    scaled = copy.deepcopy(head)
    scale_gradients(scaled, lambda grad: grad * 1024)
    fused_log_probs_and_entropy(hidden, scaled, labels, chunk=4)[0].sum().backward()
    for a, b in zip(gradients(hidden, scaled.weight, scaled.bias), plain):
        torch.testing.assert_close(a, b * 1024, rtol=1e-12, atol=0)
    logits = scaled(hidden)  # the head run as a module: float32 logits, the same scale in backward
    assert logits.dtype == torch.float32
    torch.log_softmax(logits, dim=-1).gather(-1, labels[:, None]).sum().backward()
    torch.testing.assert_close(scaled.weight.grad, plain[1] * 1024, rtol=1e-5, atol=1e-6)


def test_a_deep_copy_keeps_the_scale_and_a_later_scale_replaces_the_earlier():
    """A model deep-copied after its optimizer set the loss scale (a KL reference, a teacher) runs its head as before,
    scaled; a second scale set on the same head replaces the first rather than multiplying by both."""
    torch.manual_seed(4)
    head = nn.Linear(8, 20).double()
    hidden = torch.randn(6, 8, dtype=torch.float64)
    expected = torch.autograd.grad(head(hidden).sum(), head.weight)[0]
    scale_gradients(head, lambda grad: grad * 4)
    twin = copy.deepcopy(head)
    torch.testing.assert_close(torch.autograd.grad(twin(hidden).sum(), twin.weight)[0], expected * 4)
    scale_gradients(head, lambda grad: grad * 8)
    torch.testing.assert_close(torch.autograd.grad(head(hidden).sum(), head.weight)[0], expected * 8)


def test_chunks_hold_at_most_chunk_bytes_of_float32_logits():
    tokens = chunk_tokens(151936)
    assert tokens % 64 == 0 and tokens * 151936 * 4 <= CHUNK_BYTES < (tokens + 64) * 151936 * 4
    assert chunk_tokens(10**9) == 1 and chunk_tokens(100, chunk_bytes=4 * 100 * 10) == 10


def test_heads_it_cannot_fuse_say_why(tiny_model):
    assert unsupported(nn.Linear(4, 5)) is None
    replayed = nn.Linear(4, 5)
    replayed.forward = lambda x: x  # what the forward tape's replay does to every linear layer
    assert "replaced" in unsupported(replayed)

    class Wrapped(nn.Linear):
        pass

    assert "not a plain nn.Linear" in unsupported(Wrapped(4, 5))


@pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`")  # peft: the head is the tied embedding
def test_a_lora_adapter_on_the_head_scores_through_the_adapter(tiny_model, tokenizer):
    from peft import LoraConfig

    model = copy.deepcopy(tiny_model).double()
    model.add_adapter(LoraConfig(r=2, target_modules=["lm_head"], init_lora_weights=False))
    assert "LoRA" in unsupported(model.get_output_embeddings())
    ids = torch.randint(0, len(tokenizer), (2, 9))
    labels = torch.roll(ids, -1, dims=1)
    out = get_response_log_probs(model, ids, labels, return_token_entropy=True)
    log_softmax = torch.log_softmax(model(ids).logits, dim=-1)
    expected = log_softmax.gather(-1, labels[..., None]).squeeze(-1)
    torch.testing.assert_close(out["log_probs"], expected, atol=1e-9, rtol=0)


def test_a_head_weight_still_sharded_is_left_to_the_module():
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import Shard, distribute_tensor

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        head = nn.Linear(4, 6, bias=False)
        head.weight = nn.Parameter(distribute_tensor(head.weight.detach(), DeviceMesh("cpu", [0]), [Shard(0)]))
        assert "FSDP2 shard" in unsupported(head)
    finally:
        if started:
            dist.destroy_process_group()
