"""Tokens/s of our TransformerLM sampler with its KV cache, without it, and of transformers' generate, on the
same weights and the same batch.

    uv run python bench/lm_sampler.py                       # SmolLM2-135M, 4 prompts x 64 and 128 new tokens
    uv run python bench/lm_sampler.py --model <tiny HF Llama folder> --new-tokens 8 --repeats 1    # smoke run

Every row runs to the full length (min_tokens = max_tokens; generate's min_new_tokens = max_new_tokens),
sampling at temperature 1, top_p 1, seed 0. Our sampler also computes each token's log-prob; generate does
not. Prints one JSON object: machine, settings, and for each length the best of --repeats runs.
"""

import datetime
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers
import typer

from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.models.loading import SMOLLM2, load_model_and_tokenizer
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_sampler import sample

PROMPTS = (
    "Write a short story that includes the words: apple, river.",
    "Describe a walk through town.",
    "The capital of France is",
    "List three things you can do with a lantern, a compass and a map on a rainy afternoon in the hills.",
)


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def best_time(run: Callable[[], int], repeats: int, expected_tokens: int, device: str) -> dict[str, float]:
    """Fastest of `repeats` calls of run() (which returns the tokens it generated) and its tokens/s."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = run()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
        if tokens != expected_tokens:
            raise RuntimeError(f"generated {tokens} tokens, expected {expected_tokens}: a row stopped early")
    return {"seconds": round(min(seconds), 3), "tokens_per_s": round(expected_tokens / min(seconds), 1)}


def main(
    model: str = SMOLLM2,
    prompts: int = 4,
    new_tokens: list[int] = typer.Option([64, 128], help="Lengths to measure (repeatable)."),
    repeats: int = 3,
    threads: int | None = typer.Option(None, help="torch threads (default: torch's choice)."),
    device: str = "cpu",
) -> None:
    if threads:
        torch.set_num_threads(threads)
    ours, tokenizer = load_transformer_lm(model, device)
    theirs, _ = load_model_and_tokenizer(model, device)
    theirs.eval()
    texts = [PROMPTS[i % len(PROMPTS)] for i in range(prompts)]
    prompt_ids = tokenizer(texts)["input_ids"]
    batch = tokenizer(texts, padding=True, padding_side="left", return_tensors="pt").to(device)
    eos_ids = [tokenizer.eos_token_id]

    def ours_run(length: int, use_cache: bool) -> int:
        sampling = SamplingConfig(max_tokens=length, min_tokens=length, stop=(), seed=0)
        generator = torch.Generator(device=device).manual_seed(0)
        rollouts = sample(ours, tokenizer, prompt_ids, 1, sampling, eos_ids, generator, use_cache)
        return sum(len(r.token_ids) for r in rollouts)

    @torch.inference_mode()
    def generate_run(length: int) -> int:
        torch.manual_seed(0)
        out = theirs.generate(
            **batch,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=length,
            min_new_tokens=length,
            pad_token_id=tokenizer.pad_token_id,
        )
        return (out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0]

    ours_run(4, True), ours_run(4, False), generate_run(4)  # warm-up: first calls pay one-time costs
    results = []
    for length in new_tokens:
        expected = prompts * length
        row = {
            "new_tokens": length,
            "rows": prompts,
            "ours_kv_cache": best_time(lambda: ours_run(length, True), repeats, expected, device),  # noqa: B023 (called at once)
            "ours_no_cache": best_time(lambda: ours_run(length, False), repeats, expected, device),  # noqa: B023
            "transformers_generate": best_time(lambda: generate_run(length), repeats, expected, device),  # noqa: B023
        }
        row["kv_cache_speedup_over_no_cache"] = round(
            row["ours_no_cache"]["seconds"] / row["ours_kv_cache"]["seconds"], 2
        )
        results.append(row)
    summary = {
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpu": cpu_name(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "settings": {
            "model": model,
            "dtype": "float32",
            "device": device,
            "prompt_tokens": [len(p) for p in prompt_ids],
            "temperature": 1.0,
            "top_p": 1.0,
            "repeats": repeats,
        },
        "results": results,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    typer.run(main)
