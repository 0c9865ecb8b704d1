"""Decode throughput of our TransformerLM's sampler against the memory-bandwidth bound (bench/decode_bound.py): the
eager loop over its KV cache, the static path (captured as CUDA graphs on CUDA; alignment/rollout/static_decoding.py),
and on request the sampler without a cache and transformers' generate on the same weights.

    uv run python bench/lm_sampler.py                     # the 1.5B shape: 256 and 64 rows x 512 new tokens
    uv run python bench/lm_sampler.py --tiny --json       # toy sizes, seconds on a CPU; JSON lines
    uv run python bench/lm_sampler.py --model smollm2-135m --rows 4 --new-tokens 64 --new-tokens 128 \\
        --paths eager --paths no_cache --paths generate --repeats 3 --device cpu   # SmolLM2's weights, on the CPU

Default model: our TransformerLM of Qwen2.5-Math-1.5B's shape (hidden 1536, 28 layers, 12 heads, 2 KV heads, MLP
8960, vocab 151936, tied embeddings; it has no q/k/v biases), random weights (normal, std 0.02; bfloat16 on a GPU,
float32 on the CPU), a synthetic word-level tokenizer. --model takes one of our folders, an HF Llama folder or
smollm2-135m instead, prompted with a few sentences. Every row samples to the full length (min_tokens = max_tokens)
at temperature 1, top_p 1, seed 0 (with --until-eos rows end at EOS instead, as rollouts do). Paths:
- eager: the sampler with its KV cache, after a short warm-up call;
- static: the static path; the first call of a shape captures the graphs (figure static_first_call_s), the second
  is timed;
- no_cache: every step re-runs the whole sequence (quadratic; small sizes only);
- generate: transformers' generate (dynamic cache) on a LlamaForCausalLM holding the same weights; it computes no
  log-probs.
Each figure is the best of --repeats timed calls. With --json stdout carries only JSON lines ({"figure":
"lm_sampler.<name>", "value", "unit", and the context: path, rows, new_tokens, device...}).
"""

from enum import Enum

import torch
import typer
from transformers import LlamaForCausalLM

from alignment.grpo.synthetic import random_lm
from alignment.models.lm_checkpoint import llama_config, load_transformer_lm
from alignment.models.synthetic_tokenizer import word_tokenizer
from alignment.models.transformer_lm import TransformerConfig, to_llama_state_dict
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_engine import kv_cache_bytes_per_token
from alignment.rollout.lm_sampler import sample, static_decoder
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

SHAPE_15B = TransformerConfig(
    vocab_size=151936, d_model=1536, n_layers=28, n_heads=12, n_kv_heads=2, d_ff=8960, rope_theta=10000.0
)
TINY = TransformerConfig(vocab_size=4096, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128)
SENTENCES = (
    "Write a short story that includes the words: apple, river.",
    "Describe a walk through town.",
    "The capital of France is",
    "List three things you can do with a lantern, a compass and a map on a rainy afternoon in the hills.",
)


class SamplerPath(str, Enum):
    eager = "eager"
    static = "static"
    no_cache = "no_cache"
    generate = "generate"


def main(
    model: str | None = typer.Option(
        None, help="One of our folders, an HF Llama folder or smollm2-135m (default: random weights of the 1.5B shape)."
    ),  # fmt: skip
    rows: list[int] = typer.Option([256, 64], help="Batch sizes (prompts, one sample each) to time (repeatable)."),
    prompt_tokens: int = typer.Option(64, help="Tokens per prompt (random weights only)."),
    new_tokens: list[int] = typer.Option([512], help="Tokens sampled per row (repeatable)."),
    paths: list[SamplerPath] = typer.Option(
        [SamplerPath.eager, SamplerPath.static], help="Paths to time (repeatable)."
    ),
    repeats: int = typer.Option(1, help="Timed calls per figure; the best is reported."),
    device: str | None = typer.Option(None, help="Device (default: cuda:0 when present, else cpu)."),
    layers: int | None = typer.Option(None, help="Layers of the random model (default: the shape's)."),
    sync_every: int = SYNC_EVERY_OPTION,
    span_multiple: int = SPAN_MULTIPLE_OPTION,
    until_eos: bool = typer.Option(
        False, help="Rows end at EOS (min_tokens 0; --model's chat template on the prompts) instead of at full length."
    ),
    threads: int | None = typer.Option(None, help="torch threads on the CPU (default: torch's; --tiny: 1)."),
    tiny: bool = typer.Option(False, help="Toy sizes (2 layers, hidden 64, vocab 4096; 8 and 4 rows x 32 tokens)."),
    json_lines: bool = typer.Option(False, "--json", help="Print only JSON lines on stdout, one per figure."),
) -> None:
    dev = torch.device(device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
    if tiny:
        rows, prompt_tokens, new_tokens, threads = [8, 4], 16, [32], threads or 1
    if threads:
        torch.set_num_threads(threads)
    figures = Figures("lm_sampler", json_lines, device=device_name(dev))
    if model is None:
        config = TINY if tiny else SHAPE_15B
        if layers is not None:
            config = TransformerConfig(**{**config.__dict__, "n_layers": layers})
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        lm, tokenizer = random_lm(config, dev, dtype), word_tokenizer(config.vocab_size)
        generator = torch.Generator().manual_seed(1)

        def prompts(count: int) -> list[list[int]]:
            return torch.randint(3, config.vocab_size, (count, prompt_tokens), generator=generator).tolist()
    else:
        lm, tokenizer = load_transformer_lm(model, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32)

        def prompts(count: int) -> list[list[int]]:
            texts = [SENTENCES[i % len(SENTENCES)] for i in range(count)]
            if until_eos:
                texts = [
                    tokenizer.apply_chat_template(
                        [{"role": "user", "content": t}], tokenize=False, add_generation_prompt=True
                    )
                    for t in texts
                ]
            return tokenizer(texts)["input_ids"]

    eos_ids = [tokenizer.eos_token_id]
    weight_bytes = sum(p.numel() * p.element_size() for p in lm.parameters())
    bandwidth = measured_bandwidth(dev)
    figures.emit("copy_bandwidth", bandwidth / 1e9, "GB/s")
    figures.note(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; weights {weight_bytes / 2**30:.2f} GiB"
    )
    decoder = static_decoder(lm, sync_every)
    decoder.span_multiple = span_multiple
    reference = None
    if SamplerPath.generate in paths:  # transformers' Llama holding the same weights
        reference = LlamaForCausalLM(llama_config(lm.config)).to(dev, lm.embed.weight.dtype).eval()
        reference.load_state_dict(to_llama_state_dict(lm), strict=not lm.config.tie_embeddings)

    def ours(prompt_ids: list[list[int]], length: int, path: SamplerPath) -> int:
        sampling = SamplingConfig(max_tokens=length, min_tokens=0 if until_eos else length, stop=(), seed=0)
        generator = torch.Generator(device=dev).manual_seed(0)
        static = decoder if path is SamplerPath.static else None
        rollouts = sample(lm, tokenizer, prompt_ids, 1, sampling, eos_ids, generator, path is not SamplerPath.no_cache,
                          static=static)  # fmt: skip
        return sum(len(r.token_ids) for r in rollouts)

    @torch.inference_mode()
    def generate(prompt_ids: list[list[int]], length: int) -> int:
        width = max(len(p) for p in prompt_ids)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in prompt_ids], device=dev)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=dev)
        torch.manual_seed(0)
        out = reference.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
            max_new_tokens=length, min_new_tokens=length, pad_token_id=0, disable_compile=True,
        )  # fmt: skip
        return (out.shape[1] - width) * out.shape[0]

    ours(prompts(2), 4, SamplerPath.eager)  # warm-up: first calls pay one-time costs
    for count in rows:
        prompt_ids = prompts(count)
        width = max(len(p) for p in prompt_ids)
        for length in new_tokens:
            bound = Bound(count, width, length, weight_bytes, kv_cache_bytes_per_token(lm), bandwidth)
            context = {"rows": count, "new_tokens": length, "prompt_tokens": width}
            figures.emit("bound", bound.tokens_per_s, "tokens/s", **context)
            for path in paths:
                path_context = context | {"path": path.value}
                if path is SamplerPath.generate:
                    run = lambda: generate(prompt_ids, length)  # noqa: E731, B023
                else:
                    run = lambda: ours(prompt_ids, length, path)  # noqa: E731, B023
                if path is SamplerPath.static:
                    first, _ = timed(run, dev)  # captures this shape's graphs
                    figures.emit("static_first_call_s", first, "s", **path_context, captured=dev.type == "cuda")
                seconds, tokens = min(timed(run, dev) for _ in range(repeats))
                if tokens != count * length and not until_eos:
                    raise RuntimeError(f"{path.value} generated {tokens} tokens, expected {count * length}")
                extra = (
                    {"captured": dev.type == "cuda", "span_multiple": span_multiple}
                    if path is SamplerPath.static
                    else {}
                )
                figures.emit("tokens_per_s", tokens / seconds, "tokens/s", **path_context, seconds=round(seconds, 3),
                             tokens=tokens, **extra)  # fmt: skip
                figures.emit("percent_of_bound", 100 * tokens / seconds / bound.tokens_per_s, "%", **path_context)
        if dev.type == "cuda":
            figures.note(f"peak memory {torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB")
            decoder.release()  # the next batch size allocates its own slots
            sync(dev)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    typer.run(main)
