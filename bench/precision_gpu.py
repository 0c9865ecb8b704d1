"""Step time and peak memory of each --precision on a GPU, against the memory plan: one prepared script.

    python bench/precision_gpu.py                        # Qwen2.5-Math-1.5B's shape, random weights, on cuda:0
    python bench/precision_gpu.py --gradient-checkpointing
    python bench/precision_gpu.py --tiny --device cpu    # a 2-layer model: checks the script anywhere

For each precision (fp32, bf16, bf16-mixed, fp16-mixed): a Qwen2ForCausalLM of Qwen2.5-Math-1.5B's shape with random
weights (no download, no tokenizer) in the dtype the precision computes in, the library's PolicyOptimizer over it
(AdamW at lr 1e-5, betas (0.9, 0.95): a float32 master in the mixed modes, loss scaling in fp16-mixed), and --steps
optimizer steps of the handout's microbatch (2 sequences of --prompt-tokens + --response-tokens random tokens, the GRPO
microbatch loss on the response tokens, advantages +1 and -1) through the library's log-prob and loss functions. Per
precision it prints the plan's training-phase bytes (weights, master copy, gradients, AdamW states, activations:
alignment/run/memory_plan.py) beside torch.cuda.max_memory_allocated, the median step time after the first (which
allocates AdamW's states), the fraction of the forward's weights and of AdamW's weights that the first step changed,
and the steps the loss scaler skipped. One JSON object per precision, then a summary line. Needs torch and
transformers only. Without CUDA, --device cuda:0 stops at once with a message; --tiny --device cpu runs it all.
"""

import argparse
import gc
import json
import statistics
import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from alignment.grpo_step import grpo_microbatch_train_step
from alignment.logprobs import get_response_log_probs
from alignment.run.memory_plan import ModelShape, Workload, policy_bytes
from alignment.run.precision import MODES, PRECISIONS, PolicyOptimizer

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
TINY = QWEN_MATH_15B | dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def measure(precision: str, config: Qwen2Config, args: argparse.Namespace, device: torch.device) -> dict:
    """One precision: build, --steps optimizer steps, measure."""
    torch.manual_seed(0)
    with device:
        model = Qwen2ForCausalLM(config).to(MODES[precision].compute)
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    optimizer = PolicyOptimizer(model, precision, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.0)  # type: ignore[arg-type]
    length = args.prompt_tokens + args.response_tokens
    input_ids = torch.randint(0, config.vocab_size, (2, length), device=device)
    labels = torch.roll(input_ids, -1, dims=1)
    mask = torch.zeros(2, length, dtype=torch.bool, device=device)
    mask[:, args.prompt_tokens - 1 : length - 1] = True
    advantages = torch.tensor([[1.0], [-1.0]], device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, skipped, moved = [], 0, {}
    for step in range(args.steps):
        if step == 0:
            before = [p.detach().clone() for p in model.parameters()]
            master_before = [p.detach().clone() for p in optimizer.params]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        log_probs = get_response_log_probs(model, input_ids, labels, response_mask=mask)["log_probs"]
        grpo_microbatch_train_step(log_probs, mask, 1, "reinforce_with_baseline", advantages=advantages)
        optimizer.clip_grad_norm(1.0)
        skipped += not optimizer.step()
        optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
        if step == 0:
            moved = {
                "policy_weights_changed": changed(before, list(model.parameters())),
                "adamw_weights_changed": changed(master_before, optimizer.params),
            }
            del before, master_before
    shape = ModelShape.from_config(config)
    work = Workload(
        precision=precision,  # type: ignore[arg-type]
        micro_batch=2,
        prompt_tokens=args.prompt_tokens,
        response_tokens=args.response_tokens,
        rollout_batch=256,
        group_size=8,
        gradient_checkpointing=args.gradient_checkpointing,
        kl_reference=False,
        rollout="hf",
    )
    planned = sum(policy_bytes(shape, work).values())
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    result = {
        "precision": precision,
        "parameters": shape.parameters(),
        "gradient_checkpointing": args.gradient_checkpointing,
        "planned_training_gib": planned / 2**30,
        "measured_peak_gib": None if measured is None else measured / 2**30,
        "measured_over_planned": None if measured is None else measured / planned,
        "step_s": statistics.median(seconds[1:] or seconds),
        "step_s_all": seconds,
        "skipped_steps": skipped,
        "loss_scale": optimizer.metrics().get("loss_scale"),
    } | moved
    del model, optimizer
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def changed(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    return sum(int((a != b).sum()) for a, b in zip(before, after)) / sum(a.numel() for a in before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model of the same vocabulary")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--response-tokens", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}: no CUDA device here; --tiny --device cpu checks the script without one")
    config = Qwen2Config(**(TINY if args.tiny else QWEN_MATH_15B))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(json.dumps({"device": name, "torch": torch.__version__, "tiny": args.tiny}), flush=True)
    results = []
    for precision in args.precisions:
        results.append(measure(precision, config, args, device))
        print(json.dumps(results[-1]), flush=True)
    print(
        "summary: "
        + "; ".join(
            f"{r['precision']} {r['step_s']:.3f} s/step, peak "
            + (f"{r['measured_peak_gib']:.1f}" if r["measured_peak_gib"] is not None else "-")
            + f" of {r['planned_training_gib']:.1f} GiB planned"
            for r in results
        )
    )


if __name__ == "__main__":
    main()
