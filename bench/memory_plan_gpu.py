"""The memory plan against the measured peak of a GRPO train phase, per --precision, with and without checkpointing.

    python bench/memory_plan_gpu.py                 # Qwen2.5-Math-1.5B's shape, random weights, on cuda:0
    python bench/memory_plan_gpu.py --json          # stdout: one JSON line per figure, nothing else
    python bench/memory_plan_gpu.py --tiny --device cpu --json   # toy sizes: checks the script anywhere

For each precision (fp32, bf16, bf16-mixed, fp16-mixed), without and with gradient checkpointing (--runs), the
library's GRPO learner over a Qwen2ForCausalLM of Qwen2.5-Math-1.5B's shape with random weights
(alignment/grpo/synthetic.py: no download, no tokenizer) takes --steps optimizer steps of --micro-batches
microbatches of the handout's 2 sequences of 512 + 1,024 random tokens. Two microbatches a step are enough: from the
second on, the step's gradients are held while a microbatch runs, as in every longer step. Figures, per run:
peak_gib (torch.cuda.max_memory_allocated over every step, AdamW's states allocated at the first), plan_gib (the
plan's training phase: alignment/run/memory_plan.py, its parts in `plan_parts_gib`) and plan_over_peak, which the
plan promises to keep at 1 or more and within 1.1. On the CPU the peak and the ratio are null, with a reason (torch
counts allocated memory on CUDA only). The hf rollout speed this script once measured is measured by
bench/hf_generation_throughput.py.
Needs torch and transformers only; without CUDA, --device cuda:0 stops at once with a message.
"""

import argparse
import json
import sys
from typing import Any

import torch
from transformers import Qwen2Config

from alignment.grpo.synthetic import (
    QWEN_MATH_15B,
    TINY,
    planned_training_bytes,
    random_policy,
    synthetic_learner,
    synthetic_rows,
    synthetic_workload,
)
from alignment.run.memory_plan import GiB, ModelShape, policy_bytes
from alignment.run.precision import PRECISIONS
from bench.precision_gpu import CHECKPOINTED, RUNS


def measure(
    run: str, shape: dict[str, Any], args: argparse.Namespace, device: torch.device
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One run's figures (the measured peak, the plan, their ratio) and its context."""
    precision, checkpointing = run.removesuffix(CHECKPOINTED), run.endswith(CHECKPOINTED)
    work = synthetic_workload(
        precision, args.micro_batch, args.micro_batches, args.prompt_tokens, args.response_tokens, checkpointing
    )
    planned = planned_training_bytes(shape, work)
    parts = policy_bytes(ModelShape.from_config(Qwen2Config(**shape)), work)
    policy = random_policy(shape, precision, device, checkpointing)
    rows = args.micro_batch * args.micro_batches
    learner = synthetic_learner(policy, precision, rows, args.micro_batch)
    batch = synthetic_rows(rows, args.prompt_tokens, args.response_tokens, shape["vocab_size"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.steps):
        learner.optimizer_step(batch)
    measured = torch.cuda.max_memory_allocated(device) / GiB if device.type == "cuda" else None
    del learner, policy
    if device.type == "cuda":
        torch.cuda.empty_cache()
    run_context = {"precision": precision, "gradient_checkpointing": checkpointing}
    run_context |= {"tokens_per_microbatch": args.micro_batch * (args.prompt_tokens + args.response_tokens)}
    reason = {"reason": "torch counts allocated memory on CUDA only"}
    return [
        {"figure": "memory_plan_gpu.peak_gib", "value": measured, "unit": "GiB"} | ({} if measured else reason),
        {"figure": "memory_plan_gpu.plan_gib", "value": planned / GiB, "unit": "GiB"}
        | {"plan_parts_gib": {name: size / GiB for name, size in parts.items() if size}},
        {"figure": "memory_plan_gpu.plan_over_peak", "value": planned / GiB / measured if measured else None}
        | {"unit": "ratio"}
        | ({} if measured else reason),
    ], run_context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument(
        "--tiny", action="store_true", help="toy sizes that finish on a CPU: a 2-layer model, 2 x (16 + 32) tokens"
    )
    parser.add_argument("--json", action="store_true", help="stdout: only JSON lines, one per figure")
    parser.add_argument(
        "--runs",
        nargs="+",
        default=RUNS,
        choices=RUNS,
        metavar="RUN",
        help=f"runs, each a precision ({', '.join(PRECISIONS)}) alone or with {CHECKPOINTED} (gradient "
        "checkpointing); default: all eight",
    )
    parser.add_argument("--micro-batches", type=int, default=2, help="microbatches per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=2, help="sequences per microbatch")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 512 (--tiny: 16)")
    parser.add_argument("--response-tokens", type=int, default=None, help="default 1024 (--tiny: 32)")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per run")
    args = parser.parse_args()
    args.prompt_tokens = args.prompt_tokens or (16 if args.tiny else 512)
    args.response_tokens = args.response_tokens or (32 if args.tiny else 1024)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}: no CUDA device here; --tiny --device cpu checks the script without one")
    if device.type == "cpu":
        torch.set_num_threads(1)  # toy sizes: one thread avoids OpenMP stalls on CPU cores shared with other jobs
    shape = TINY if args.tiny else QWEN_MATH_15B
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    context = {"device": name, "torch": torch.__version__, "tiny": args.tiny, "micro_batches": args.micro_batches}
    log = sys.stderr if args.json else sys.stdout
    print(json.dumps(context), file=log, flush=True)
    for run in args.runs:
        figures, run_context = measure(run, shape, args, device)
        for figure in figures:
            if args.json:
                print(json.dumps(figure | context | run_context), flush=True)
        peak, plan, ratio = (f["value"] for f in figures)
        measured = "-" if peak is None else f"{peak:.2f}"
        over = "" if ratio is None else f" ({ratio:.3f}x the peak)"
        print(f"{run}: peak {measured} GiB, plan {plan:.2f} GiB{over}", file=log, flush=True)


if __name__ == "__main__":
    main()
