"""Generation throughput of the hf rollout backend against the GPU's memory-bandwidth bound.

    uv run python bench/hf_generation_throughput.py            # defaults: 256 prompts x 1024 new tokens

A Qwen2.5-Math-1.5B-shaped model (hidden 1536, 28 layers, 12 heads, 2 KV heads, MLP 8960, vocab 151936,
tied embeddings) with random bf16 weights, and a synthetic word-level tokenizer over the same vocabulary,
so nothing is downloaded. min_tokens = max_tokens forces every sequence to the full length.

Bound: each decode step must read every weight once plus the live KV cache, so
    tokens/s <= batch / ((weight_bytes + mean_kv_bytes) / bandwidth),
with the bandwidth measured here by a large device-to-device copy.
"""

import time

import torch
import typer
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from alignment.rollout.hf_engine import HFRolloutEngine, kv_cache_bytes_per_token
from alignment.rollout.interface import SamplingConfig

QWEN25_MATH_15B = dict(
    hidden_size=1536,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    intermediate_size=8960,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    specials = ["<unk>", "<eos>", "<pad>"]  # bracketed: an added token like "t1" would also match inside "t17"
    vocab = {name: i for i, name in enumerate(specials)} | {f"t{i}": i for i in range(len(specials), vocab_size)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>")


def measured_bandwidth(device: torch.device, gib: int = 4) -> float:
    """Bytes per second of a device-to-device copy (read + write counted)."""
    src = torch.empty(gib * 2**30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    torch.cuda.synchronize(device)
    return 2 * 5 * src.numel() / (time.perf_counter() - start)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(
    prompts: int = 256,
    prompt_tokens: int = 64,
    new_tokens: int = 1024,
    device: str = "cuda:0",
    layers: int = 28,  # fewer only for a smoke run on CPU
) -> None:
    torch.manual_seed(0)
    dev = torch.device(device)
    config = Qwen2Config(**QWEN25_MATH_15B | {"num_hidden_layers": layers})
    model = Qwen2ForCausalLM(config).to(dev, torch.bfloat16 if dev.type == "cuda" else torch.float32).eval()
    tokenizer = word_tokenizer(QWEN25_MATH_15B["vocab_size"])
    engine = HFRolloutEngine(model, tokenizer)
    texts = [" ".join(f"t{torch.randint(3, 151936, ()).item()}" for _ in range(prompt_tokens)) for _ in range(prompts)]
    sampling = SamplingConfig(max_tokens=new_tokens, min_tokens=new_tokens, stop=(), seed=0)
    engine.generate(texts[:8], 1, SamplingConfig(max_tokens=8, min_tokens=8, stop=(), seed=0))  # warm-up
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    sync(dev)
    start = time.perf_counter()
    rollouts = engine.generate(texts, 1, sampling)
    sync(dev)
    seconds = time.perf_counter() - start
    generated = sum(len(r.token_ids) for r in rollouts)
    rows = engine.batch_size_for(prompt_tokens + new_tokens)
    batch = min(rows, prompts)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    mean_kv = batch * (prompt_tokens + new_tokens / 2) * kv_cache_bytes_per_token(model)
    print(
        f"{prompts} prompts x {new_tokens} new tokens (batch {batch}): {generated} tokens in {seconds:.1f}s = "
        f"{generated / seconds:,.0f} tokens/s"
    )
    print(f"weights {weight_bytes / 2**30:.2f} GiB; mean KV cache {mean_kv / 2**30:.2f} GiB; torch {torch.__version__}")
    if dev.type != "cuda":
        return
    bandwidth = measured_bandwidth(dev)
    bound = batch / ((weight_bytes + mean_kv) / bandwidth)
    print(
        f"device: {torch.cuda.get_device_name(dev)}; peak memory {torch.cuda.max_memory_allocated(dev) / 2**30:.1f} GiB"
    )
    achieved = 100 * generated / seconds / bound
    print(
        f"measured copy bandwidth {bandwidth / 1e12:.2f} TB/s -> bound {bound:,.0f} tokens/s; "
        f"achieved {achieved:.1f}% of it"
    )


if __name__ == "__main__":
    typer.run(main)
