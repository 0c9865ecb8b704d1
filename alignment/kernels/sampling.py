"""A Triton kernel that draws each row's next token from its logits on a GPU, at a temperature, with no nucleus cut.

decoding.choose_tokens draws a token at the row's uniform point by inverting the CDF of softmax(logits / T)
(sample_tokens_at). In torch that is a float32 log-softmax written out, its exp written out, and block sums read back:
by count 18 bytes of memory traffic a logit in bfloat16, 0.7 GB a step at 256 rows of a 151,936-word vocabulary,
about an eighth of what a decode step of the 1.5B model reads. Here one program per row reads its logits twice and
writes nothing but the token and its log-prob (4 bytes a logit):

1. each lane's running max of z / T and its float64 sum of exp(z / T - max), rescaled as the max grows;
2. exp(z / T - max) again, block by block, summed in float64 as in pass 1 (and as sample_tokens_at keeps its CDF),
   so that the point u x total and the running sums it is set against round alike: the token is where the running
   sum first passes the point. A token of probability 0 (-inf, as min_tokens' EOS ban makes) adds nothing to the
   sum, so it is never where the sum passes the point; a point at or past the end by rounding takes the row's last
   token of nonzero probability, as sample_tokens_at's does.

The log-prob is z / T - max - log(total) in float32, as the log-softmax's. A row whose logits hold a NaN or no
finite value (all -inf: fp16 overflow, a vocabulary banned whole) has no distribution: its token is -1 and its
log-prob NaN, which the decode loops report as an error naming the step and the row (decoding.NonFiniteLogits).

Tokens are those sample_tokens_at draws from the same uniforms but where a point falls within rounding of a boundary
between two tokens (the sums are taken in another order); tests/test_sampling_kernel.py runs the kernel in Triton's
interpreter on the CPU against it.
"""

import torch
import triton
import triton.language as tl

from alignment.kernels.support import DTYPES, on_device

BLOCK = 2048  # logits a program holds at once


@triton.jit
def _sample_kernel(logits, uniforms, tokens, log_probs, vocab, row_stride, inverse_temperature, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    start_of_row = logits + row * row_stride
    offsets = tl.arange(0, BLOCK)
    top = tl.full([BLOCK], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK], tl.float64)
    for start in range(0, vocab, BLOCK):
        z = tl.load(start_of_row + start + offsets, mask=start + offsets < vocab, other=float("-inf"))
        z = z.to(tl.float32) * inverse_temperature
        new_top = tl.maximum(top, z)
        shift = tl.where(new_top > float("-inf"), new_top, 0.0)  # a lane of -inf alone keeps a total of 0, not NaN
        total = total * tl.exp(top - shift).to(tl.float64) + tl.exp(z - shift).to(tl.float64)
        top = new_top
    row_top = tl.max(top, axis=0)
    row_total = tl.sum(total * tl.exp(top - row_top).to(tl.float64), axis=0)
    point = tl.load(uniforms + row) * row_total
    running = tl.zeros([], tl.float64)
    chosen = tl.full([], -1, tl.int32)
    last_nonzero = tl.zeros([], tl.int32)
    for start in range(0, vocab, BLOCK):
        columns = start + offsets
        z = tl.load(start_of_row + columns, mask=columns < vocab, other=float("-inf"))
        p = tl.exp(z.to(tl.float32) * inverse_temperature - row_top)
        ends = running + tl.cumsum(p.to(tl.float64), axis=0)  # each token's end in the row's CDF
        block_end = tl.max(ends, axis=0)
        before = tl.sum((ends <= point).to(tl.int32), axis=0)  # tokens of this block that end at or before the point
        chosen = tl.where((chosen < 0) & (block_end > point), start + before, chosen)
        last_nonzero = tl.maximum(last_nonzero, tl.max(tl.where(p > 0, columns, -1), axis=0))
        running = block_end
    chosen = tl.where(chosen < 0, last_nonzero, chosen)
    chosen_logit = tl.load(start_of_row + chosen).to(tl.float32) * inverse_temperature
    # a row with a NaN, or no finite logit, has no distribution to draw from (its total is NaN or 0): token -1
    finite = (row_total > 0) & (row_total < float("inf"))
    tl.store(tokens + row, tl.where(finite, chosen, -1).to(tl.int64))
    tl.store(log_probs + row, chosen_logit - row_top - tl.log(row_total).to(tl.float32))


def draw_rows(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """sample_rows's work: the kernel launched under the logits' device (alignment/kernels/support.py's on_device)."""
    if logits.dtype not in DTYPES or logits.stride(1) != 1 or temperature <= 0:
        raise ValueError(
            f"sample_rows takes (rows, vocab) logits of {DTYPES} with rows contiguous and a temperature above 0, got "
            f"{logits.dtype} logits of strides {logits.stride()} at temperature {temperature}"
        )
    rows, vocab = logits.shape
    tokens = torch.empty(rows, dtype=torch.long, device=logits.device)
    log_probs = torch.empty(rows, dtype=torch.float32, device=logits.device)
    block = min(BLOCK, triton.next_power_of_2(vocab))
    uniforms = uniforms.to(logits.device, torch.float64)
    with on_device(logits):
        _sample_kernel[(rows,)](
            logits, uniforms, tokens, log_probs, vocab, logits.stride(0), 1.0 / temperature, BLOCK=block, num_warps=8
        )
    return tokens, log_probs


# an operator of torch's, so that a decode step on fake tensors (tests/test_static_capture.py) dispatches it as well
@torch.library.custom_op("alignment::sample_rows", mutates_args=())
def sample_rows(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's token drawn from softmax(logits / temperature) at its uniform point, and its log-prob: logits
    (rows, vocab) of DTYPES with rows contiguous, uniforms (rows,) float64 in [0, 1) -> (rows,) int64, (rows,)
    float32; token -1 (log-prob NaN) for a row with a NaN or no finite logit."""
    return draw_rows(logits, uniforms, temperature)


@sample_rows.register_fake
def _(logits: torch.Tensor, uniforms: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    rows = logits.shape[0]
    return logits.new_empty(rows, dtype=torch.long), logits.new_empty(rows, dtype=torch.float32)
