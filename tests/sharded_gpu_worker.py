"""Two optimizer steps of the GRPO learner on a small random Qwen2 on cuda:0, run plainly or under `torchrun
--nproc-per-node 1 -m tests.sharded_gpu_worker OUT` (the policy sharded with FSDP2 over NCCL, a world of one).

    python -m tests.sharded_gpu_worker OUT      # writes OUT/plain.safetensors and OUT/plain.json
    torchrun ... -m tests.sharded_gpu_worker OUT   # writes OUT/sharded.safetensors and OUT/sharded.json

A second argument names another device (`cpu`: gloo instead of NCCL, to check the script without a GPU).

Float32 with TF32 off, so that the two differ only by the order of float32 sums. Needs torch and transformers only
(random weights, synthetic rows: alignment/grpo/synthetic.py).
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from alignment.distributed.sharding import full_tensors, launched, shard_policy, start_group
from alignment.grpo.synthetic import TINY, random_policy, synthetic_learner, synthetic_rows
from alignment.run.precision import use_tf32

SHAPE = TINY | dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)


def main(out: Path, device: str) -> None:
    use_tf32(False)
    sharded = launched()
    if sharded:
        start_group(torch.device(device).type)
    policy = random_policy(SHAPE, "fp32", device)
    if sharded:
        policy = shard_policy(policy, torch.device(device).type)
    learner = synthetic_learner(policy, "fp32", 8, 2, learning_rate=1e-3)
    rows = synthetic_rows(8, 24, 40, SHAPE["vocab_size"])
    metrics = [learner.optimizer_step(rows) for _ in range(2)]
    weights = {name: t.detach().float().cpu().clone() for name, t in full_tensors(policy.state_dict()).items()}
    name = "sharded" if sharded else "plain"
    save_file(weights, str(out / f"{name}.safetensors"))
    (out / f"{name}.json").write_text(json.dumps([{k: row[k] for k in ("loss", "grad_norm")} for row in metrics]))
    if sharded:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "cuda:0")
