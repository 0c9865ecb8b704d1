"""The memory plan against a measured GRPO train step, on a GPU: peak memory, step time, MFU, and hf rollout speed.

    python bench/memory_plan_gpu.py --tokenizer TOKENIZER_DIR              # Qwen2.5-Math-1.5B's shape, random bf16
    python bench/memory_plan_gpu.py --tokenizer TOKENIZER_DIR --gradient-checkpointing
    python bench/memory_plan_gpu.py --tokenizer TOKENIZER_DIR --tiny --device cpu   # checks the script anywhere

Builds a Qwen2ForCausalLM of Qwen2.5-Math-1.5B's shape with random bfloat16 weights (no download), runs optimizer
steps of the handout's microbatch (2 sequences of --prompt-tokens + --response-tokens, loss on the response
tokens) through the library's own log-prob and GRPO microbatch functions with AdamW, and prints the plan's
training-phase estimate (weights, gradients, AdamW states, activations) beside torch.cuda.max_memory_allocated,
the step time, and the policy update's MFU (6 x parameters x tokens per step over --peak-tflops). Then hf
rollouts: --rollouts sequences of --rollout-tokens new tokens. Needs only torch and transformers (no vLLM,
datasets or network); the tokenizer only turns prompts into ids, any will do.
"""

import argparse
import json
import time

import torch
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

from alignment.grpo_step import grpo_microbatch_train_step
from alignment.logprobs import get_response_log_probs
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.run.memory_plan import ModelShape, Workload, policy_bytes

QWEN_MATH_15B = dict(
    hidden_size=1536,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    intermediate_size=8960,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)
TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=128,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)


def train_steps(model: Qwen2ForCausalLM, args: argparse.Namespace, device: torch.device) -> list[float]:
    """Seconds of each optimizer step on one random microbatch (forward, backward, AdamW)."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=1e-6, betas=(0.9, 0.95), weight_decay=0.0, fused=device.type == "cuda"
    )
    length = args.prompt_tokens + args.response_tokens
    input_ids = torch.randint(0, model.config.vocab_size, (2, length), device=device)
    labels = torch.roll(input_ids, -1, dims=1)
    mask = torch.zeros(2, length, dtype=torch.bool, device=device)
    mask[:, args.prompt_tokens - 1 : length - 1] = True
    advantages = torch.tensor([[1.0], [-1.0]], device=device)
    seconds = []
    for _ in range(args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        log_probs = get_response_log_probs(model, input_ids, labels, True, response_mask=mask)["log_probs"]
        grpo_microbatch_train_step(log_probs, mask, 1, "reinforce_with_baseline", advantages=advantages)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return seconds


def rollout_tokens_per_s(model: Qwen2ForCausalLM, tokenizer, args: argparse.Namespace) -> tuple[float, int]:
    engine = HFRolloutEngine(model.eval(), tokenizer)
    sampling = SamplingConfig(max_tokens=args.rollout_tokens, min_tokens=args.rollout_tokens, seed=0)
    start = time.perf_counter()
    rollouts = engine.generate(["Compute 1 + 1."] * (args.rollouts // 8), 8, sampling)
    tokens = sum(len(r.token_ids) for r in rollouts)
    return tokens / (time.perf_counter() - start), tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="a tokenizer folder (any; it only makes prompt ids)")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument(
        "--tiny", action="store_true", help="a 2-layer model of the same vocabulary, to check the script"
    )
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--response-tokens", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--rollout-tokens", type=int, default=1024)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="dense bf16 peak (H100/H200 SXM: 989)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = Qwen2Config(**(TINY if args.tiny else QWEN_MATH_15B))
    model = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    shape = ModelShape.from_config(config)
    work = Workload(
        precision="bf16",
        micro_batch=2,
        prompt_tokens=args.prompt_tokens,
        response_tokens=args.response_tokens,
        rollout_batch=args.rollouts,
        group_size=8,
        gradient_checkpointing=args.gradient_checkpointing,
        kl_reference=False,
        rollout="hf",
    )
    planned = sum(policy_bytes(shape, work).values())
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = train_steps(model, args, device)
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    step = min(seconds[1:] or seconds)  # the first step allocates AdamW's states and warms the kernels up
    tokens = 2 * (args.prompt_tokens + args.response_tokens)
    result = {
        "parameters": shape.parameters(),
        "gradient_checkpointing": args.gradient_checkpointing,
        "planned_training_gib": planned / 2**30,
        "measured_peak_gib": None if measured is None else measured / 2**30,
        "measured_over_planned": None if measured is None else measured / planned,
        "step_s": step,
        "step_s_all": seconds,
        "mfu": 6 * shape.parameters() * tokens / step / (args.peak_tflops * 1e12),
    }
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    result["hf_rollout_tokens_per_s"], result["hf_rollout_tokens"] = rollout_tokens_per_s(model, tokenizer, args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
