"""Training precision (`--precision`): the dtypes a run keeps the policy, its gradients and AdamW states in, computes
in, and samples rollouts in.

    precision    forward's weights   float32 master   gradients   AdamW states   loss scaling   rollout engine
    fp32         float32             -                float32     float32        -              float32
    bf16         bfloat16            -                bfloat16    bfloat16       -              bfloat16
    bf16-mixed   bfloat16            yes              float32     float32        -              bfloat16
    fp16-mixed   float16             yes              float32     float32        dynamic        float16

fp32 is the CPU default; bf16-mixed the GPU default. bf16 is the handouts' loading advice (the model loaded in bfloat16,
AdamW over it): a weight moves only by a whole bfloat16 step, 2^-8 of its size, so an update under half of one (4e-5 for
a weight of 0.02; AdamW's first step at lr 1e-5 is 1e-5) is rounded away (docs/concepts/memory_and_precision.md measures
the fraction). The mixed modes keep the weights AdamW updates in float32 (the master copy) and the policy computes with
a bfloat16 (float16) copy rounded from them after every step, as Megatron's mixed precision and FSDP2's
MixedPrecisionPolicy do, rather than with torch.autocast: the policy's forward is called by the learner, by the
in-process samplers (which sample the policy object itself), by the forward tape and by our TransformerLM's own decoder,
and a low-precision copy makes every one of them compute alike with no context to enter; the weights a rollout engine
gets are then, bit for bit, those the trainer computes with. The master starts from the policy as loaded, in the compute
dtype (the handouts' bfloat16 hub checkpoints lose nothing; a float32 one is rounded once). Each microbatch's gradient
is added to a float32 gradient of the master as soon as autograd has it (a post-accumulate hook), so accumulating many
microbatches rounds in float32.

A policy sharded over processes (alignment/distributed/sharding.py) keeps its float32 shards as the master: FSDP2's
MixedPrecisionPolicy gathers them in the compute dtype and reduces gradients in float32.

fp16-mixed (arXiv 2510.26788: float16's 10-bit mantissa removes most of the training-inference mismatch that
bfloat16's 7 bits cause) scales gradients where they enter the model: the gradient of the LM head's float32 logits
(whole, or a chunk at a time: alignment/models/chunked_head.py) is multiplied by torch.amp.GradScaler's scale before it
is cast to float16, so that small gradients do not flush to zero. The step unscales the master's gradients, skips the
update when any is inf or NaN (the scale is halved), and grows the scale after 2,000 clean steps; the scaler's state
is saved with the optimizer's.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch import nn

from alignment.distributed.sharding import clip_grad_norm, is_sharded
from alignment.logprobs import output_head
from alignment.models.chunked_head import scale_gradients
from alignment.models.lora import trainable_parameters

Precision = Literal["fp32", "bf16", "bf16-mixed", "fp16-mixed"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
MASTER, SCALER = "master", "grad_scaler"  # the optimizer state's entries for the master weights and the scaler


@dataclass(frozen=True)
class Mode:
    compute: torch.dtype  # the forward's weights and activations, and the rollout engine's dtype
    master: bool  # float32 master weights (and float32 gradients and AdamW states) beside the compute copy
    loss_scaling: bool

    @property
    def compute_bytes(self) -> int:
        return self.compute.itemsize

    def parameter_bytes(self, sharded: bool = False) -> dict[str, int]:
        """Bytes per parameter of the weights, the master copy, the gradient and AdamW's two states (memory plan).
        Sharded, the float32 shards are the master; unsharded, the master is a second copy of the trainable ones."""
        state = 4 if self.master else self.compute_bytes
        weights = 4 if self.master and sharded else self.compute_bytes
        master = 4 if self.master and not sharded else 0
        return {"weights": weights, "master weights": master, "gradients": state, "optimizer": 2 * state}


MODES: dict[str, Mode] = {
    "fp32": Mode(torch.float32, master=False, loss_scaling=False),
    "bf16": Mode(torch.bfloat16, master=False, loss_scaling=False),
    "bf16-mixed": Mode(torch.bfloat16, master=True, loss_scaling=False),
    "fp16-mixed": Mode(torch.float16, master=True, loss_scaling=True),
}


def default_precision(device: str | torch.device) -> Precision:
    """bf16-mixed on a GPU, fp32 on the CPU."""
    return "bf16-mixed" if torch.device(device).type == "cuda" else "fp32"


def resolve_precision(precision: str | None, device: str | torch.device) -> Precision:
    """`precision`, else the device's default; an unknown one is a ValueError naming --precision."""
    if precision is None:
        return default_precision(device)
    if precision not in MODES:
        raise ValueError(f"--precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    return precision  # type: ignore[return-value]


def compute_dtype(precision: str | None, device: str | torch.device) -> torch.dtype:
    """The dtype the policy computes in and its rollout engine samples in."""
    return MODES[resolve_precision(precision, device)].compute


def use_tf32(enabled: bool) -> None:
    """float32 matrix products on CUDA in TensorFloat-32 (--tf32) or in full float32; the CPU's are untouched. Set
    through torch's long-standing switch, which every reader of either of its precision APIs can read back."""
    torch.backends.cuda.matmul.allow_tf32 = enabled


class PolicyOptimizer:
    """AdamW over the policy's trainable parameters in the run's precision: `clip_grad_norm`, `step`, `zero_grad`,
    and `state_dict` / `load_state_dict` for checkpoints (the master weights and the scaler's state included).

    Without a master copy (fp32, bf16, or a sharded policy) it is AdamW over the parameters themselves. `fused`: AdamW's
    fused kernel where the device has one (--fused-adamw), else torch's per-tensor loop.
    """

    def __init__(self, policy: nn.Module, precision: Precision, fused: bool = True, **adamw: Any) -> None:
        mode = MODES[precision]
        self.trainable = trainable_parameters(policy)
        device = self.trainable[0].device if self.trainable else torch.device("cpu")
        keep_master = mode.master and not is_sharded(policy)
        # the parameter each optimizer slot updates: a float32 master, or the policy's own parameter
        self.masters: list[torch.Tensor | None] = [
            p.detach().float() if keep_master and p.dtype != torch.float32 else None for p in self.trainable
        ]
        self.params = [p if m is None else m for p, m in zip(self.trainable, self.masters)]
        for p, master in self.pairs():
            p.register_post_accumulate_grad_hook(_into_master(master))
        # fused (--fused-adamw, on by default): one kernel, 2.7x faster on 2 cores
        self.optimizer = torch.optim.AdamW(self.params, fused=fused and device.type in ("cpu", "cuda"), **adamw)
        self.scaler = torch.amp.GradScaler(device.type) if mode.loss_scaling else None
        if self.scaler is not None:
            scaler = self.scaler  # the function closes over the scaler alone: a deep copy of the policy shares it
            scale_gradients(output_head(policy), lambda grad: scaler.scale(grad))

    def pairs(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(parameter, its float32 master) for each parameter that has one."""
        return ((p, m) for p, m in zip(self.trainable, self.masters) if m is not None)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    def clip_grad_norm(self, max_norm: float) -> float:
        """Gradients into the master copy, unscaled, clipped to `max_norm`; returns the norm before clipping (inf or
        NaN when a float16 gradient overflowed, which `step` then skips; over all shards when sharded)."""
        for p, master in self.pairs():
            if p.grad is not None:  # what no hook moved: the forward tape adds weight gradients in place
                _into_master(master)(p)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        return clip_grad_norm(self.params, max_norm)

    def step(self) -> bool:
        """AdamW's step (on the master), then the compute copy rounded from the master; False when the loss
        scaler skipped it (an inf or NaN gradient)."""
        if self.scaler is None:
            self.optimizer.step()
            stepped = True
        else:
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            stepped = self.scaler.get_scale() >= scale  # update backs the scale off exactly when it skipped
        self._round_copy()
        return stepped

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        for p in self.trainable:
            p.grad = None

    def metrics(self) -> dict[str, float]:
        """The loss scale, for the metrics row (fp16-mixed only)."""
        return {} if self.scaler is None else {"loss_scale": self.scaler.get_scale()}

    def state_dict(self) -> dict[str, Any]:
        """AdamW's state dict, each slot with a master holding it as MASTER, and the scaler's state as SCALER."""
        saved = self.optimizer.state_dict()
        state = {index: dict(values) for index, values in saved["state"].items()}  # not AdamW's live dicts
        for index, master in enumerate(self.masters):
            if master is not None:
                state.setdefault(index, {})[MASTER] = master
        out = {"state": state, "param_groups": saved["param_groups"]}
        return out | ({SCALER: self.scaler.state_dict()} if self.scaler is not None else {})

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore what `state_dict` gave. A slot saved without a master (a checkpoint written before the master
        copy existed) starts its master from the policy's loaded weights."""
        state = {int(index): dict(values) for index, values in saved["state"].items()}
        with torch.no_grad():
            for index, (p, master) in enumerate(zip(self.trainable, self.masters)):
                kept = state.get(index, {}).pop(MASTER, None)
                if master is not None:
                    master.copy_(p if kept is None else kept)
        self.optimizer.load_state_dict(
            {"state": {k: v for k, v in state.items() if v}, "param_groups": saved["param_groups"]}
        )
        if self.scaler is not None and SCALER in saved:
            self.scaler.load_state_dict(saved[SCALER])
        self._round_copy()

    @torch.no_grad()
    def _round_copy(self) -> None:
        pairs = list(self.pairs())
        if pairs:  # one launch for every parameter, not one each
            torch._foreach_copy_([p for p, _ in pairs], [m for _, m in pairs])


def _into_master(master: torch.Tensor):
    """A post-accumulate-grad hook: add the parameter's gradient to the master's float32 one and free it."""

    def hook(p: torch.Tensor) -> None:
        if master.grad is None:
            master.grad = p.grad.float()  # type: ignore[union-attr]
        else:
            master.grad.add_(p.grad)  # type: ignore[arg-type]
        p.grad = None

    return hook
