"""The learner's optimizer step in each --precision on a GPU: seconds, tokens/s, MFU, peak memory and the plan's.

    python bench/precision_gpu.py                  # Qwen2.5-Math-1.5B's shape, random weights, on cuda:0
    python bench/precision_gpu.py --json           # stdout: one JSON line per figure, nothing else
    python bench/precision_gpu.py --tiny --device cpu --json   # toy sizes: checks the script anywhere, in seconds

Each run (--runs; default fp32, bf16, bf16-mixed, fp16-mixed, and bf16 with gradient checkpointing) builds a
Qwen2ForCausalLM of Qwen2.5-Math-1.5B's shape with random weights in the precision's compute dtype and the library's
GRPO learner over it (alignment/grpo/synthetic.py: no download, no tokenizer), then takes --steps optimizer steps
of --micro-batches microbatches, each of --micro-batch sequences of --prompt-tokens + --response-tokens random
tokens (the handout's: 2 x (512 + 1,024); with --shared-prompts a microbatch's rows continue one prompt, as a
GRPO group's do, and are scored with the prompt once), as a GRPO train phase takes them: log-probs of the response
tokens (the head fused with the log-softmax in chunks, rows packed), the handouts' loss backpropagated per
microbatch, the gradient clipped, fused AdamW at lr 1e-5 in the precision. Figures, per run:

- step_s: the median seconds of an optimizer step after the first (which allocates AdamW's states);
- tokens_per_s: the tokens fed per step over step_s;
- mfu: 6 x parameters x tokens per step / step_s / --peak-tflops (989: an H100 SXM's dense bfloat16 peak); with
  --shared-prompts every row's prompt still counts, so it is the step's effective rate, above what the GPU computes;
- peak_gib: torch.cuda.max_memory_allocated over every step; plan_gib: the memory plan's training phase
  (alignment/run/memory_plan.py), which should be at or above peak_gib and within 10% of it.

On the CPU, mfu and peak_gib are null with a `reason` (no peak FLOP/s is known for a CPU, and torch counts allocated
memory on CUDA only). Needs torch and transformers only. Without CUDA, --device cuda:0 stops at once with a message.
"""

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

from alignment.grpo.synthetic import (
    QWEN_MATH_15B,
    TINY,
    planned_training_bytes,
    random_policy,
    synthetic_learner,
    synthetic_rows,
    synthetic_workload,
)
from alignment.run.memory_plan import GiB
from alignment.run.precision import PRECISIONS, use_tf32

CHECKPOINTED = "+checkpointing"
RUNS = [*PRECISIONS, *(p + CHECKPOINTED for p in PRECISIONS)]
DEFAULT_RUNS = [*PRECISIONS, "bf16" + CHECKPOINTED]


def measure(run: str, shape: dict[str, Any], args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """One run: build, --steps optimizer steps, measure."""
    precision, checkpointing = run.removesuffix(CHECKPOINTED), run.endswith(CHECKPOINTED)
    policy = random_policy(shape, precision, device, checkpointing)
    rows = args.micro_batch * args.micro_batches
    learner = synthetic_learner(policy, precision, rows, args.micro_batch)
    group = args.micro_batch if args.shared_prompts else 1
    batch = synthetic_rows(rows, args.prompt_tokens, args.response_tokens, shape["vocab_size"], group=group)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, skipped = [], 0
    for _ in range(args.steps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        skipped += "skipped_step" in learner.optimizer_step(batch)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - start)
    parameters = sum(p.numel() for p in policy.parameters())
    measured = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    del learner, policy
    if device.type == "cuda":
        torch.cuda.empty_cache()
    step = statistics.median(seconds[1:] or seconds)
    tokens = rows * (args.prompt_tokens + args.response_tokens)
    return {
        "precision": precision,
        "gradient_checkpointing": checkpointing,
        "parameters": parameters,
        "tokens_per_step": tokens,
        "step_s": step,
        "step_s_all": seconds,
        "mfu": 6 * parameters * tokens / step / (args.peak_tflops * 1e12) if device.type == "cuda" else None,
        "peak_gib": None if measured is None else measured / GiB,
        "plan_gib": planned_training_bytes(shape, workload(precision, checkpointing, args)) / GiB,
        "skipped_steps": skipped,
    }


def workload(precision: str, checkpointing: bool, args: argparse.Namespace):
    return synthetic_workload(
        precision, args.micro_batch, args.micro_batches, args.prompt_tokens, args.response_tokens, checkpointing
    )


def figures(result: dict[str, Any], context: dict[str, Any]) -> list[dict[str, Any]]:
    """One figure a line, each with its run's context; null figures carry their reason."""
    run = context | {k: result[k] for k in ("precision", "gradient_checkpointing", "tokens_per_step", "parameters")}
    out = [
        {"figure": "precision_gpu.step_s", "value": result["step_s"], "unit": "s"},
        {"figure": "precision_gpu.tokens_per_s", "value": result["tokens_per_step"] / result["step_s"], "unit": "1/s"},
        {"figure": "precision_gpu.mfu", "value": result["mfu"], "unit": "fraction"},
        {"figure": "precision_gpu.peak_gib", "value": result["peak_gib"], "unit": "GiB"},
        {"figure": "precision_gpu.plan_gib", "value": result["plan_gib"], "unit": "GiB"},
    ]
    reasons = {
        "precision_gpu.mfu": "no peak FLOP/s is known for a CPU",
        "precision_gpu.peak_gib": "torch counts allocated memory on CUDA only",
    }
    for figure in out:
        if figure["value"] is None:
            figure["reason"] = reasons[figure["figure"]]
        figure |= run
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument(
        "--tiny", action="store_true", help="toy sizes that finish on a CPU: a 2-layer model, 2 x (16 + 32) tokens"
    )
    parser.add_argument("--json", action="store_true", help="stdout: only JSON lines, one per figure")
    parser.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, choices=RUNS, metavar="RUN", help=runs_help())
    parser.add_argument("--micro-batches", type=int, default=8, help="microbatches per optimizer step")
    parser.add_argument("--micro-batch", type=int, default=2, help="sequences per microbatch")
    parser.add_argument("--prompt-tokens", type=int, default=None, help="default 512 (--tiny: 16)")
    parser.add_argument("--response-tokens", type=int, default=None, help="default 1024 (--tiny: 32)")
    parser.add_argument(
        "--shared-prompts",
        action="store_true",
        help="each microbatch's rows continue one prompt, as a GRPO group's do (scored with the prompt once)",
    )
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per run; the first is not timed")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak (H100 SXM: 989)")
    parser.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True, help="TF32 float32 matmuls")
    args = parser.parse_args()
    args.prompt_tokens = args.prompt_tokens or (16 if args.tiny else 512)
    args.response_tokens = args.response_tokens or (32 if args.tiny else 1024)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit(f"--device {args.device}: no CUDA device here; --tiny --device cpu checks the script without one")
    if device.type == "cpu":
        torch.set_num_threads(1)  # toy sizes: one thread avoids OpenMP stalls on CPU cores shared with other jobs
    use_tf32(args.tf32)
    shape = TINY if args.tiny else QWEN_MATH_15B
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    context = {"device": name, "torch": torch.__version__, "tiny": args.tiny, "tf32": args.tf32}
    context |= {"micro_batches": args.micro_batches, "micro_batch": args.micro_batch}
    context |= {"shared_prompts": args.shared_prompts}
    log = sys.stderr if args.json else sys.stdout
    print(json.dumps(context), file=log, flush=True)
    for run in args.runs:
        result = measure(run, shape, args, device)
        if args.json:
            for figure in figures(result, context):
                print(json.dumps(figure), flush=True)
        print(summary(result), file=log, flush=True)


def runs_help() -> str:
    return (
        f"runs, each a precision ({', '.join(PRECISIONS)}) alone or with {CHECKPOINTED} (gradient checkpointing); "
        f"default: {' '.join(DEFAULT_RUNS)}"
    )


def summary(r: dict[str, Any]) -> str:
    run = r["precision"] + (CHECKPOINTED if r["gradient_checkpointing"] else "")
    mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
    peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.1f}"
    return (
        f"{run}: {r['step_s']:.3f} s/step, {r['tokens_per_step'] / r['step_s']:,.0f} tokens/s, MFU {mfu}, "
        f"peak {peak} of {r['plan_gib']:.1f} GiB planned, {r['skipped_steps']} skipped"
    )


if __name__ == "__main__":
    main()
