"""The rollout's forward pass, kept for the learner, so that on-policy GRPO does not compute it twice.

With one optimizer step per rollout batch, the policy that samples a batch is the policy then trained on it:
the training forward would recompute, token for token, what the sampler already computed. Nearly all of a
transformer's forward arithmetic is in its linear layers. While sampling, a ForwardTape keeps every
nn.Linear output by token slot; in training, each linear returns its kept output instead of multiplying again,
and its backward is the usual pair of products (grad_input = grad @ W, grad_W = grad^T @ input). Everything
else (embeddings, norms, rotary positions, attention, activations) runs as usual and supplies those inputs. The
result is the gradient at the sampler's own activations, equal to recomputing them up to the rounding of
differently shaped products (tests/test_forward_tape.py), for a third less arithmetic in the train phase.
While replaying, weight gradients are also added into .grad in place, the embedding's only at the rows used.

Samplers say which tokens each model call feeds (`add_prompts`, `add_response_tokens`), and their linear layers
hand their outputs to `record` (alignment.rollout.decoding.sampling_linears). Slots number those tokens: a batch
of prompts takes (prompts x width) slots, its left-padded prefill block, then (max_tokens x rows) for its rows'
response tokens, time-major so that a decode step with every row still running writes one contiguous block.
`row_slots` gives the slot of every input position of a RolloutBatch, -1 where nothing was fed (padding, a
row's last token; those replay as zeros), and checks that each slot was fed the batch's token there.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
from torch import nn


class _Replayed(torch.autograd.Function):
    """x @ W^T + b, its value read from the tape at `index`; backward as for the product itself.

    The weight's gradient is added into W.grad in place, as one product (addmm_) rather than autograd's new
    weight-sized tensor per microbatch and a separate addition into W.grad: 3.41 s instead of 3.93 s for the
    CPU demo's four microbatches (bench/cpu_kernels.py). W's gradient hooks therefore do not see it.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        store: torch.Tensor,
        index: torch.Tensor,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return store.index_select(0, index).view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_x = (g @ weight).view(x.shape) if ctx.needs_input_grad[0] else None
        if ctx.needs_input_grad[1]:
            inputs = x.reshape(-1, x.shape[-1])
            if weight.grad is None:
                weight.grad = g.t() @ inputs
            else:
                weight.grad.addmm_(g.t(), inputs)
        grad_bias = g.sum(dim=0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, None, grad_bias, None, None


class _Gathered(torch.autograd.Function):
    """nn.Embedding's lookup; backward adds into W.grad in place at the rows used, rather than autograd's dense
    zero-filled (vocab, d) gradient per microbatch added into W.grad: 60 ms instead of 265 ms for the CPU demo's
    four microbatches (bench/cpu_kernels.py)."""

    @staticmethod
    def forward(ctx: Any, ids: torch.Tensor, weight: torch.Tensor, padding_idx: int | None) -> torch.Tensor:
        ctx.save_for_backward(ids, weight)
        ctx.padding_idx = padding_idx
        return torch.nn.functional.embedding(ids, weight, padding_idx)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:
        ids, weight = ctx.saved_tensors
        rows, grad = ids.flatten(), grad.reshape(-1, grad.shape[-1])
        if ctx.padding_idx is not None:  # as nn.Embedding: the padding token's row gets no gradient
            keep = rows != ctx.padding_idx
            rows, grad = rows[keep], grad[keep]
        if weight.grad is None:
            weight.grad = torch.zeros_like(weight)
        weight.grad.index_add_(0, rows, grad)
        return None, None, None


def _gather(module: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
    if module.max_norm is not None or module.scale_grad_by_freq or module.sparse:
        raise RuntimeError("replaying a model whose embedding renormalizes, scales by frequency or is sparse")
    return _Gathered.apply(ids, module.weight, module.padding_idx)


@contextmanager
def module_forwards(model: nn.Module, forwards: dict[type[nn.Module], Callable[..., torch.Tensor]]) -> Iterator[None]:
    """Inside, each module of `model` whose type (exactly: a subclass may compute otherwise) is a key of `forwards`
    computes forwards[type](module, x) instead of its own forward."""
    modules = [m for m in model.modules() if type(m) in forwards]
    if any("forward" in vars(m) for m in modules):
        raise RuntimeError("the model's layers already compute another way (nested module_forwards)")
    for m in modules:
        m.forward = partial(forwards[type(m)], m)  # an instance attribute: nn.Module.__call__ finds it first
    try:
        yield
    finally:
        for m in modules:
            del m.forward


def _target(slots: torch.Tensor) -> slice | torch.Tensor:
    """Where a call's rows go in a store: a slice when the slots are consecutive (one copy), else an index."""
    flat = slots.flatten()
    first = int(flat[0])
    if torch.equal(flat, torch.arange(first, first + len(flat), device=flat.device)):
        return slice(first, first + len(flat))
    return flat


def has_dropout(model: nn.Module) -> bool:
    """Whether training-mode forwards of `model` differ from the sampler's: a dropout module or setting above 0."""
    if any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    settings = config.to_dict() if hasattr(config, "to_dict") else vars(config) if config is not None else {}
    return any(("dropout" in k or "pdrop" in k) and isinstance(v, float) and v > 0 for k, v in settings.items())


class ForwardTape:
    """Every nn.Linear output of `model` by token slot, recorded while sampling and replayed in training
    (layers of subclasses of nn.Linear compute as usual).

    `head` is the model's LM head (one of its linears), which samplers call on fewer positions than the body.
    """

    def __init__(self, model: nn.Module, head: nn.Linear) -> None:
        self.model = model
        self.linears = [m for m in model.modules() if type(m) is nn.Linear]
        if not any(m is head for m in self.linears):
            raise ValueError("the LM head must be one of the model's nn.Linear layers")
        self.head = head
        self.params = list(model.parameters())
        self.capacity = 0  # slots each store holds; one more row of zeros follows them
        self.stores: dict[nn.Linear, torch.Tensor] = {}
        self.tokens = torch.empty(0, dtype=torch.long)  # (capacity,) the token fed at each slot, -1 if none
        self.versions: list[int] | None = None  # the parameters' version counters when recorded
        self._clear()

    def bytes_per_slot(self) -> int:
        return sum(m.out_features * m.weight.element_size() for m in self.linears)

    def _clear(self) -> None:
        self.used = 0
        self.prompt_start: list[int] = []  # per row: slot of its prompt's first token
        self.prompt_length: list[int] = []
        self.response_start: list[int] = []  # per row: slot of its first response token
        self.response_stride: list[int] = []  # slots between its consecutive response tokens
        self.fed: list[int] = []  # per row: response tokens fed to the model
        self.versions = None
        self._batch = (0, 0, 0)  # the latest add_prompts batch: its first row, response block, rows
        self._running = torch.empty(0, dtype=torch.long)  # its rows still running (indices into it)
        self._step = 0  # response tokens fed to it so far, per running row
        self.tokens.fill_(-1)
        self._body: slice | torch.Tensor | None = None
        self._head: slice | torch.Tensor | None = None

    # --- the sampler's side -------------------------------------------------------------------------

    @contextmanager
    def recording(self, engine: Any) -> Iterator[None]:
        """Record the forward passes of `engine.generate` calls made inside (engines with a `tape` attribute)."""
        self._clear()
        engine.tape = self
        try:
            yield
        finally:
            engine.tape = None
        self.versions = [p._version for p in self.params]

    def add_prompts(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, n: int, max_tokens: int) -> None:
        """A sampler's next batch: its left-padded prompts (prompts, width) and their real-token mask, n rows per
        prompt (prompt-major), at most max_tokens response tokens a row. The next model call prefills these
        prompts; the head sees their last column."""
        prompts, width = prompt_mask.shape
        rows, start = prompts * n, self.used
        responses = start + prompts * width
        self._reserve(responses + max_tokens * rows, prompt_mask.device)
        for p, length in enumerate(prompt_mask.sum(dim=1).tolist()):
            for j in range(n):
                self.prompt_start.append(start + p * width + width - length)
                self.prompt_length.append(length)
                self.response_start.append(responses + p * n + j)
                self.response_stride.append(rows)
                self.fed.append(0)
        self.used = responses + max_tokens * rows
        self._batch = (len(self.fed) - rows, responses, rows)
        self._running, self._step = torch.arange(rows, device=prompt_mask.device), 0
        block = torch.arange(start, responses, device=prompt_mask.device).view(prompts, width)
        self.tokens[block[prompt_mask]] = prompt_ids[prompt_mask]
        self._body, self._head = _target(block), _target(block[:, -1])

    def add_response_tokens(self, tokens: torch.Tensor, kept: torch.Tensor | None) -> None:
        """The next model call feeds `tokens`, the next response token of each row still running; `kept` as
        decode's advance gets it: the indices, among the previous call's rows, of those that go on (None: all)."""
        first_row, responses, count = self._batch
        if kept is not None:
            self._running = self._running[kept]
        rows, t = self._running, self._step
        self._step += 1
        for row in rows.tolist():
            self.fed[first_row + row] = t + 1
        slots = responses + t * count + rows
        self.tokens[slots] = tokens
        self._body = self._head = _target(slots)

    def record(self, module: nn.Linear, y: torch.Tensor) -> None:
        """Keep `module`'s output y (..., out_features) of the current model call at its tokens' slots."""
        target = self._head if module is self.head else self._body
        if target is None:
            raise RuntimeError("a model call while recording, but the sampler did not say which tokens it feeds")
        rows = y.reshape(-1, y.shape[-1])
        expected = target.stop - target.start if isinstance(target, slice) else len(target)
        if len(rows) != expected:
            raise RuntimeError(f"the tape expected {expected} tokens in a linear layer's call, it got {len(rows)}")
        store = self.stores[module]
        if isinstance(target, slice):
            store[target] = rows
        else:
            store.index_copy_(0, target, rows)

    def _reserve(self, slots: int, device: torch.device) -> None:
        """Room for `slots` slots (and the zero row), keeping what is recorded so far."""
        if slots <= self.capacity:
            return
        capacity = max(slots, self.capacity * 3 // 2)
        with torch.inference_mode(False):  # ordinary tensors, though samplers record under inference mode
            for m in self.linears:
                store = torch.zeros((capacity + 1, m.out_features), dtype=m.weight.dtype, device=device)
                if m in self.stores:
                    store[: self.used] = self.stores[m][: self.used]
                self.stores[m] = store
            tokens = torch.full((capacity,), -1, dtype=torch.long, device=device)
            tokens[: self.used] = self.tokens[: self.used]
            self.tokens = tokens
        self.capacity = capacity

    # --- the learner's side -------------------------------------------------------------------------

    def row_slots(self, input_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """(batch, seq) slot of every input position of a RolloutBatch of the recorded rows, in the order they
        were sampled, -1 where nothing was fed. input_ids, response_mask: that batch's (batch, seq) tensors; a
        ValueError unless its rows are the recorded ones, token for token."""
        batch, seq = response_mask.shape
        if batch != len(self.fed):
            raise ValueError(f"the batch has {batch} rows, the tape recorded {len(self.fed)}")
        prompt_start, prompt_length, response_start, stride, fed = (
            torch.tensor(v, dtype=torch.long)[:, None]
            for v in (self.prompt_start, self.prompt_length, self.response_start, self.response_stride, self.fed)
        )
        answered = response_mask.any(dim=1)
        starts = (response_mask.float().argmax(dim=1) + 1)[:, None].cpu()
        too_long = response_mask.sum(dim=1).cpu() > fed[:, 0] + 1  # a row's last token is never fed
        if not torch.equal(starts[answered], prompt_length[answered]) or too_long.any():
            raise ValueError("the batch's prompts or responses are not those the tape recorded")
        column = torch.arange(seq)[None, :]
        in_response = (column >= prompt_length) & (column < prompt_length + fed)
        slots = torch.where(column < prompt_length, prompt_start + column, -1)
        slots = torch.where(in_response, response_start + (column - prompt_length) * stride, slots).to(input_ids.device)
        fed_here = slots >= 0
        if not torch.equal(self.tokens[slots[fed_here]], input_ids[fed_here]):
            raise ValueError("the batch's tokens are not those the sampler fed while the tape recorded")
        return slots

    @contextmanager
    def replaying(self, slots: torch.Tensor, head_slots: torch.Tensor | None = None) -> Iterator[None]:
        """Inside, the model's linear layers return the recorded outputs at `slots` (the body's token
        positions, -1 for zeros) and the head's at `head_slots` (default: the same), differentiably."""
        if self.versions is None:
            raise RuntimeError("nothing was recorded to replay")
        if self.versions != [p._version for p in self.params]:
            raise RuntimeError(
                "the policy changed since its rollout was recorded (an optimizer step or a weight "
                "load); the recorded forward is no longer the policy's"
            )
        zero_row = self.capacity

        def index(s: torch.Tensor) -> torch.Tensor:
            return s.flatten().where(s.flatten() >= 0, zero_row)

        self._body = index(slots)
        self._head = self._body if head_slots is None else index(head_slots)
        try:
            with module_forwards(self.model, {nn.Linear: self._replay, nn.Embedding: _gather}):
                yield
        finally:
            self._body = self._head = None

    def _replay(self, module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        index = self._head if module is self.head else self._body
        if index.numel() * x.shape[-1] != x.numel():
            tokens = x.numel() // x.shape[-1]
            raise RuntimeError(f"replaying {index.numel()} slots into a linear layer's call of {tokens} tokens")
        return _Replayed.apply(x, module.weight, module.bias, self.stores[module], index)
