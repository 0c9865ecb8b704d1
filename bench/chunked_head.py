"""The fused LM head (alignment/models/chunked_head.py) against its own matrix products: one forward and backward of
`fused_log_probs_and_entropy` at the handouts' micro-batch (2 x 1,536 tokens, d_model 1,536, a 151,936-word
vocabulary), beside the same four head matmuls alone (the forward, backward's recompute, the hidden states' and the
weight's gradients). What the head adds to its matmuls is its elementwise work over the (tokens x vocab) logits,
which is memory-bound: the bench also reports it as bytes a logit at the measured copy bandwidth. On a GPU it times
that work both ways: Triton's kernels (alignment/kernels/head.py, what a CUDA head takes) and the chain of
torch kernels the CPU takes.

    uv run python bench/chunked_head.py --json              # CUDA when present, bfloat16 under autocast
    uv run python bench/chunked_head.py --tiny --json       # toy sizes on the CPU, in seconds
"""

from functools import partial

import torch
import torch.nn.functional as F
import typer
from torch import nn

from alignment.models.chunked_head import (
    TORCH_OPS,
    ElementwiseOps,
    chunk_tokens,
    elementwise_ops,
    fused_log_probs_and_entropy,
)
from bench.decode_bound import Figures, device_name, measured_bandwidth, timed


def main(
    tokens: int = typer.Option(3072, help="Tokens scored per call (the handouts' micro-batch: 2 x 1,536)."),
    d_model: int = typer.Option(1536, help="Hidden size."),
    vocab: int = typer.Option(151936, help="Vocabulary size."),
    repeats: int = typer.Option(5, help="Timed calls per figure; the best is reported."),
    device: str | None = typer.Option(None, help="Device (default: cuda:0 when present, else cpu)."),
    threads: int | None = typer.Option(None, help="torch threads on the CPU (default: torch's; --tiny: 1)."),
    tiny: bool = typer.Option(False, help="Toy sizes: 256 tokens, hidden 64, vocab 4,096."),
    json_lines: bool = typer.Option(False, "--json", help="Print only JSON lines on stdout, one per figure."),
) -> None:
    if tiny:
        tokens, d_model, vocab = 256, 64, 4096
    dev = torch.device(device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
    if threads or (tiny and dev.type == "cpu"):
        torch.set_num_threads(threads or 1)
    # bfloat16 weights under autocast as bf16-mixed trains on a GPU; float32 on the CPU, as CPU runs train
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    figures = Figures("chunked_head", json_lines, device=device_name(dev), tokens=tokens, vocab=vocab)
    generator = torch.Generator(device=dev).manual_seed(0)
    head = nn.Linear(d_model, vocab, bias=False, device=dev, dtype=dtype)
    nn.init.normal_(head.weight, std=0.02, generator=generator)
    hidden = torch.randn(tokens, d_model, device=dev, dtype=dtype, generator=generator).requires_grad_()
    labels = torch.randint(0, vocab, (tokens,), device=dev, generator=generator)

    def fused(ops: ElementwiseOps) -> int:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            log_probs, entropy = fused_log_probs_and_entropy(hidden, head, labels, ops=ops)
        log_probs.sum().backward()
        hidden.grad = head.weight.grad = None
        return tokens

    def matmuls() -> int:
        chunk = chunk_tokens(vocab)
        grad_weight = torch.zeros_like(head.weight)
        for start in range(0, tokens, chunk):
            part = hidden.detach()[start : start + chunk]
            logits = F.linear(part, head.weight)  # forward
            del logits
            grad_logits = F.linear(part, head.weight)  # backward's recompute, standing in for the logits' gradient
            _ = grad_logits @ head.weight
            grad_weight.addmm_(grad_logits.t(), part)
        return tokens

    bandwidth = measured_bandwidth(dev)
    figures.emit("copy_bandwidth", bandwidth / 1e9, "GB/s")
    kernels = elementwise_ops(hidden)
    paths = {"torch": TORCH_OPS} | ({} if kernels is TORCH_OPS else {"triton": kernels})
    matmuls()  # warm-up: kernels chosen, memory cached
    matmul_s = min(timed(matmuls, dev)[0] for _ in range(repeats))
    figures.emit("matmuls_ms", 1e3 * matmul_s, "ms")
    for name, ops in paths.items():
        fused(ops)  # warm-up (Triton compiles its kernels here)
        fused_s = min(timed(partial(fused, ops), dev)[0] for _ in range(repeats))
        extra = max(fused_s - matmul_s, 0.0)
        figures.emit("fused_ms", 1e3 * fused_s, "ms", ops=name, dtype=str(dtype).removeprefix("torch."))
        figures.emit("elementwise_ms", 1e3 * extra, "ms", ops=name)
        figures.emit("elementwise_bytes_per_logit", extra * bandwidth / (tokens * vocab), "bytes", ops=name)


if __name__ == "__main__":
    typer.run(main)
