"""The CPU-side changes behind the GRPO step's train and rollout phases, each measured in isolation.

    uv run python bench/cpu_kernels.py [--long]

1. attention: transformers' masked sdpa (key/value heads copied out to every query head) vs
alignment.models.gqa_attention
   (enable_gqa), one layer at the SmolLM2-135M decode shape: 32 rows, 9 query / 3 key-value heads, 77 cached tokens.
2. log-probs + entropy of 1024 response tokens over SmolLM2's 49152-token vocabulary, forward and backward:
   log_probs_of_labels + compute_entropy vs label_log_probs_and_entropy, seconds and peak resident memory.
3. allocator: allocate-and-fill a 64 MiB tensor, 20 times, under glibc's defaults vs retain_freed_memory().
4. sampling one token per row of 32 x 49152 probabilities: a float64 running sum over the whole vocabulary
   (the previous sample_tokens) vs the two-level inverse CDF of alignment.rollout.decoding.sample_tokens.
5. scoring one demo microbatch (2 prompts of 42 tokens, 4 responses of 32 each) with SmolLM2-135M, forward and
   backward, the prompts shared: a prompt pass and a suffix pass on its KV cache vs one block-causal packed pass
   (alignment.grpo.shared_prompt), 12 alternating rounds of 2 calls each, the first round dropped.
6. with --long: the hf backend sampling 8 x 1024 tokens from SmolLM2-135M (float32), with transformers'
   DynamicCache vs alignment.rollout.reserved_cache.ReservedCache (about 3.5 minutes).
7. the linear layers of one decode step at SmolLM2-135M's shapes (30 layers x 7 and the 49152-wide head, 32 rows,
   random weights): F.linear (x @ W^T) vs alignment.rollout.decoding.few_rows_linear (W @ x^T, made contiguous).
8. the weight gradients of one demo train phase at those shapes (4 microbatches of 344 tokens, 256 response tokens
   at the head): a new gradient per microbatch added into .grad, as autograd does, vs addmm_ into .grad in place
   (alignment.rollout.forward_tape's replayed linear).
9. the tied embedding's gradient over those 4 microbatches: autograd's dense zero-filled (49152, 576) gradient
   per microbatch added into .grad vs index_add_ into .grad at the rows used (alignment.rollout.forward_tape).
Cases 7-9 alternate their two ways over 7 rounds and report medians of the last 6.
Cases 2 and 3 each run in a fresh interpreter (peak memory and malloc settings are per process).
"""

import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
import typer
from transformers import DynamicCache

import alignment.grpo.shared_prompt as shared_prompt
import alignment.rollout.hf_engine as engine_module
from alignment.grpo.shared_prompt import packing_pays, shared_prompt_log_probs
from alignment.models.loading import SMOLLM2, load_model_and_tokenizer
from alignment.rollout.decoding import few_rows_linear, sample_tokens
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.reserved_cache import ReservedCache

CHILD = """
import resource, statistics, sys, time
import torch
case = sys.argv[1]
if case in ("fused", "separate"):
    from alignment.logprobs import compute_entropy, label_log_probs_and_entropy, log_probs_of_labels
    torch.manual_seed(0)
    logits, labels = torch.randn(1024, 49152, requires_grad=True), torch.randint(0, 49152, (1024,))
    before, times = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, []
    for _ in range(5):
        start = time.perf_counter()
        if case == "fused":
            log_probs, entropy = label_log_probs_and_entropy(logits, labels)
        else:
            log_probs = log_probs_of_labels(logits, labels)
            with torch.no_grad():
                entropy = compute_entropy(logits)
        log_probs.sum().backward()
        times.append(time.perf_counter() - start)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(f"{statistics.median(times):.3f} {peak:.0f}")
else:
    from alignment.run.cpu_allocator import retain_freed_memory
    if case == "retain":
        retain_freed_memory()
    times = []
    for _ in range(20):
        start = time.perf_counter()
        x = torch.ones(16 * 2**20)
        times.append(time.perf_counter() - start)
        del x
    print(f"{statistics.median(times[1:]) * 1e3:.1f}")
"""


def child(case: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, case], capture_output=True, text=True, check=True
    ).stdout.split()


def attention_us(grouped: bool, repeats: int = 300) -> float:
    torch.manual_seed(0)
    query, key, value = torch.randn(32, 9, 1, 64), torch.randn(32, 3, 77, 64), torch.randn(32, 3, 77, 64)
    mask = torch.ones(32, 1, 1, 77, dtype=torch.bool)
    mask[:8, ..., :6] = False  # left padding

    def run() -> torch.Tensor:
        if grouped:
            return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, enable_gqa=True)
        k, v = (t.repeat_interleave(3, dim=1) for t in (key, value))  # what transformers' repeat_kv copies
        return F.scaled_dot_product_attention(query, k, v, attn_mask=mask)

    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        samples.append((time.perf_counter() - start) / repeats * 1e6)
    return statistics.median(samples)


def sampling_ms(two_level: bool, repeats: int = 50) -> float:
    torch.manual_seed(0)
    probs, generator = torch.softmax(torch.randn(32, 49152) * 3, dim=-1), torch.Generator().manual_seed(0)

    def one_level() -> torch.Tensor:
        cdf = probs.double().cumsum(dim=-1)
        point = torch.rand((32, 1), generator=generator, dtype=torch.float64) * cdf[:, -1:]
        return torch.searchsorted(cdf, point, right=True).squeeze(-1)

    run = (lambda: sample_tokens(probs, generator)) if two_level else one_level
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats * 1e3


def shared_prompt_s() -> tuple[float, float]:
    """Median seconds of one forward + backward of the demo microbatch: (cached, packed)."""
    model, _ = load_model_and_tokenizer(SMOLLM2, "cpu")
    model.train()
    torch.manual_seed(0)
    prompts, responses = torch.randint(100, 40000, (2, 42)), torch.randint(100, 40000, (8, 32))
    ids = torch.cat([prompts.repeat_interleave(4, dim=0), responses], dim=1)  # (8, 74)
    labels = torch.cat([ids[:, 1:], ids[:, :1]], dim=1)
    response = torch.zeros_like(ids, dtype=torch.bool)
    response[:, 41:73] = True
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for round_ in range(12):
            for packed in (False, True):
                shared_prompt.packing_pays = (lambda *args: True) if packed else (lambda *args: False)
                for _ in range(2):
                    start = time.perf_counter()
                    out = shared_prompt_log_probs(model, ids, labels, response, return_token_entropy=True)
                    (out["log_probs"].sum() + out["token_entropy"].sum()).backward()
                    if round_:
                        times[packed].append(time.perf_counter() - start)
                model.zero_grad(set_to_none=True)
    finally:
        shared_prompt.packing_pays = packing_pays
    return statistics.median(times[False]), statistics.median(times[True])


def long_decode_s(cache_kind: str) -> float:
    model, tokenizer = load_model_and_tokenizer(SMOLLM2, "cpu")
    engine = HFRolloutEngine(model.eval(), tokenizer, progress=False)
    if cache_kind == "dynamic":
        engine_module.ReservedCache = lambda reserve: DynamicCache()  # what the sampler used before
    sampling = SamplingConfig(temperature=1.0, max_tokens=1024, min_tokens=1024, seed=0)
    try:
        start = time.perf_counter()
        engine.generate(["Write a long story about a dragon."], 8, sampling)
        return time.perf_counter() - start
    finally:
        engine_module.ReservedCache = ReservedCache


# SmolLM2-135M's linear layers, (out, in) and count per layer: q, k, v, o, gate, up, down; then the tied head
LAYER_SHAPES = [((576, 576), 2), ((192, 576), 2), ((1536, 576), 2), ((576, 1536), 1)]
HEAD = (49152, 576)


def alternating(ways: dict[str, Callable[[], object]], rounds: int = 7) -> dict[str, float]:
    """Median seconds of each way, run in turn each round; the first round is left out."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(rounds):
        for name, run in ways.items():
            start = time.perf_counter()
            run()
            if round_:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def decode_linears_ms() -> dict[str, float]:
    torch.manual_seed(0)
    weights = [torch.randn(shape) * 0.02 for shape, count in LAYER_SHAPES for _ in range(30 * count)]
    weights.append(torch.randn(HEAD) * 0.02)
    inputs = {n: torch.randn(32, 1, n) for n in (576, 1536)}
    ways = {
        "x @ W^T": lambda: [F.linear(inputs[w.shape[1]], w) for w in weights],
        "W @ x^T": lambda: [few_rows_linear(inputs[w.shape[1]], w, None) for w in weights],
    }
    return {name: s * 1e3 for name, s in alternating(ways).items()}


def weight_gradients_s() -> dict[str, float]:
    torch.manual_seed(0)
    layers = [(shape, 344) for shape, count in LAYER_SHAPES for _ in range(30 * count)] + [(HEAD, 256)]
    parts = [
        [(torch.randn(tokens, shape[0]), torch.randn(tokens, shape[1])) for _ in range(4)] for shape, tokens in layers
    ]

    def new_then_add() -> None:
        for microbatches in parts:
            grad = None
            for g, x in microbatches:
                new = g.t() @ x
                grad = new if grad is None else grad.add_(new)

    def in_place() -> None:
        for microbatches in parts:
            grad = None
            for g, x in microbatches:
                grad = g.t() @ x if grad is None else grad.addmm_(g.t(), x)

    return alternating({"new + add": new_then_add, "addmm_ in place": in_place})


def embedding_gradient_ms() -> dict[str, float]:
    torch.manual_seed(0)
    weight = torch.randn(HEAD, requires_grad=True)
    parts = [(torch.randint(0, HEAD[0], (344,)), torch.randn(344, HEAD[1])) for _ in range(4)]

    def dense() -> None:
        weight.grad = None
        for ids, g in parts:
            F.embedding(ids, weight).backward(g)

    def in_place() -> None:
        weight.grad = None
        for ids, g in parts:
            if weight.grad is None:
                weight.grad = torch.zeros_like(weight)
            weight.grad.index_add_(0, ids, g)

    return {name: s * 1e3 for name, s in alternating({"dense": dense, "index_add_ in place": in_place}).items()}


def main(long: bool = False) -> None:
    print(
        f"attention, one layer, one decode step: sdpa with repeat_kv {attention_us(False):.0f} us, "
        f"sdpa_gqa {attention_us(True):.0f} us"
    )
    (sep_s, sep_mib), (fused_s, fused_mib) = child("separate"), child("fused")
    print(
        f"log-probs + entropy, 1024 x 49152, forward + backward: separate {float(sep_s):.3f} s (+{sep_mib} MiB peak), "
        f"fused {float(fused_s):.3f} s (+{fused_mib} MiB peak)"
    )
    print(
        f"allocate + fill 64 MiB: glibc defaults {child('default')[0]} ms, retain_freed_memory {child('retain')[0]} ms"
    )
    print(
        f"sample 32 rows of 49152: one-level float64 CDF {sampling_ms(False):.2f} ms, two-level "
        f"{sampling_ms(True):.2f} ms"
    )
    cached, packed = shared_prompt_s()
    print(
        f"demo microbatch, forward + backward: prompt pass + cached suffix pass {cached:.3f} s, packed {packed:.3f} s"
    )
    decode = decode_linears_ms()
    print(
        "one decode step's linear layers, 32 rows: "
        f"x @ W^T {decode['x @ W^T']:.1f} ms, W @ x^T {decode['W @ x^T']:.1f} ms"
    )
    grads = weight_gradients_s()
    print(
        "weight gradients of 4 microbatches: "
        f"new + add {grads['new + add']:.2f} s, addmm_ in place {grads['addmm_ in place']:.2f} s"
    )
    embedding = embedding_gradient_ms()
    print(
        f"embedding gradient of 4 microbatches: dense {embedding['dense']:.0f} ms, index_add_ in place "
        f"{embedding['index_add_ in place']:.0f} ms"
    )
    if long:
        dynamic, reserved = long_decode_s("dynamic"), long_decode_s("reserved")
        print(
            f"hf backend, 8 x 1024 tokens: DynamicCache {dynamic:.1f} s ({8192 / dynamic:.1f} tokens/s), "
            f"ReservedCache {reserved:.1f} s ({8192 / reserved:.1f} tokens/s)"
        )
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()}, python "
        f"{platform.python_version()}"
    )


if __name__ == "__main__":
    typer.run(main)
