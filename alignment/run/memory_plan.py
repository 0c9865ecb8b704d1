"""GPU memory of a GRPO run, planned from the model's shape before anything loads.

Per device, in bytes: the policy's weights, its float32 master copy, gradients and AdamW states, each in the dtype
--precision keeps it in (alignment/run/precision.py: bf16 keeps everything in bfloat16, 2 + 2 + 2 x 2 bytes a parameter;
bf16-mixed and fp16-mixed a 2-byte compute copy, a 4-byte master, 4-byte gradients and 2 x 4 bytes of AdamW states; fp32
4 + 4 + 2 x 4), the KL reference copy when kept, the distillation's teacher when given (whole on every process),
the activations one microbatch saves for backward at the longest sequence in the compute dtype (with or without
gradient checkpointing), the log-prob head's work for one chunk of response tokens
(alignment/models/chunked_head.py), an allowance for the GPU kernels' workspaces, and the rollout engine (in the
compute dtype): vLLM's share of its GPU (weights, KV cache, its own overhead) or the hf backend's KV cache. A GPU
that the policy shares with vLLM alternates: vLLM sleeps (weights to CPU, KV cache freed) while the policy trains,
and the policy's gradients are freed while vLLM generates, so each phase is checked alone.

A learner sharded over N processes, one GPU each (torchrun, alignment/distributed/sharding.py), keeps 1/N of the
weights, of their gradients, of the AdamW states and of a reference copy on each GPU (in a mixed precision its float32
shards are the master, gathered in the compute dtype). What each process holds whole stays: its activations and the
head's float32 work, the root's parameters (embeddings, final norm, head) and their gradient for the whole forward and
backward, two decoder layers' weights (the one computing and the next, prefetched) and one layer's gradient before its
reduce-scatter; while it samples (hf, its share of the prompts, as the only sampler under torchrun), the whole model
gathered and its share's KV cache.

All but `model_shape` (which reads a config.json) are pure functions of numbers: `scripts/train_grpo.py
--plan-memory 1x24` prints a plan for a machine that is not there (`--plan-processes 2` for a learner sharded
over 2 of its GPUs), and a GPU run checks its plan before loading (under torchrun, for its process count).
Estimates, not measurements. What the training phase assumes (`activation_bytes`): transformers' Llama / Qwen2 layers
on SDPA, rows packed without padding (alignment/models/packed_rows.py) so that a microbatch runs at most micro_batch x
the longest sequence's tokens, the head fused with the log-softmax in chunks, the step's gradients held while each
microbatch after the first runs, and AdamW's states from the first step on. Allocator fragmentation (torch's cache
holds freed blocks for reuse, which torch.cuda.max_memory_allocated does not count) and small tensors (bias
gradients, masks, indices) are not counted; on CPU steps the accounting is within 2% below and 10% above the live
tensors' peak (tests/test_memory_plan.py), the workspace allowance covering the rest.
"""

import itertools
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from alignment.models.chunked_head import chunk_tokens
from alignment.run.precision import MODES, Mode, Precision, resolve_precision

GiB = 2**30
CUDA_CONTEXT_BYTES = 1 * GiB  # CUDA context and library workspaces: outside torch's allocator, on every GPU used
VLLM_OVERHEAD_BYTES = 2 * GiB  # vLLM's activation peak (sampling included) and CUDA graphs, besides weights and KV
VLLM_ASLEEP_BYTES = GiB // 2  # what a level-1 sleeping engine keeps on its GPU (graph pools, buffers)
WORKSPACE_BYTES = 256 * 2**20  # cuBLAS's and attention kernels' workspaces in torch's allocator (an allowance)
OWN_GPU_SHARE = 0.85  # the handouts' gpu_memory_utilization for vLLM on a GPU of its own
ASSUMED_PROMPT_TOKENS = 512  # longest prompt when the data is not read (r1_zero + a long MATH problem)

Rollout = Literal["vllm", "hf"]


@dataclass(frozen=True)
class ModelShape:
    """What memory depends on in a Llama / Qwen2 / OLMo 2-style decoder (read from config.json)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool  # Qwen2 has biases on q, k and v
    qk_norm: bool = False  # OLMo 2 normalizes q and k (RMSNorm over their whole widths) before the rotary embedding

    @classmethod
    def from_config(cls, config: Any) -> "ModelShape":
        """From a transformers config (or anything with its attribute names)."""
        heads = config.num_attention_heads
        return cls(
            hidden=config.hidden_size,
            layers=config.num_hidden_layers,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
            tied_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            qkv_bias=getattr(config, "model_type", "") == "qwen2" or bool(getattr(config, "attention_bias", False)),
            qk_norm=getattr(config, "model_type", "") == "olmo2",
        )

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    def parameters(self) -> int:
        return self.layers * self.layer_parameters() + self.root_parameters()

    def layer_parameters(self) -> int:
        """One decoder layer: attention (with OLMo 2's q and k norms), gate/up/down and two RMSNorm weights."""
        h, q, kv = self.hidden, self.q_dim, self.kv_dim
        attention = (
            h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0) + ((q + kv) if self.qk_norm else 0)
        )
        return attention + 3 * h * self.intermediate + 2 * h

    def root_parameters(self) -> int:
        """What is not in a decoder layer: the embeddings (and an untied head) and the final norm."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2) + self.hidden

    def lora_parameters(self, rank: int, targets: list[str]) -> int:
        """Adapter parameters of rank `rank` (A: rank x in, B: out x rank) on the named decoder projections."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        sizes = {
            "q_proj": h + q,
            "k_proj": h + kv,
            "v_proj": h + kv,
            "o_proj": q + h,
            "gate_proj": h + i,
            "up_proj": h + i,
            "down_proj": i + h,
        }  # in + out features
        chosen = sizes if "all-linear" in targets else {name: sizes[name] for name in targets if name in sizes}
        return self.layers * rank * sum(chosen.values())

    def kv_cache_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def saved_bytes_per_token_per_layer(self, dtype_bytes: int) -> int:
        """What one decoder layer keeps for backward, per token (transformers' Llama / Qwen2 with SDPA).

        Each RMSNorm keeps its float32 input, its normalized input (for its weight's gradient), its output (the next
        projections' input) and a float32 reciprocal RMS: 4h + 2·b·h + 4; attention keeps q and k rotated, v and its
        output for SDPA, and o_proj's input (b·(3·q_dim + 2·kv_dim)), and SDPA's float32 log-sum-exp a head; the
        SwiGLU MLP keeps gate and up, SiLU(gate) and their product (4·b·I), which are also the projections' inputs.
        b is the dtype's bytes. In float32 a GPU's attention copies keys and values to every query head
        (alignment/models/packed_rows.py): 5·b·q_dim. OLMo 2's q and k norms keep what a layer norm keeps, at
        widths q_dim and kv_dim. Checked against the live tensors of a CPU step (tests/test_memory_plan.py).
        """
        b, h = dtype_bytes, self.hidden
        norms = 2 * (4 * h + 2 * b * h + 4)
        if self.qk_norm:
            norms += (4 + 2 * b) * (self.q_dim + self.kv_dim) + 8
        kv_dim = self.q_dim if b == 4 else self.kv_dim
        attention = b * (3 * self.q_dim + 2 * kv_dim) + 4 * self.heads
        return norms + attention + 4 * b * self.intermediate


@dataclass(frozen=True)
class Workload:
    """The settings memory depends on."""

    precision: Precision  # what weights, master copy, gradients, AdamW states and activations are kept in
    micro_batch: int  # sequences per microbatch
    prompt_tokens: int  # longest prompt
    response_tokens: int  # sampling_max_tokens
    rollout_batch: int
    group_size: int
    gradient_checkpointing: bool
    kl_reference: bool
    rollout: Rollout
    gpu_memory_utilization: float | None = None  # vLLM's share; None: OWN_GPU_SHARE on its own GPU, else planned
    trainable_fraction: float = 1.0  # of the parameters (LoRA trains a few; full fine-tuning all)
    processes: int = 1  # a learner sharded over this many processes, one GPU each (torchrun); rollouts then by hf
    previous_copy: bool = False  # --kl-prev-step: a frozen copy of the weights that train, one step behind
    teacher_parameters: int = 0  # --teacher: a frozen model of this many parameters, whole on every process

    @property
    def sequence_tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens

    @property
    def mode(self) -> Mode:
        return MODES[self.precision]

    @property
    def dtype_bytes(self) -> int:
        """Of the compute dtype: activations, the forward's weights, KV caches and a vLLM engine's weights."""
        return self.mode.compute_bytes


@dataclass(frozen=True)
class Machine:
    gpus: int
    gib: float

    @classmethod
    def parse(cls, text: str) -> "Machine":
        """`1x24`, `2x80`: GPU count x GiB each."""
        count, sep, size = text.lower().partition("x")
        try:
            machine = cls(int(count), float(size))
        except ValueError:
            raise ValueError(f"--plan-memory {text!r}: expected GPUSxGIB, e.g. 1x24 or 2x80") from None
        if not sep or machine.gpus < 1 or machine.gib <= 0:
            raise ValueError(f"--plan-memory {text!r}: expected GPUSxGIB with at least 1 GPU, e.g. 1x24 or 2x80")
        return machine

    @property
    def bytes_per_gpu(self) -> int:
        return int(self.gib * GiB)


def activation_bytes(shape: ModelShape, work: Workload) -> int:
    """The most one microbatch holds beyond the weights and their states, at the longest sequence: its activations
    and the log-prob head's peak (`head_bytes`), and WORKSPACE_BYTES for the kernels' workspaces.

    Without checkpointing, every layer keeps `saved_bytes_per_token_per_layer`, the final norm its float32 input and
    its normalized input, and the rotary cos and sin tables serve every layer, all of it held while the head runs.
    With checkpointing each layer keeps only its input; the peak is then the larger of the head's moment (the inputs,
    the final norm, the head) and a layer's backward (the inputs, that layer's activations recomputed and its MLP's
    two widest gradients, and a tied head's weight gradient waiting for the embedding's). At the backward's end,
    activations freed, the embedding's dense gradient, a tied head's and their sum are held at once: 3 vocabulary x
    hidden tensors, the peak of a checkpointed 1.5B step (the layers' inputs are gone by then).

    On CPU steps of a small Qwen2 in each precision (tests/test_memory_plan.py) this, less the workspaces, is within
    1% of the peak of live tensors without checkpointing and within 10% above it with.
    """
    b, tokens = work.dtype_bytes, work.micro_batch * work.sequence_tokens
    per_layer = shape.saved_bytes_per_token_per_layer(b)
    rotary = tokens * 2 * shape.head_dim * b
    head_moment = tokens * ((4 + b) * shape.hidden + 4) + rotary + head_bytes(shape, work)  # final norm, tables, head
    if work.gradient_checkpointing:
        inputs = tokens * shape.layers * b * shape.hidden
        # a tied head's weight gradient waits for the embedding's, at the backward's end
        pending = shape.vocab * shape.hidden * b if shape.tied_embeddings else 0
        layer_backward = tokens * (per_layer + 2 * b * shape.intermediate) + rotary + pending
        held = inputs + max(head_moment, layer_backward)
    else:
        held = tokens * shape.layers * per_layer + head_moment
    tail = (3 if shape.tied_embeddings else 2) * shape.vocab * shape.hidden * b
    return max(held, tail) + WORKSPACE_BYTES


def head_bytes(shape: ModelShape, work: Workload) -> int:
    """The log-prob head's peak (alignment/models/chunked_head.py), for one chunk of response tokens at a time.

    Forward: the chunk's logits in the compute dtype, their shifted float32 copy and its exp (8 bytes a word in
    float32, where the copy is the logits). Backward: the logits recomputed beside their float32 copy, which turns
    into probabilities in place, then the probabilities beside the logit gradient in the compute dtype (b + 4 bytes
    a word; in float32 all of it in place, 4), beside the head's weight gradient, new in the compute dtype until it
    is added into .grad or the master's. Throughout: the response tokens' gathered hidden states and their gradient,
    and three floats a token kept between forward and backward.
    """
    b, vocab, hidden = work.dtype_bytes, shape.vocab, shape.hidden
    scored = work.micro_batch * work.response_tokens
    words = min(scored, chunk_tokens(vocab)) * vocab
    forward, backward = (b + 8, b + 4) if b < 4 else (8, 4)
    return max(words * forward, words * backward + vocab * hidden * b) + scored * (2 * hidden * b + 12)


def policy_bytes(shape: ModelShape, work: Workload) -> dict[str, int]:
    """The learner's parts on one GPU: weights, master copy, gradients, AdamW states, reference copy (each
    process's shard of them when sharded) and activations; sharded, also what it gathers whole to train."""
    params = shape.parameters()
    trainable = math.ceil(params * work.trainable_fraction)
    per = work.mode.parameter_bytes(sharded=work.processes > 1)

    def shard(count: int, bytes_each: int) -> int:
        return math.ceil(count / work.processes) * bytes_each

    parts = {
        "weights": shard(params, per["weights"]),
        "master weights": shard(trainable, per["master weights"]),  # of the trainable parameters (LoRA: adapters)
        "gradients": shard(trainable, per["gradients"]),
        "optimizer": shard(trainable, per["optimizer"]),  # AdamW's exp_avg and exp_avg_sq
        "reference": shard(params, work.dtype_bytes) if work.kl_reference else 0,  # frozen: the compute dtype
        "activations": activation_bytes(shape, work),
    }
    if work.teacher_parameters:  # frozen, in the compute dtype; never sharded (it only scores)
        parts["teacher"] = work.teacher_parameters * work.dtype_bytes
    if work.previous_copy:  # under LoRA the adapters alone: the frozen base is shared
        parts["previous step's copy"] = shard(trainable, work.dtype_bytes)  # frozen: the compute dtype
    if work.processes > 1:
        parts["gathered to train"] = gathered_bytes(shape, work)
    return parts


def gathered_bytes(shape: ModelShape, work: Workload) -> int:
    """What a sharded learner holds whole while it trains: the root's parameters and their gradient, two decoder
    layers' weights and one layer's gradient (see the module docstring); weights in the compute dtype, gradients in
    the dtype they are reduced in (float32 in a mixed precision)."""
    root, layer = shape.root_parameters(), shape.layer_parameters()
    gradient_bytes = work.mode.parameter_bytes(sharded=True)["gradients"]
    return (root + 2 * layer) * work.dtype_bytes + (root + layer) * gradient_bytes


def vllm_needs(shape: ModelShape, work: Workload) -> int:
    """The least vLLM can generate with: weights, overhead, and KV cache for one group at full length."""
    kv = work.group_size * work.sequence_tokens * shape.kv_cache_bytes_per_token(work.dtype_bytes)
    return shape.parameters() * work.dtype_bytes + VLLM_OVERHEAD_BYTES + kv


def hf_kv_bytes(shape: ModelShape, work: Workload) -> int:
    """The hf backend's KV cache: every rollout of the batch at full length (sharded: of this rank's share of the
    prompts, the first ranks taking one more when they do not divide)."""
    prompts = math.ceil(work.rollout_batch / work.group_size / work.processes)
    return prompts * work.group_size * work.sequence_tokens * shape.kv_cache_bytes_per_token(work.dtype_bytes)


@dataclass(frozen=True)
class DevicePlan:
    name: str
    capacity: int  # usable bytes: the GPU less the CUDA context
    parts: dict[str, int]  # what lives there, by name
    peak: int  # the largest phase
    fits: bool  # the peak is within capacity, and vLLM (if there) has at least what it needs


def device(name: str, capacity: int, parts: dict[str, int], peak: int, enough_for_vllm: bool = True) -> DevicePlan:
    return DevicePlan(name, capacity, parts, peak, enough_for_vllm and peak <= capacity)


@dataclass(frozen=True)
class MemoryPlan:
    devices: list[DevicePlan]
    vllm_share: float | None  # gpu_memory_utilization to give vLLM, when vLLM is used
    notes: list[str]

    @property
    def fits(self) -> bool:
        return all(d.fits for d in self.devices)


def plan(shape: ModelShape, work: Workload, machine: Machine) -> MemoryPlan:
    """Where everything goes on `machine` and whether it fits (a GPU of its own for vLLM when there are two; a
    sharded learner on `work.processes` of them)."""
    total = machine.bytes_per_gpu
    usable = total - CUDA_CONTEXT_BYTES
    learner = policy_bytes(shape, work)
    # held through every phase
    resident = (
        learner["weights"]
        + learner["master weights"]
        + learner["optimizer"]
        + learner["reference"]
        + learner.get("previous step's copy", 0)
        + learner.get("teacher", 0)
    )
    training = resident + learner["gradients"] + learner["activations"]
    notes: list[str] = []
    if work.processes > 1:
        if machine.gpus < work.processes:
            raise ValueError(
                f"a learner sharded over {work.processes} processes needs {work.processes} GPUs, "
                f"one each; the machine has {machine.gpus}"
            )
        # rollouts (the whole model gathered, this rank's KV cache) and training alternate, gradients freed between
        parts = learner | {
            "gathered to sample": shape.parameters() * work.dtype_bytes,
            "hf KV cache": hf_kv_bytes(shape, work),
        }
        sampling = resident + parts["gathered to sample"] + parts["hf KV cache"]
        peak = max(sampling, training + learner["gathered to train"])
        return MemoryPlan([device(f"each of {work.processes} GPUs", usable, parts, peak)], None, notes)
    if work.rollout == "hf":
        kv = hf_kv_bytes(shape, work)
        if machine.gpus >= 2:
            sampler = {"sampler weights": shape.parameters() * work.dtype_bytes, "hf KV cache": kv}
            return MemoryPlan(
                [device("cuda:0", usable, learner, training), device("cuda:1", usable, sampler, sum(sampler.values()))],
                None,
                notes,
            )
        parts = learner | {"hf KV cache": kv}  # rollouts and training alternate; gradients are freed in between
        return MemoryPlan([device("cuda:0", usable, parts, resident + max(kv, training - resident))], None, notes)
    needs = vllm_needs(shape, work)
    if machine.gpus >= 2:
        share = work.gpu_memory_utilization or OWN_GPU_SHARE
        engine = {"vLLM share": int(share * total), "(vLLM needs at least)": needs}
        return MemoryPlan(
            [
                device("cuda:0", usable, learner, training),
                device("cuda:1", usable, engine, int(share * total), int(share * total) >= needs),
            ],
            share,
            notes,
        )
    # one GPU: vLLM sleeps while the policy trains, and gets what the resident policy leaves while it generates
    share = work.gpu_memory_utilization
    if share is None:
        share = max(0.0, math.floor(100 * (usable - resident) / total) / 100)
        notes.append(f"vLLM's share planned: --gpu-memory-utilization {share:.2f}")
    vllm = int(share * total)
    if vllm < needs:
        notes.append(
            f"vLLM's share ({vllm / GiB:.1f} GiB) is below what it needs ({needs / GiB:.1f} GiB: weights, "
            "overhead, KV cache for one group)"
        )
    parts = learner | {"vLLM awake": vllm, "vLLM asleep": VLLM_ASLEEP_BYTES, "(vLLM needs at least)": needs}
    generating, training_phase = resident + vllm, training + VLLM_ASLEEP_BYTES
    notes.append(
        f"generating: {generating / GiB:.1f} GiB (weights, master copy, AdamW states, reference, teacher, vLLM awake); "
        f"training: {training_phase / GiB:.1f} GiB (those, gradients, activations, vLLM asleep)"
    )
    peak = max(generating, training_phase)
    return MemoryPlan([device("cuda:0", usable, parts, peak, vllm >= needs)], share, notes)


def remedies(shape: ModelShape, work: Workload, machine: Machine) -> list[str]:
    """Flags that would make a plan that does not fit fit: the fewest changes that do, every such set in the order
    listed here (each change alone where one suffices)."""
    options: list[tuple[str, dict[str, Any], int]] = []  # (what to say, Workload changes, GPUs)
    if not work.gradient_checkpointing:
        options.append(("--gradient-checkpointing", {"gradient_checkpointing": True}, machine.gpus))
    if work.kl_reference:
        options.append(("--no-kl-reference", {"kl_reference": False}, machine.gpus))
    if work.previous_copy:
        options.append(("--no-kl-prev-step", {"previous_copy": False}, machine.gpus))
    if work.micro_batch > 1:
        options.append(
            (
                "a microbatch of 1 sequence (--gradient-accumulation-steps = --train-batch-size)",
                {"micro_batch": 1},
                machine.gpus,
            )
        )
    if machine.gpus == 1 and work.gpu_memory_utilization is not None:
        options.append(("no --gpu-memory-utilization (vLLM's share planned)", {"gpu_memory_utilization": None}, 1))
    if work.precision != "bf16":  # the next smaller precision: fp32 -> bf16-mixed -> bf16
        smaller = "bf16-mixed" if work.precision == "fp32" else "bf16"
        what = "bfloat16 compute" if smaller == "bf16-mixed" else "no float32 master copy"
        options.append((f"--precision {smaller} ({what})", {"precision": smaller}, machine.gpus))
    if machine.gpus == 1:
        options.append(("a second GPU (vLLM on it, as the handouts run)", {}, 2))
    if work.processes < machine.gpus and work.trainable_fraction == 1:  # LoRA runs in one process
        options.append(
            (
                f"a learner sharded over all {machine.gpus} GPUs (torchrun --nproc-per-node {machine.gpus}, "
                "rollouts by hf)",
                {"processes": machine.gpus, "rollout": "hf", "gpu_memory_utilization": None},
                machine.gpus,
            )
        )

    def fits(changes: dict[str, Any], gpus: int) -> bool:
        return plan(shape, replace(work, **changes), replace(machine, gpus=gpus)).fits

    for size in range(1, len(options) + 1):
        found = [
            " + ".join(text for text, _, _ in chosen)
            for chosen in itertools.combinations(options, size)
            if fits({k: v for _, more, _ in chosen for k, v in more.items()}, max(gpus for _, _, gpus in chosen))
        ]
        if found:
            return found
    return []


def describe(result: MemoryPlan, machine: Machine, work: Workload, shape: ModelShape) -> str:
    """The plan as lines of text: each device's parts and peak against its capacity."""
    lines = [
        f"memory plan: {machine.gpus} x {machine.gib:g} GiB; policy {shape.parameters() / 1e9:.2f}B parameters, "
        f"microbatch {work.micro_batch} x {work.sequence_tokens} tokens "
        f"({work.prompt_tokens} prompt + {work.response_tokens} response), "
        f"gradient checkpointing {'on' if work.gradient_checkpointing else 'off'}, precision {work.precision}, "
        f"rollouts by {work.rollout}"
        + (f", learner sharded over {work.processes} processes" if work.processes > 1 else "")
    ]
    for device in result.devices:
        lines.append(
            f"  {device.name}: peak {device.peak / GiB:.1f} of {device.capacity / GiB:.1f} GiB usable "
            f"({'fits' if device.fits else 'does NOT fit'})"
        )
        lines += [f"    {name:<22}{size / GiB:8.2f} GiB" for name, size in device.parts.items() if size]
    return "\n".join(lines + [f"  {note}" for note in result.notes])


# The handouts' models, from their published config.json (Qwen2.5-Math-1.5B: CS336 A5 2025 and UW; Qwen3-0.6B: PKU;
# OLMo-2-0425-1B: CS336 A5 2026), so that planning them needs no network. Qwen3's q_norm / k_norm (2 x 128 weights a
# layer) are not counted; OLMo 2's, over the whole query and key widths, are.
PUBLISHED_SHAPES = {
    "Qwen/Qwen2.5-Math-1.5B": ModelShape(
        hidden=1536,
        layers=28,
        heads=12,
        kv_heads=2,
        head_dim=128,
        intermediate=8960,
        vocab=151936,
        tied_embeddings=True,
        qkv_bias=True,
    ),
    "Qwen/Qwen3-0.6B": ModelShape(
        hidden=1024,
        layers=28,
        heads=16,
        kv_heads=8,
        head_dim=128,
        intermediate=3072,
        vocab=151936,
        tied_embeddings=True,
        qkv_bias=False,
    ),
    "allenai/OLMo-2-0425-1B": ModelShape(
        hidden=2048,
        layers=16,
        heads=16,
        kv_heads=16,
        head_dim=128,
        intermediate=8192,
        vocab=100352,
        tied_embeddings=False,
        qkv_bias=False,
        qk_norm=True,
    ),
}


def model_shape(model: str) -> ModelShape:
    """The shape from the model's config.json alone (a local folder, a hub id, or `smollm2-135m`): no weights. The
    handouts' hub models (PUBLISHED_SHAPES) need no network; any other model whose config cannot be read is a
    ValueError of one line naming --model."""
    from transformers import AutoConfig

    from alignment.models.loading import resolve_model

    if model in PUBLISHED_SHAPES and not (Path(model) / "config.json").is_file():  # a hub id, not a local folder
        return PUBLISHED_SHAPES[model]
    location = resolve_model(model)
    try:
        return ModelShape.from_config(AutoConfig.from_pretrained(location))
    except (OSError, ValueError) as err:  # no network, no such repo or folder, not a transformers config
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(
            f"--model {model}: cannot read its config.json ({reason}); pass --model PATH, a local folder holding it"
        ) from None


def grpo_workload(
    config: Any, shape: ModelShape, prompt_tokens: int = ASSUMED_PROMPT_TOKENS, processes: int = 1
) -> Workload:
    """A GRPOConfig's settings as a Workload (on a GPU --precision defaults to bf16-mixed), for a learner sharded over
    `processes` (which samples with hf). With LoRA only the adapters have gradients and AdamW states, and the KL
    reference is the model with its adapters off: no copy."""
    lora = config.lora_rank > 0
    return Workload(
        precision=resolve_precision(config.precision, "cuda"),
        micro_batch=config.micro_train_batch_size,
        prompt_tokens=prompt_tokens,
        response_tokens=config.sampling_max_tokens,
        rollout_batch=config.rollout_batch_size,
        group_size=config.group_size,
        gradient_checkpointing=config.gradient_checkpointing,
        kl_reference=config.kl_reference and not lora,
        rollout="hf" if config.backend in ("hf", "transformer_lm") or processes > 1 else "vllm",
        gpu_memory_utilization=config.gpu_memory_utilization,
        trainable_fraction=shape.lora_parameters(config.lora_rank, config.lora_target_modules) / shape.parameters()
        if lora
        else 1.0,
        processes=processes,
        previous_copy=config.kl_prev_step,
        teacher_parameters=0 if config.teacher is None else model_shape(config.teacher).parameters(),
    )


def report(shape: ModelShape, work: Workload, machine: Machine) -> tuple[MemoryPlan, str]:
    """The plan and its text; when it does not fit, the text ends with the flags that would make it fit."""
    result = plan(shape, work, machine)
    text = describe(result, machine, work, shape)
    if not result.fits:
        fixes = remedies(shape, work, machine)
        text += (
            "\ndoes not fit; it would with " + " or ".join(fixes)
            if fixes
            else "\ndoes not fit, and no change of microbatch, checkpointing, reference or vLLM share makes it: "
            "a larger GPU is needed"
        )
    return result, text
