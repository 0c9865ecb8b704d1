"""Log-probs and entropy of labels computed with the LM head, a chunk of tokens at a time.

Scoring N tokens over a vocabulary V the plain way makes the (N, V) logits, a float32 copy of them, and in backward
their float32 gradient: at the handouts' microbatch (2 x 1,536 tokens, V = 151,936) each is 1.74 GiB, the largest
tensors of a training step. Here hidden states and the head's weight go in, and each chunk of tokens makes its
logits, reduces them to what is kept (the label's log-prob, the log-sum-exp, the entropy) and frees them before the
next chunk; backward recomputes each chunk's logits from the saved hidden states and the weight (one more head
matmul, a few percent of a step's arithmetic) and turns them into the chunk's gradient at once. What stays between
forward and backward is three floats a token; what exists at once is one chunk's logits and their float32 work
(`chunk_tokens`: at most CHUNK_BYTES of float32 logits). This is Liger Kernel's fused linear cross-entropy idea,
written for the two outputs RL needs: the label's log-prob (differentiable) and the entropy (a metric).

The head must be a plain nn.Linear whose weight is an ordinary tensor, called as itself (`unsupported` says why
not otherwise, and callers then run the head as a module): a peft LoRA wrapper on the head, a head whose module
forward is replaced (the forward tape's replay) and a weight that is still an FSDP2 DTensor shard (outside the
root's forward, where FSDP2 has not gathered it) go the plain way. Inside a sharded root's forward the gathered
weight is an ordinary tensor and its gradient reaches FSDP2's reduce-scatter as the module's would. A tied head is
the embedding's parameter itself, so both uses add into one gradient. fp16-mixed's loss scale (`scale_gradients`)
multiplies each chunk's float32 logit gradient before it is cast to float16, as the plain path's head hook does.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor
from torch.utils.hooks import RemovableHandle

from alignment.kernels.support import kernel_serves

CHUNK_BYTES = 256 * 2**20  # float32 logits of one chunk: 384 tokens at a 151,936-word vocabulary (441 to 64s)

_SCALERS: "WeakKeyDictionary[nn.Module, Callable[[torch.Tensor], torch.Tensor]]" = WeakKeyDictionary()
_HOOKS: "WeakKeyDictionary[nn.Module, RemovableHandle]" = WeakKeyDictionary()


def chunk_tokens(vocab: int, chunk_bytes: int | None = None) -> int:
    """Tokens per chunk: as many as keep one chunk's float32 logits within `chunk_bytes` (default CHUNK_BYTES), a
    multiple of 64 from 64 up (which matrix kernels tile well), at least 1."""
    tokens = max(1, (chunk_bytes or CHUNK_BYTES) // (4 * vocab))
    return tokens - tokens % 64 if tokens >= 64 else tokens


def scale_gradients(head: nn.Module, scale: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Make `scale` (a loss scaler's, float32 tensor -> float32 tensor) multiply the gradient of `head`'s float32
    logits on either path: here for chunks, and as a forward hook when the head runs as a module."""
    _SCALERS[head] = scale
    if head in _HOOKS:  # a later optimizer's scale replaces the earlier one's: never both
        _HOOKS[head].remove()
    # the hook closes over `scale`, so that a deep copy of the model (which copies its hooks) scales as well
    _HOOKS[head] = head.register_forward_hook(lambda module, args, out: _ScaledLogits.apply(out, scale))


class _ScaledLogits(torch.autograd.Function):
    """The head's output in float32; backward, its gradient scaled, then in the head's dtype."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, scale: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        ctx.dtype, ctx.scale = logits.dtype, scale
        return logits.float()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.scale(grad).to(ctx.dtype), None


def unsupported(head: nn.Module) -> str | None:
    """Why `head` cannot be fused here (None: it can)."""
    if type(head) is not nn.Linear:
        return f"the head is a {type(head).__name__}, not a plain nn.Linear (a LoRA adapter on it, or another layer)"
    if "forward" in vars(head):
        return "the head's forward is replaced (the forward tape replays it)"
    if isinstance(head.weight, DTensor):
        return "the head's weight is an FSDP2 shard (score inside the sharded root's forward)"
    return None


def fused_log_probs_and_entropy(
    hidden: torch.Tensor,
    head: nn.Linear,
    labels: torch.Tensor,
    chunk: int | None = None,
    ops: "ElementwiseOps | None" = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log softmax(head(hidden))[label], entropy of softmax(head(hidden))), never holding more than `chunk` tokens'
    logits (default `chunk_tokens`); only the first is differentiable (in `hidden`, the weight and the bias).

    hidden: (tokens, d_model) in the head's dtype; labels: (tokens,) -> (tokens,), (tokens,) in float32 (float64
    for a float64 head). The head must pass `unsupported`. `ops`: the work on each chunk's logits (default
    `elementwise_ops(hidden)`).
    """
    chunk = chunk or chunk_tokens(head.out_features)
    ops = ops or elementwise_ops(hidden)
    if ops is not TORCH_OPS:  # Triton's kernels read each row's label logit unchecked
        from alignment.kernels.head import check_labels

        check_labels(labels, head.out_features)
    return _ChunkedHead.apply(hidden, head.weight, head.bias, labels, chunk, _SCALERS.get(head), ops)


@dataclass(frozen=True)
class ElementwiseOps:
    """What the head does to a chunk's logits: `stats` (logits (c, V), labels (c,) -> label log-probs, log-sum-exps
    and entropies, (c,) each) and `grad` (logits, log-sum-exps, labels, upstream gradient (c,), dtype -> the
    gradient of the label log-probs times the upstream one, (c, V) in dtype), which takes the logits in the
    log-sum-exps' dtype where `float_logits`. Either may overwrite the logits."""

    stats: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    grad: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype], torch.Tensor]
    float_logits: bool


def elementwise_ops(hidden: torch.Tensor) -> ElementwiseOps:
    """Triton's kernels (alignment/kernels/head.py: each logit read twice forward and once backward) for hidden
    states on a GPU where --kernels allows them and they passed their first-use check for the logits' dtype (float16,
    bfloat16 or float32; alignment/kernels/support.py); torch's chain of kernels otherwise."""
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else hidden.dtype  # the logits'
    if hidden.is_cuda and kernel_serves("head", hidden.device, dtype, check_head_kernels):
        from alignment.kernels import head as head_kernels

        return ElementwiseOps(head_kernels.chunk_stats, head_kernels.chunk_grad, float_logits=False)
    return TORCH_OPS


HALF = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3}  # a unit in the last place, relative


def check_head_kernels(device: torch.device, dtype: torch.dtype) -> None:
    """The head's Triton kernels against torch's ops, on `device` for logits of `dtype`: 6 rows of 6,160 words (two
    of their blocks, the last ragged) of several scales, one with -inf words and one with two tied logits of 1e4; the
    stats within the CPU tests' tolerances (rtol 1e-5, atol 2e-5), the gradient in the logits' dtype and in float32
    within a unit in the last place of its dtype. Raises an AssertionError saying what differs."""
    from alignment.kernels import head as head_kernels

    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 6160, generator=generator) * torch.linspace(0.5, 8, 6)[:, None]
    logits[0, 3::7] = float("-inf")
    logits[1, :2] = 1e4
    labels = torch.randint(0, 6160, (6,), generator=generator)
    labels[0], labels[1] = 5, 0
    logits, labels, upstream = logits.to(device, dtype), labels.to(device), torch.linspace(-2, 3, 6, device=device)
    mine = head_kernels.chunk_stats(logits.clone(), labels)
    theirs = TORCH_OPS.stats(logits.to(torch.float32, copy=True), labels)
    for name, a, b in zip(("label log-probs", "log-sum-exps", "entropies"), mine, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=2e-5, msg=lambda m, name=name: f"{name}: {m}")
    for grad_dtype in dict.fromkeys((dtype, torch.float32)):
        expected = TORCH_OPS.grad(logits.to(torch.float32, copy=True), theirs[1], labels, upstream, grad_dtype)
        grad = head_kernels.chunk_grad(logits.clone(), theirs[1], labels, upstream, grad_dtype)
        torch.testing.assert_close(
            grad, expected, rtol=HALF.get(grad_dtype, 1e-5), atol=1e-6, msg=lambda m, d=grad_dtype: f"{d} gradient: {m}"
        )


def _chunk_stats(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A chunk's (label log-prob, log-sum-exp, entropy) from its logits (c, V) -> (c,) each, at least float32.
    Overwrites float32 logits (they are the chunk's own).

    The max is subtracted before exp, so nothing overflows; the entropy is log(total) - sum_v p_v * shifted_v, two
    O(log V) terms that do not cancel. Where a logit is -inf, p_v * shifted_v is 0 * -inf = NaN: the sum skips it
    (nansum), as the word adds 0. Each pass over the (c, V) logits is one kernel, casting half-precision logits to
    float32 as it shifts them and keeping one exp a word: about 38 bytes of memory traffic a logit in half
    precision, where casting, shifting, clamping and multiplying one kernel at a time took 56.
    """
    dtype = torch.promote_types(logits.dtype, torch.float32)
    top = logits.max(dim=-1, keepdim=True).values.to(dtype)
    work = logits.sub_(top) if logits.dtype == dtype else torch.sub(logits, top)  # the latter computes in float32
    chosen = work.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    probs = work.exp()
    total = probs.sum(dim=-1)
    log_total = total.log()
    # an elementwise product, not a matmul: TF32 (--tf32) would round a float32 matmul's inputs to 10 bits
    weighted = work.mul_(probs).nansum(dim=-1)
    return chosen - log_total, top.squeeze(-1) + log_total, log_total - weighted / total


def _chunk_grad(
    logits: torch.Tensor, log_totals: torch.Tensor, labels: torch.Tensor, upstream: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    """d/dz_v of z_label - logsumexp(z), onehot_v - p_v, times each row's upstream gradient, in `dtype`: logits (c, V)
    in log_totals' dtype (at least float32), which it overwrites; log_totals, labels and upstream (c,) -> (c, V).

    A loss scale is linear, so it scales the upstream gradient alone; the probabilities are multiplied by it and cast
    to `dtype` in one kernel and the label's entry is written apart: about 30 bytes of memory traffic a logit in half
    precision."""
    probs = logits.sub_(log_totals[:, None]).exp_()
    upstream = upstream[:, None]
    label_grads = ((1 - probs.gather(-1, labels[:, None])) * upstream).to(dtype)
    if probs.dtype == dtype:
        grad_logits = probs.mul_(-upstream)
    else:
        grad_logits = torch.mul(probs, -upstream, out=torch.empty_like(probs, dtype=dtype))
    return grad_logits.scatter_(-1, labels[:, None], label_grads)


TORCH_OPS = ElementwiseOps(_chunk_stats, _chunk_grad, float_logits=True)


class _ChunkedHead(torch.autograd.Function):
    """hidden @ W^T + b reduced to per-token label log-probs and entropies, chunk by chunk; see the module docs."""

    # under autocast, backward recomputes each chunk's logits in the forward's dtype, so that they match its totals
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        labels: torch.Tensor,
        chunk: int,
        scale: Callable[[torch.Tensor], torch.Tensor] | None,
        ops: ElementwiseOps,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out_dtype = torch.promote_types(hidden.dtype, torch.float32)
        tokens = hidden.shape[0]
        log_probs = torch.empty(tokens, dtype=out_dtype, device=hidden.device)
        log_totals, entropy = torch.empty_like(log_probs), torch.empty_like(log_probs)
        for start in range(0, tokens, chunk):
            part = slice(start, start + chunk)
            logits = F.linear(hidden[part], weight, bias)
            log_probs[part], log_totals[part], entropy[part] = ops.stats(logits, labels[part])
            del logits
        ctx.save_for_backward(hidden, weight, bias, labels, log_totals)
        ctx.chunk, ctx.scale, ctx.ops = chunk, scale, ops
        ctx.mark_non_differentiable(entropy)
        return log_probs, entropy

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx: Any, grad_log_probs: torch.Tensor, _: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, bias, labels, log_totals = ctx.saved_tensors
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        # the weight's gradient is summed chunk by chunk in its own dtype, as Liger Kernel's is (a float32 sum would
        # hold 4 bytes a weight more at the step's peak; each chunk's product is accumulated in float32 inside the
        # matmul and rounded once)
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight) if want_weight else None
        grad_bias = torch.zeros_like(bias) if want_bias else None
        for start in range(0, hidden.shape[0], ctx.chunk):
            part = slice(start, start + ctx.chunk)
            upstream = grad_log_probs[part] if ctx.scale is None else ctx.scale(grad_log_probs[part])
            logits = F.linear(hidden[part], weight, bias)
            if ctx.ops.float_logits:  # a float32 copy that replaces the half-precision logits at once
                logits = logits.to(log_totals.dtype)
            grad_logits = ctx.ops.grad(logits, log_totals[part], labels[part], upstream, weight.dtype)
            del logits
            if grad_hidden is not None:
                grad_hidden[part] = grad_logits @ weight
            if grad_weight is not None:
                grad_weight.addmm_(grad_logits.t(), hidden[part])
            if grad_bias is not None:
                grad_bias += grad_logits.sum(dim=0)
            del grad_logits  # before the next chunk's logits exist
        return grad_hidden, grad_weight, grad_bias, None, None, None, None
