"""GRPO on a tiny policy, run plainly (one unsharded process) or under `torchrun --nproc-per-node N -m
tests.sharded_worker ...` (the policy sharded with FSDP2), with a reward that varies within groups (a hash).

    python -m tests.sharded_worker update MODEL_DIR OUT [VARIANTS]   # two optimizer steps on fixed rollouts
    python -m tests.sharded_worker run MODEL_DIR OUT STEPS [resume]   # train_grpo itself, run folder OUT
    python -m tests.sharded_worker load MODEL_DIR OUT                # OUT's checkpoint at this process count
    python -m tests.sharded_worker mixed MODEL_DIR OUT               # `update`'s first variant in bf16-mixed

`update` writes the weights to OUT/<variant>.safetensors and each step's loss and gradient norm to
OUT/<variant>.json, for each variant VARIANTS names (comma-separated; every variant when left out). Its rollouts are
sampled by a separate unsharded copy of the model with a fixed seed, so every process count trains on exactly the same
batch: 12 rollouts (4 questions x 3), 2 optimizer steps of 6 rows in 3 microbatches of 2 (with 2 ranks, one rank runs
an empty microbatch each step). Variants cover the three loss aggregations, --mask-truncated (every other rollout
counts as stopped by EOS, the rest as cut at the limit), whose rows out of the loss change every denominator, and the
KL monitors.
"""

import json
import sys
import zlib
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from alignment.data.task import Task
from alignment.distributed.sharding import ShardGroup, full_tensors, launched, start_group
from alignment.grpo.config import GRPOConfig
from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import rollout_sampling
from alignment.grpo_run import train_grpo
from alignment.models.loading import load_model_and_tokenizer
from alignment.prompts import format_prompt
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import Rollout
from alignment.run.checkpoint import load_checkpoint
from alignment.run.setup import load_policy, model_dtype

VARIANTS = {
    "sequence_mean": {"loss_aggregation": "sequence_mean"},
    "token_mean": {"loss_aggregation": "token_mean"},
    "constant": {"loss_aggregation": "constant", "normalize_constant": 8},
    "mask_truncated": {"loss_aggregation": "token_mean", "mask_truncated": True},
    "kl_monitors": {"kl_reference": True, "kl_prev": True},  # the reference: a second sharded model
}


MEASURES = ("loss", "grad_norm", "kl_ref_k3", "kl_prev_k3")
QUESTIONS = [0, 1, 2, 3]


def hash_reward(response: str, truth: str) -> dict[str, float]:
    r = (zlib.crc32(response.encode()) % 5) / 4  # varies within a group: every advantage moves the weights
    return {"format_reward": 1.0, "answer_reward": r, "reward": r}


TASK = Task(
    ["What is 1 + 1?", "Name a fruit.", "Count to three.", "Say hello."],
    ["2", "apple", "3", "hello"],
    "Q: {question}\nA:",
    hash_reward,
)


def base_config(model_dir: str, out: Path) -> GRPOConfig:
    return GRPOConfig(
        model=model_dir,
        learning_rate=1e-3,
        rollout_batch_size=12,
        group_size=3,
        train_batch_size=6,
        gradient_accumulation_steps=3,
        sampling_max_tokens=6,
        sampling_min_tokens=1,
        loss_type="grpo_clip",
        grader_workers=1,
        backend="hf",
        prompt="question_only",
        output_dir=out,
        seed=3,
    )


def fixed_rollouts(model_dir: str, base: GRPOConfig) -> list[Rollout]:
    """Rollouts of QUESTIONS by a separate unsharded copy of the model, the same at every process count."""
    sampler, tokenizer = load_model_and_tokenizer(model_dir)
    engine = HFRolloutEngine(sampler.eval(), tokenizer, progress=False)
    prompts = [format_prompt(TASK.template, TASK.questions[q]) for q in QUESTIONS]
    rollouts = engine.generate(prompts, base.group_size, rollout_sampling(base, 0))
    return [replace(r, finish_reason="stop") if i % 2 else r for i, r in enumerate(rollouts)]


def update(model_dir: str, out: Path, group: ShardGroup | None, variants: tuple[str, ...] = tuple(VARIANTS)) -> None:
    base = base_config(model_dir, out)
    questions, rollouts = QUESTIONS, fixed_rollouts(model_dir, base)
    for name in variants:
        config = replace(base, **VARIANTS[name])
        torch.manual_seed(config.seed)
        policy, tokenizer = load_policy(config, "cpu", torch.float32, shard=group is not None)
        learner = GRPOLearner(config, policy, tokenizer, TASK)
        scores = [hash_reward(r.text, "") for r in rollouts]
        rows = []
        for _ in range(2 if config.kl_reference else 1):  # KL to the reference is 0 until the policy has moved
            rows += learner.update(learner.make_batch(questions, rollouts, scores))
        weights = full_tensors(policy.state_dict())
        if group is None or group.main:
            save_file({k: v.detach().clone() for k, v in weights.items()}, out / f"{name}.safetensors")
            (out / f"{name}.json").write_text(
                json.dumps([{k: v for k, v in row.items() if k in MEASURES} for row in rows])
            )


def mixed(model_dir: str, out: Path, group: ShardGroup | None) -> None:
    """One update in bf16-mixed: the float32 weights AdamW updates (the master unsharded, the shards sharded) to
    OUT/bf16_mixed.safetensors; the policy's dtypes, kept and computed in, to OUT/bf16_mixed.json."""
    config = replace(base_config(model_dir, out), precision="bf16-mixed")
    rollouts = fixed_rollouts(model_dir, config)
    torch.manual_seed(config.seed)
    policy, tokenizer = load_policy(config, "cpu", model_dtype(config, "cpu"), shard=group is not None)
    computed = []
    layer = policy.model.layers[0].self_attn.q_proj
    layer.register_forward_pre_hook(lambda module, args: computed.append(str(module.weight.dtype)))
    learner = GRPOLearner(config, policy, tokenizer, TASK)
    learner.update(learner.make_batch(QUESTIONS, rollouts, [hash_reward(r.text, "") for r in rollouts]))
    names = [name for name, p in policy.named_parameters() if p.requires_grad]
    weights = full_tensors(dict(zip(names, learner.optimizer.params)))
    if group is None or group.main:
        save_file({k: v.detach().clone() for k, v in weights.items()}, out / "bf16_mixed.safetensors")
        kept = {str(p.dtype) for p in policy.parameters()}
        (out / "bf16_mixed.json").write_text(json.dumps({"kept": sorted(kept), "computed": sorted(set(computed))}))


def run_config(model_dir: str, out: Path, steps: int) -> GRPOConfig:
    return replace(
        base_config(model_dir, out),
        n_grpo_steps=steps,
        checkpoint_every=1,
        eval_every=steps,
        n_eval_examples=4,
        rollout_batch_size=6,
        train_batch_size=6,
        gradient_accumulation_steps=3,
    )


def load(model_dir: str, out: Path, group: ShardGroup | None) -> None:
    """OUT's checkpoint into a policy and optimizer sharded over this many processes: the weights and AdamW's first
    moments gathered whole to OUT/loaded-<count>.safetensors."""
    config = run_config(model_dir, out, 1)
    policy, tokenizer = load_policy(config, "cpu", torch.float32, shard=group is not None)
    learner = GRPOLearner(config, policy, tokenizer, TASK)
    load_checkpoint(out, config, policy, learner.optimizer)
    moments = {f"exp_avg.{name}": learner.optimizer.state[p]["exp_avg"] for name, p in policy.named_parameters()}
    weights = full_tensors(dict(policy.state_dict()) | moments)
    if group is None or group.main:
        count = 1 if group is None else group.size
        save_file({k: v.detach().clone() for k, v in weights.items()}, out / f"loaded-{count}.safetensors")


if __name__ == "__main__":
    mode, model, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    torch.set_num_threads(1)
    if mode == "run":  # train_grpo joins torchrun's group itself
        train_grpo(run_config(model, folder, int(sys.argv[4])), TASK, TASK, resume=sys.argv[5:] == ["resume"])
    else:
        shards = start_group("cpu") if launched() else None
        if mode == "update" and sys.argv[4:]:
            update(model, folder, shards, tuple(sys.argv[4].split(",")))
        else:
            {"update": update, "load": load, "mixed": mixed}[mode](model, folder, shards)
        if shards is not None:
            dist.destroy_process_group()
