"""Decode throughput of the hf rollout backend against the memory-bandwidth bound (bench/decode_bound.py): our eager
loop, our static path (captured as CUDA graphs on CUDA; alignment/rollout/static_decoding.py) and, on the same batch,
transformers' own `generate` with its static cache and torch.compile (the peer number).

    uv run python bench/hf_generation_throughput.py                   # 1.5B shape: 256 and 64 rows x 512 new tokens
    uv run python bench/hf_generation_throughput.py --tiny --json     # toy sizes, seconds on a CPU; JSON lines

A Qwen2.5-Math-1.5B-shaped model (hidden 1536, 28 layers, 12 heads, 2 KV heads, MLP 8960, vocab 151936, tied
embeddings) with random weights (bfloat16 on a GPU, float32 on the CPU) and a synthetic word-level tokenizer over
the same vocabulary: nothing is downloaded. Every row samples to the full length (min_tokens = max_tokens) at
temperature 1, top_p 1. Paths:
- eager: HFRolloutEngine --decode eager, after an 8 x 8 warm-up call;
- static: HFRolloutEngine --decode static; its first call of a shape captures the graphs (timed apart, figure
  static_first_call_s), the second is timed;
- generate: transformers' generate, dynamic cache (no compile);
- generate_compiled: generate with cache_implementation="static", which transformers compiles (torch.compile,
  mode reduce-overhead) on CUDA only. It runs in a child process given --compile-timeout seconds for its compiling
  first call and as many for the timed one; past that it is killed and reported as not finished.
With --json stdout carries only JSON lines, one per figure ({"figure": "hf_generation_throughput.<name>", "value",
"unit", and the context: path, rows, new_tokens, device...}); a figure that cannot be measured has value null and a
reason.
"""

import multiprocessing
import queue
from enum import Enum

import torch
import typer
from transformers import Qwen2Config, Qwen2ForCausalLM

from alignment.grpo.synthetic import QWEN_MATH_15B, TINY
from alignment.models.synthetic_tokenizer import word_tokenizer
from alignment.rollout.hf_engine import HFRolloutEngine, kv_cache_bytes_per_token
from alignment.rollout.interface import SamplingConfig
from bench.decode_bound import (
    SPAN_MULTIPLE_OPTION,
    SYNC_EVERY_OPTION,
    Bound,
    Figures,
    device_name,
    measured_bandwidth,
    sync,
    timed,
)


class DecodePath(str, Enum):
    eager = "eager"
    static = "static"
    generate = "generate"
    generate_compiled = "generate_compiled"


def build(shape: dict, device: torch.device) -> tuple[Qwen2ForCausalLM, object]:
    """The random model (seed 0) and the synthetic tokenizer: the same weights in every process."""
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**shape))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return model.to(device, dtype).eval(), word_tokenizer(shape["vocab_size"])


def prompts_of(rows: int, prompt_tokens: int, vocab: int) -> list[str]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (rows, prompt_tokens), generator=generator)
    return [" ".join(f"t{i}" for i in row) for row in ids.tolist()]


@torch.inference_mode()
def generate_tokens(model, tokenizer, texts: list[str], new_tokens: int, compiled: bool) -> int:
    batch = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left").to(model.device)
    torch.manual_seed(0)
    out = model.generate(
        **batch,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        **({"cache_implementation": "static"} if compiled else {"disable_compile": True}),
    )
    return (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]


def compiled_child(shape: dict, device: str, texts: list[str], new_tokens: int, results) -> None:
    """In a child process: generate_compiled's compiling first call, then its timed call, each result put on
    `results` as it comes."""
    try:
        dev = torch.device(device)
        model, tokenizer = build(shape, dev)
        results.put(("first", *timed(lambda: generate_tokens(model, tokenizer, texts, new_tokens, True), dev)))
        results.put(("timed", *timed(lambda: generate_tokens(model, tokenizer, texts, new_tokens, True), dev)))
    except Exception as err:  # noqa: BLE001 (reported as the figure's reason)
        results.put(("error", repr(err), 0))


def time_compiled(shape: dict, device: torch.device, texts: list[str], new_tokens: int, timeout: float):
    """(first call s, timed call s, tokens) of generate_compiled, or a reason it has none."""
    if device.type != "cuda":
        return "transformers compiles generate's static-cache forward on CUDA only (its auto-compile criteria)"
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=compiled_child, args=(shape, str(device), texts, new_tokens, results))
    child.start()
    got = {}
    try:
        for stage in ("first", "timed"):
            kind, seconds, tokens = results.get(timeout=timeout)
            if kind == "error":
                return f"generate failed: {seconds}"
            got[stage] = (seconds, tokens)
    except queue.Empty:
        stage = "compiling first call" if not got else "timed call"
        return f"did not finish: its {stage} took longer than --compile-timeout {timeout:.0f} s"
    finally:
        child.kill()
        child.join()
    return got["first"][0], got["timed"][0], got["timed"][1]


def main(
    rows: list[int] = typer.Option([256, 64], help="Batch sizes (prompts, one sample each) to time (repeatable)."),
    prompt_tokens: int = typer.Option(64, help="Tokens per prompt."),
    new_tokens: int = typer.Option(512, help="Tokens sampled per row."),
    paths: list[DecodePath] = typer.Option(
        [DecodePath.eager, DecodePath.static, DecodePath.generate_compiled], help="Paths to time (repeatable)."
    ),
    device: str | None = typer.Option(None, help="Device (default: cuda:0 when present, else cpu)."),
    layers: int | None = typer.Option(None, help="Layers of the model (default: the shape's)."),
    sync_every: int = SYNC_EVERY_OPTION,
    span_multiple: int = SPAN_MULTIPLE_OPTION,
    compile_timeout: float = typer.Option(300.0, help="Seconds generate_compiled's child gets per call."),
    repeats: int = typer.Option(1, help="Timed calls per figure of eager, static and generate; the best counts."),
    threads: int | None = typer.Option(None, help="torch threads on the CPU (default: torch's; --tiny: 1)."),
    tiny: bool = typer.Option(False, help="Toy sizes (2 layers, hidden 64, vocab 4096; 8 and 4 rows x 32 tokens)."),
    json_lines: bool = typer.Option(False, "--json", help="Print only JSON lines on stdout, one per figure."),
) -> None:
    dev = torch.device(device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
    shape = dict(TINY if tiny else QWEN_MATH_15B)
    if tiny:
        rows, prompt_tokens, new_tokens, threads = [8, 4], 16, 32, threads or 1
    if threads:
        torch.set_num_threads(threads)
    if layers is not None:
        shape["num_hidden_layers"] = layers
    figures = Figures("hf_generation_throughput", json_lines, device=device_name(dev))
    model, tokenizer = build(shape, dev)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = measured_bandwidth(dev)
    figures.emit("copy_bandwidth", bandwidth / 1e9, "GB/s")
    figures.note(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; weights {weight_bytes / 2**30:.2f} GiB "
        f"({model.dtype})"
    )
    engines = {
        path: HFRolloutEngine(model, tokenizer, progress=False, decode=path, sync_every=sync_every)
        for path in ("eager", "static")
    }
    engines["static"].static_decoder().span_multiple = span_multiple
    engines["eager"].generate(prompts_of(8, 8, shape["vocab_size"]), 1, SamplingConfig(max_tokens=8, stop=(), seed=0))
    for count in rows:
        texts = prompts_of(count, prompt_tokens, shape["vocab_size"])
        bound = Bound(count, prompt_tokens, new_tokens, weight_bytes, kv_cache_bytes_per_token(model), bandwidth)
        context = {"rows": count, "new_tokens": new_tokens, "prompt_tokens": prompt_tokens}
        figures.emit(
            "bound", bound.tokens_per_s, "tokens/s", **context, mean_kv_gib=round(bound.mean_kv_bytes / 2**30, 3)
        )
        sampling = SamplingConfig(max_tokens=new_tokens, min_tokens=new_tokens, stop=(), seed=0)
        for path in paths:
            path_context = context | {"path": path.value}
            if path is DecodePath.generate_compiled:
                measured = time_compiled(shape, dev, texts, new_tokens, compile_timeout)
                if isinstance(measured, str):
                    figures.emit("tokens_per_s", None, "tokens/s", **path_context, reason=measured)
                    continue
                first, seconds, tokens = measured
                figures.emit("compiled_first_call_s", first, "s", **path_context)
            else:
                if path is DecodePath.generate:
                    run = lambda: generate_tokens(model, tokenizer, texts, new_tokens, False)  # noqa: E731
                else:
                    engine = engines[path.value]
                    run = lambda: sum(len(r.token_ids) for r in engine.generate(texts, 1, sampling))  # noqa: E731, B023
                if path is DecodePath.static:
                    first, _ = timed(run, dev)  # captures this shape's graphs
                    figures.emit("static_first_call_s", first, "s", **path_context, captured=dev.type == "cuda")
                seconds, tokens = min(timed(run, dev) for _ in range(repeats))
            if tokens != count * new_tokens:
                raise RuntimeError(f"{path.value} generated {tokens} tokens, expected {count * new_tokens}")
            extra = (
                {"captured": dev.type == "cuda", "span_multiple": span_multiple} if path is DecodePath.static else {}
            )
            figures.emit(
                "tokens_per_s", tokens / seconds, "tokens/s", **path_context, seconds=round(seconds, 3), **extra
            )
            figures.emit("percent_of_bound", 100 * tokens / seconds / bound.tokens_per_s, "%", **path_context)
        if dev.type == "cuda":
            figures.note(f"peak memory {torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB")
            engines["static"].static_decoder().release()  # the next batch size allocates its own slots
            sync(dev)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    typer.run(main)
