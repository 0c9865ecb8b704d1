"""The static decode path: a decode step of fixed shapes over a static KV cache, captured as a CUDA graph.

The eager loop (alignment/rollout/decoding.py) waits on the host at every token: it reads each row's token back,
checks stop strings, drops finished rows from the cache, and launches every kernel of the model from Python. On an
H100 the hf backend decoded the 1.5B model that way at 2.5% of the bandwidth bound bench/hf_generation_throughput.py
computes (256 rows x 512 new tokens). Here:

- Slots. A batch's rows sit in `capacity` slots of fixed-address buffers (SlotState): each layer's keys and values
  (capacity, kv_heads, length, head_dim), where length is the prompt width plus max_tokens rounded up to a multiple of
  64, and the rows' last tokens, positions and stream keys. Prompts occupy columns [0, width) as prefilled
  (left-padded); the token sampled at step t is fed at step t + 1, which writes its key and value at column width + t.
  A step attends over the columns written so far rounded up to a multiple of `span_multiple` (its span), masked by
  position: a key counts where it is a real prompt token or a response column already written. Attending over the
  whole reserved length instead would read the full cache every step (4.2 GB a step at 256 rows x (64 + 512) columns
  of the 1.5B shape, where the filled part averages 2.35 GB).
- The first token of every row is sampled from the prefill's logits. Then one step = run the model on every slot's
  last token (the backend's `step_logits`), sample each slot's next token from the logits it returns (temperature,
  top-p, min_tokens' EOS ban, its own random stream: alignment/rollout/row_streams.py), write it and its log-prob into
  the row's output buffers and note the row's first EOS; the logits live only inside the step. No host reads: on CUDA
  the whole step is captured as a CUDA graph, one per batch-size bucket (powers of two and three times powers of two,
  up to the capacity), span and sampling setting (with or without the EOS ban of the steps before min_tokens),
  replayed every later step and call while the weights stay at the same addresses (weight loads copy in place; a moved
  parameter recaptures). Within a call buckets only shrink and spans only grow, so a call captures at most one graph
  per bucket and span it reaches. On the CPU the same step runs without capture.
- A graph's first replay is checked, once per bucket, span and setting: the state a step writes is kept, the graph
  replayed, its outputs (tokens, log-probs, the KV column it wrote) set against the same step run eagerly from the
  same state. A capture that fails,
  or a replay that differs, warns once, and the decoder's steps run uncaptured from then on: the batch finishes with
  the same tokens, at the eager step's speed.
- The host syncs every `sync_every` steps. It launches the next window before reading the last one, so the GPU never
  waits on it: it copies the window's tokens and log-probs, ends rows at their first EOS, at a stop string (checked
  with the tokenizer exactly as the eager loop checks it, step by step) or at max_tokens, and discards whatever a row
  sampled after its end. When the rows still running fit a smaller bucket, they move to the front slots. A row
  whose logits held a NaN or no finite value drew token -1 (alignment/rollout/decoding.py's flag_non_finite, the
  sampling kernel): the host, reading the window, stops the rollout with an error naming the step and the row
  (the step fed it token 0, so that nothing reads outside the embedding meanwhile).

Each row's tokens, log-probs and finish reason are those of the eager loop (the same prefill, the same draws); the log-
probs agree to rounding, since a fixed-length masked attention and other batch sizes sum in another order.
"""

import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from alignment.rollout.decode_choice import SPAN_MULTIPLE, check_sync_every
from alignment.rollout.decoding import check_drawn, choose_tokens, finish_rollout, stop_hits, stop_tail, stream_keys
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.utils.faults import fault_point

LENGTH_MULTIPLE = 64  # cache lengths are rounded up to this, so that later calls of a similar width reuse the graphs


@dataclass(frozen=True)
class KVSpec:
    """What one layer's cache holds: (rows, kv_heads, length, head_dim) keys and values of `dtype`, `layers` times."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype


@dataclass
class Prefill:
    """A batch's prompts after their prefill: what the static loop starts from."""

    logits: torch.Tensor  # (prompts, vocab) each prompt's next-token logits
    keys: Sequence[torch.Tensor]  # per layer (prompts, kv_heads, width, head_dim)
    values: Sequence[torch.Tensor]
    prompt_mask: torch.Tensor  # (prompts, width) bool: the real (not padding) prompt tokens
    positions: torch.Tensor  # (prompts,) the rotary position of each prompt's first new token


class SlotState:
    """The fixed-address tensors a step reads and writes, for `capacity` slots and caches of `length` columns."""

    def __init__(self, capacity: int, length: int, kv: KVSpec, vocab: int, device: torch.device):
        self.capacity, self.length, self.vocab, self.device = capacity, length, vocab, device

        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        self.keys = [zeros(capacity, kv.kv_heads, length, kv.head_dim, dtype=kv.dtype) for _ in range(kv.layers)]
        self.values = [zeros(capacity, kv.kv_heads, length, kv.head_dim, dtype=kv.dtype) for _ in range(kv.layers)]
        self.key_valid = zeros(capacity, length, dtype=torch.bool)  # real prompt tokens and every response column
        self.columns = torch.arange(length, device=device)
        self.column = zeros(1)  # where the step's input token goes
        self.step = zeros()  # the step being sampled
        self.eos = zeros(vocab, dtype=torch.bool)  # the EOS tokens
        # per slot
        self.tokens = zeros(capacity)  # the token the step feeds: the last one sampled
        self.positions = zeros(capacity)
        self.stream_keys = zeros(capacity)
        self.row_of_slot = zeros(capacity)  # the row whose outputs a slot writes; `capacity` for an empty slot
        # per row, the last one a sink for empty slots
        self.out_tokens = zeros(capacity + 1, length)
        self.out_logprobs = zeros(capacity + 1, length, dtype=torch.float32)
        self.first_eos = zeros(capacity + 1)  # the step of the row's first EOS, `length` if none yet

    def nbytes(self) -> int:
        """The bytes these tensors hold."""
        tensors = [t for v in vars(self).values() for t in (v if isinstance(v, list) else [v])]
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))

    def slots(self, rows: int, span: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's (keys, values) of the first `rows` slots and `span` columns: (rows, kv_heads, span, head_dim)
        views, written in place."""
        return [(k[:rows, :, :span], v[:rows, :, :span]) for k, v in zip(self.keys, self.values)]

    def attention_mask(self, rows: int, span: int) -> torch.Tensor:
        """(rows, 1, 1, span) bool: the keys among the first `span` columns this step's tokens attend to."""
        return (self.key_valid[:rows, :span] & (self.columns[:span] <= self.column))[:, None, None, :]


StepLogits = Callable[[SlotState, int, int], torch.Tensor]


def bucket_for(rows: int, capacity: int) -> int:
    """The slots a step runs for `rows` live rows: the next power of two or three times a power of two (so at most
    half the slots run empty), at most the capacity."""
    power = 1 << max(rows - 1, 0).bit_length()
    return min(capacity, power * 3 // 4 if power >= 4 and rows <= power * 3 // 4 else power)


def span_for(columns: int, length: int, multiple: int) -> int:
    """The columns a step attends over when `columns` are written: rounded up to `multiple`, at most `length`."""
    return min(length, -(-columns // multiple) * multiple)


@dataclass
class Window:
    """Steps [start, end) launched; their outputs copied to the host once `ready` has passed."""

    start: int
    end: int
    tokens: torch.Tensor
    logprobs: torch.Tensor
    first_eos: torch.Tensor
    ready: torch.cuda.Event | None


class StaticDecoder:
    """Decodes batches along the static path for one model: its slot state and CUDA graphs, kept across calls.

    step_logits(state, rows, span) runs the model on state.tokens[:rows] at state.positions[:rows], writing each layer's
    new key and value at state.column of state.slots(rows, span) and attending under state.attention_mask(rows, span);
    it returns the next-token logits (rows, vocab). It must read nothing back to the host. `weights()` lists the
    tensors a captured step reads from the model (its parameters and buffers); when one moves, the graphs are captured
    again. Without `keep`, the slots and graphs are freed after each batch: a model trained on the same device between
    rollouts needs that memory back (as a vLLM engine sharing the policy's GPU sleeps), and captures again at the next
    one. `span_multiple`: a step attends over its columns rounded up to this (SPAN_MULTIPLE).
    """

    def __init__(
        self,
        step_logits: StepLogits,
        kv: KVSpec,
        weights: Callable[[], list[torch.Tensor]],
        sync_every: int,
        keep: bool = True,
        span_multiple: int = SPAN_MULTIPLE,
    ) -> None:
        check_sync_every(sync_every)
        if span_multiple < 1:
            raise ValueError(f"span_multiple must be >= 1, got {span_multiple}")
        self.step_logits, self.kv, self.weights, self.sync_every = step_logits, kv, weights, sync_every
        self.keep, self.span_multiple = keep, span_multiple
        self.state: SlotState | None = None
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.pool = None
        self.capture_stream: torch.cuda.Stream | None = None
        self.addresses: list[int] = []
        self.captures = 0  # graphs captured so far (tests check that later calls reuse them)
        self.unchecked: set[tuple] = set()  # graphs not yet replayed, whose first replay is checked
        self.checked: set[tuple] = set()  # keys whose graph passed that check (kept across releases and recaptures)
        self.uncaptured: str | None = None  # why steps no longer run as CUDA graphs (a capture failed or differed)

    def held_bytes(self) -> int:
        """The bytes of the slots kept between calls, which the next call reuses rather than allocates."""
        return 0 if self.state is None else self.state.nbytes()

    def release(self) -> None:
        """Free the slot state and the graphs with their memory pool (the next batch allocates and captures anew)."""
        self.state = None
        self.graphs.clear()
        self.unchecked.clear()
        self.pool = None
        self.capture_stream = None

    def decode_rows(
        self,
        prefill: Prefill,
        n: int,
        tokenizer: PreTrainedTokenizerBase,
        prompt_indices: Sequence[int],
        eos_ids: Sequence[int],
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        bar: tqdm | None = None,
        version: Callable[[], int] | None = None,
    ) -> Iterator[tuple[int, Rollout]]:
        """decoding.decode_rows's contract (same tokens, log-probs to rounding, finish reasons), rows yielded at the
        sync after they end; n rows continue each prefilled prompt (prompt-major)."""
        try:
            yield from self._decode_rows(
                prefill, n, tokenizer, prompt_indices, eos_ids, sampling, generator, bar, version
            )
        finally:
            if not self.keep:
                self.release()

    def _decode_rows(
        self,
        prefill: Prefill,
        n: int,
        tokenizer: PreTrainedTokenizerBase,
        prompt_indices: Sequence[int],
        eos_ids: Sequence[int],
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        bar: tqdm | None,
        version: Callable[[], int] | None,
    ) -> Iterator[tuple[int, Rollout]]:
        prompts, width = prefill.prompt_mask.shape
        rows, device = prompts * n, prefill.logits.device
        state = self._state_for(rows, width + sampling.max_tokens, prefill.logits.shape[-1], device)
        self._start(state, prefill, n, eos_ids, sampling, generator)
        slot_rows = list(range(rows))  # the row in each occupied slot, front slots first
        bucket = bucket_for(rows, state.capacity)
        if bucket > rows:  # empty slots compute a copy of slot 0 into the sink row
            self._move(state, slot_rows, bucket, width)
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        running = set(range(rows))
        tail = stop_tail(sampling.stop) if sampling.stop else 0
        windows: deque[Window] = deque()
        launched = 0

        def launch() -> None:
            nonlocal launched
            end = min(launched + self.sync_every, sampling.max_tokens)
            for step in range(max(launched, 1), end):  # step 0 was sampled from the prefill's logits
                # step t feeds the token of step t - 1, written at column width + t - 1
                span = span_for(width + step, state.length, self.span_multiple)
                self._run_step(state, bucket, span, step < sampling.min_tokens, sampling)
            windows.append(self._read_back(state, rows, launched, end, device))
            launched = end

        launch()
        while windows:
            window = windows.popleft()
            if launched < sampling.max_tokens:
                launch()  # the device works on the next window while the host reads this one
            if window.ready is not None:
                window.ready.synchronize()
            ended = self.end_rows(window, tokens, logprobs, running, tokenizer, sampling, tail)
            if window.start == 0:
                fault_point("rollout")
            if bar is not None:
                bar.set_postfix(step=window.end, live=len(running), refresh=False)
                bar.update(len(ended))
            for row, length, finish in ended:
                rollout = finish_rollout(
                    tokenizer, eos_ids, prompt_indices[row], tokens[row][:length], logprobs[row][:length], finish,
                    sampling,
                )  # fmt: skip
                yield row, rollout if version is None else replace(rollout, versions=[version()] * length)
            if not running:
                break
            smaller = bucket_for(len(running), state.capacity)
            if smaller < bucket:  # enqueued after the window already launched, which runs on the larger bucket
                order = [slot for slot, row in enumerate(slot_rows) if row in running]
                slot_rows = [slot_rows[slot] for slot in order]
                self._move(state, order, smaller, width + launched - 1)
                bucket = smaller

    # --- the device side ----------------------------------------------------------------------------------------

    def _state_for(self, rows: int, needed: int, vocab: int, device: torch.device) -> SlotState:
        """The slot state, reused when it holds `rows` rows of `needed` columns, else allocated anew (no graphs)."""
        state = self.state
        fits = state is not None and state.capacity >= rows and state.length >= needed
        if not fits or (state.vocab, state.device) != (vocab, device):
            self.release()
            state = None  # the old buffers go before the new ones are allocated
            length = -(-needed // LENGTH_MULTIPLE) * LENGTH_MULTIPLE
            state = SlotState(rows, length, self.kv, vocab, device)
            self.state = state
        addresses = [t.data_ptr() for t in self.weights()]
        if addresses != self.addresses:
            self.graphs.clear()
            self.unchecked.clear()
            self.addresses = addresses
        return state

    def _start(
        self,
        state: SlotState,
        prefill: Prefill,
        n: int,
        eos_ids: Sequence[int],
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> None:
        """The prefilled prompts into slots 0 .. rows - 1 (row = prompt * n + sample) and their first tokens sampled
        from the prefill's logits (step 0)."""
        prompts, width = prefill.prompt_mask.shape
        rows = prompts * n
        for buffers, prompt in zip((*state.keys, *state.values), (*prefill.keys, *prefill.values), strict=True):
            grouped = buffers[:rows].view(prompts, n, *buffers.shape[1:])
            grouped[:, :, :, :width] = prompt[:, None]
        state.key_valid[:rows, :width] = prefill.prompt_mask.repeat_interleave(n, dim=0)
        state.key_valid[:rows, width:] = True
        state.positions[:rows] = prefill.positions.repeat_interleave(n)
        state.stream_keys[:rows] = stream_keys(rows, sampling, generator, state.stream_keys.device)
        state.row_of_slot[:rows] = torch.arange(rows, device=state.row_of_slot.device)
        state.first_eos[:rows] = state.length
        state.eos.zero_()
        state.eos[torch.tensor(list(eos_ids), dtype=torch.long, device=state.eos.device)] = True
        state.step.zero_()
        state.column.fill_(width)
        self._sample(state, prefill.logits.repeat_interleave(n, dim=0), sampling.min_tokens > 0, sampling)

    def _step(self, state: SlotState, bucket: int, span: int, ban_eos: bool, sampling: SamplingConfig) -> None:
        """One decode step for the first `bucket` slots: the model on their last tokens, attending over `span`
        columns, then their next tokens sampled; fixed shapes, no host reads."""
        logits = self.step_logits(state, bucket, span)
        state.positions[:bucket] += 1
        state.column += 1
        self._sample(state, logits, ban_eos, sampling)

    @staticmethod
    def _sample(state: SlotState, logits: torch.Tensor, ban_eos: bool, sampling: SamplingConfig) -> None:
        """The first len(logits) slots' tokens of the current step, drawn from `logits` (slots, vocab), which it
        may overwrite; EOS banned where the step is before min_tokens (`ban_eos`, known on the host, so later steps
        do not pass over the logits for it)."""
        slots = len(logits)
        if ban_eos:
            logits.masked_fill_(state.eos, float("-inf"))
        chosen, chosen_lp = choose_tokens(logits, sampling, state.stream_keys[:slots], state.step)
        rows = state.row_of_slot[:slots]
        at = rows * state.length + state.step
        state.out_tokens.view(-1).index_copy_(0, at, chosen)
        state.out_logprobs.view(-1).index_copy_(0, at, chosen_lp.float())
        fed = chosen.clamp(min=0)  # a row of non-finite logits drew -1, kept in its output for the host to report
        eos_step = torch.where(state.eos[fed], state.step, state.length)
        state.first_eos.scatter_reduce_(0, rows, eos_step, "amin")
        state.tokens[:slots] = fed
        state.step += 1

    def _run_step(self, state: SlotState, bucket: int, span: int, ban_eos: bool, sampling: SamplingConfig) -> None:
        """A step, from its CUDA graph on CUDA: the first step of a bucket, span and setting runs as it is (the
        warm-up a capture needs) and is then captured for the steps after it; the graph's first replay is set against
        the eager step (`_checked_replay`). A capture that fails or a replay that differs warns, and the steps run
        uncaptured from then on (`uncaptured` says why)."""
        device = state.device
        if self.uncaptured is not None or not self._captures_on(device):
            self._step(state, bucket, span, ban_eos, sampling)
            return
        key = (bucket, span, ban_eos, sampling.temperature, sampling.top_p)
        # a capture records the kernels of its own stream's device, and a replay launches on the current device:
        # both on the state's device, which need not be the current one (rollouts on cuda:1 beside a cuda:0 policy)
        with torch.cuda.device(device) if device.type == "cuda" else nullcontext():
            graph = self.graphs.get(key)
            if graph is not None:
                if key in self.unchecked:
                    self.unchecked.discard(key)
                    self.checked.add(key)
                    self._checked_replay(state, graph, bucket, span, ban_eos, sampling)
                else:
                    graph.replay()
                return
            self._step(state, bucket, span, ban_eos, sampling)
            try:
                graph = self._capture(device, lambda: self._step(state, bucket, span, ban_eos, sampling))
            except Exception as error:  # the step already ran eagerly: the batch goes on without graphs
                self._give_up(f"capturing a decode step failed ({type(error).__name__}: {str(error).strip()[:300]})")
                return
            self.graphs[key] = graph
            if key not in self.checked:  # a key's graph checked once serves unchecked when captured again
                self.unchecked.add(key)
            self.captures += 1

    @staticmethod
    def _captures_on(device: torch.device) -> bool:
        """Whether steps on `device` are captured as CUDA graphs (tests put a stand-in capture on the CPU)."""
        return device.type == "cuda"

    def _capture(self, device: torch.device, step: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """`step`'s kernels captured as a CUDA graph on `device` (recorded, not run)."""
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
            self.capture_stream = torch.cuda.Stream(device)  # torch's default one is on the first device used
        # begun by hand: torch.cuda.graph would synchronize the device and empty the allocator's cache at each
        # capture, and a call captures one graph per bucket and span it reaches (every call, beside training)
        graph = torch.cuda.CUDAGraph()
        stream = self.capture_stream
        assert stream is not None
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            graph.capture_begin(self.pool, capture_error_mode="thread_local")
            try:
                step()
            finally:
                graph.capture_end()
        torch.cuda.current_stream(device).wait_stream(stream)
        return graph

    def _checked_replay(
        self, state: SlotState, graph: torch.cuda.CUDAGraph, bucket: int, span: int, ban_eos: bool,
        sampling: SamplingConfig,
    ) -> None:  # fmt: skip
        """A graph's first replay, set against the eager step from the same state: what the step writes is kept,
        the graph replayed, what it wrote kept and put back, then the step run eagerly. The eager step's results
        stand; where the two differ, a warning says what differed and the steps run uncaptured from then on. One
        host sync per graph captured."""
        before = self._written(state, bucket)
        graph.replay()
        replayed = self._written(state, bucket, before["column"])
        self._put_back(state, bucket, before)
        self._step(state, bucket, span, ban_eos, sampling)
        eager = self._written(state, bucket, before["column"])
        differing = [
            name
            for name in eager
            if name != "column" and not torch.allclose(replayed[name].double(), eager[name].double(), 1e-4, 1e-5)
        ]
        if differing:
            self._give_up(f"its first replay differs from the eager step in {', '.join(differing)}")

    @staticmethod
    def _written(state: SlotState, bucket: int, column: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Copies of what a step over the first `bucket` slots writes: the slots' tokens and positions, the step and
        column counters, the rows' outputs, and each layer's keys and values at `column` (default: the state's
        column, which the step writes)."""
        column = state.column.clone() if column is None else column
        written = {
            "tokens": state.tokens[:bucket].clone(),
            "positions": state.positions[:bucket].clone(),
            "step": state.step.clone(),
            "column": column,
            "next column": state.column.clone(),
            "out_tokens": state.out_tokens.clone(),
            "out_logprobs": state.out_logprobs.clone(),
            "first_eos": state.first_eos.clone(),
        }
        for layer, (keys, values) in enumerate(zip(state.keys, state.values)):
            written[f"layer {layer} keys"] = keys[:bucket].index_select(2, column)
            written[f"layer {layer} values"] = values[:bucket].index_select(2, column)
        return written

    @staticmethod
    def _put_back(state: SlotState, bucket: int, written: dict[str, torch.Tensor]) -> None:
        """The state as `_written` kept it."""
        state.tokens[:bucket] = written["tokens"]
        state.positions[:bucket] = written["positions"]
        state.step.copy_(written["step"])
        state.column.copy_(written["next column"])
        state.out_tokens.copy_(written["out_tokens"])
        state.out_logprobs.copy_(written["out_logprobs"])
        state.first_eos.copy_(written["first_eos"])
        for layer, (keys, values) in enumerate(zip(state.keys, state.values)):
            keys[:bucket].index_copy_(2, written["column"], written[f"layer {layer} keys"])
            values[:bucket].index_copy_(2, written["column"], written[f"layer {layer} values"])

    def _give_up(self, reason: str) -> None:
        """No more CUDA graphs for this decoder: a warning says why, the graphs go, and every later step (this batch's
        too) runs uncaptured, sampling the same tokens."""
        warnings.warn(
            f"the static decode path's CUDA graph: {reason}; its steps run uncaptured from now on", stacklevel=3
        )
        self.uncaptured = reason
        self.graphs.clear()
        self.unchecked.clear()
        self.pool = None
        self.capture_stream = None

    @staticmethod
    def _read_back(state: SlotState, rows: int, start: int, end: int, device: torch.device) -> Window:
        """Copy steps [start, end) of the rows' outputs to the host, asynchronously on CUDA."""
        pinned = device.type == "cuda"

        def host(t: torch.Tensor) -> torch.Tensor:
            out = torch.empty(t.shape, dtype=t.dtype, pin_memory=pinned)
            out.copy_(t, non_blocking=pinned)
            return out

        tokens = host(state.out_tokens[:rows, start:end])
        logprobs = host(state.out_logprobs[:rows, start:end])
        first_eos = host(state.first_eos[:rows])
        ready = None
        if pinned:
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(device))  # the copies' stream, on their device
        return Window(start, end, tokens, logprobs, first_eos, ready)

    @staticmethod
    def _move(state: SlotState, order: list[int], bucket: int, written: int) -> None:
        """Slot i takes slot order[i]'s contents for i < len(order); the rest of the first `bucket` copy slot
        order[0] and write to the sink row. Of the caches, only the `written` columns the steps queued before have
        filled are copied (the rest is written before it is attended to)."""
        device = state.tokens.device
        source = torch.tensor(order + [order[0]] * (bucket - len(order)))
        if device.type == "cuda":  # from pinned memory, so that the host does not wait for the steps queued before
            source = source.pin_memory()
        source = source.to(device, non_blocking=True)
        for buffers in (*state.keys, *state.values):
            buffers[:bucket, :, :written] = buffers[source, :, :written]
        for buffers in (state.key_valid, state.tokens, state.positions):
            buffers[:bucket] = buffers[source]
        state.stream_keys[:bucket] = state.stream_keys[source]
        rows = state.row_of_slot[source]
        rows[len(order) :] = state.capacity
        state.row_of_slot[:bucket] = rows

    # --- the host side ------------------------------------------------------------------------------------------

    @staticmethod
    def end_rows(
        window: Window,
        tokens: list[list[int]],
        logprobs: list[list[float]],
        running: set[int],
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingConfig,
        tail: int,
    ) -> list[tuple[int, int, str]]:
        """Append the window's tokens to the running rows and end those that ended in it, as the eager loop would
        have, step by step: (row, length, finish reason) of each, removed from `running`."""
        live = sorted(running)
        window_tokens, window_logprobs = window.tokens[live].tolist(), window.logprobs[live].tolist()
        first_eos = window.first_eos[live].tolist()
        for row, new_tokens, new_logprobs in zip(live, window_tokens, window_logprobs):
            tokens[row] += new_tokens
            logprobs[row] += new_logprobs
        ended = []
        eos_at = dict(zip(live, first_eos))
        for step in range(window.start, window.end):
            live = sorted(running)
            hits = [False] * len(live)
            if sampling.stop and step + 1 >= sampling.min_tokens:
                tails = [tokens[row][max(0, step + 1 - tail) : step + 1] for row in live]
                hits = stop_hits(tokenizer, tails, sampling.stop)
            check_drawn([tokens[row][step] for row in live], live, step)
            for row, hit in zip(live, hits):
                if hit or eos_at[row] == step:
                    ended.append((row, step + 1, "stop"))
                elif step + 1 == sampling.max_tokens:
                    ended.append((row, step + 1, "length"))
                else:
                    continue
                running.discard(row)
        return ended
