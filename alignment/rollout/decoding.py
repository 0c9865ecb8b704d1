"""What the in-process rollout backends (hf, transformer_lm) share: the token-by-token decoding loop with its
sampling, stop and bookkeeping rules, batching prompts into whole groups, and policy weight loads.

A backend supplies only its model calls: the first next-token logits of every row, and a function that
takes the chosen tokens of the rows still running and returns their next logits. It makes them inside
`sampling_linears`, which also records them when the learner will replay them (alignment/rollout/forward_tape.py).
"""

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from alignment.kernels.support import kernel_serves
from alignment.rollout.forward_tape import ForwardTape, module_forwards
from alignment.rollout.interface import Prompt, Rollout, SamplingConfig, prompt_seed
from alignment.rollout.row_streams import row_keys, row_uniforms
from alignment.utils.faults import fault_point

STOP_TAIL_TOKENS = 8  # extra tokens decoded beyond a stop string's length, for tokens that decode to nothing
FEW_ROWS = 64  # up to this many rows, a CPU linear layer multiplies as W @ x^T


def few_rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias), as (W @ x^T)^T when x has few rows on the CPU.  (..., in) -> (..., out)

    MKL's sgemm copies its larger operand into a blocked layout on every call: for x @ W^T that is the weight
    matrix, for W @ x^T the few rows of x. At SmolLM2-135M's decode shapes (32 rows) a step's linear layers took
    173 ms instead of 190 (bench/cpu_kernels.py), and the demo's rollouts 6.11 s instead of 7.50 (medians,
    alternating). The result is made contiguous again (a copy of only rows x out): attention refuses its fused
    CPU kernel for a transposed query, which cost more than the products saved.
    """
    rows = x.numel() // x.shape[-1]
    if x.device.type != "cpu" or rows > FEW_ROWS:
        return F.linear(x, weight, bias)
    y = torch.mm(weight, x.reshape(rows, x.shape[-1]).t()).t().contiguous()
    return (y if bias is None else y + bias).view(*x.shape[:-1], weight.shape[0])


@contextmanager
def sampling_linears(model: nn.Module, tape: ForwardTape | None) -> Iterator[None]:
    """Inside, the model's linear layers compute as few_rows_linear and, given a tape, record their outputs."""

    def forward(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        y = few_rows_linear(x, layer.weight, layer.bias)
        if tape is not None:
            tape.record(layer, y)
        return y

    with module_forwards(model, {nn.Linear: forward}):
        yield


def default_memory_budget(device: torch.device, reusable: int = 0) -> int:
    """Bytes the sampler may spend on cache and logits: 60% of free GPU memory and of the `reusable` bytes the
    sampler holds already (the static path's kept slots), or 4 GiB on CPU."""
    if device.type == "cuda":
        return int((torch.cuda.mem_get_info(device)[0] + reusable) * 0.6)
    return 4 * 1024**3


def sampling_log_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probs of the distribution tokens are drawn from: softmax(logits / T) cut to the top-p nucleus.

    logits: (batch, vocab) -> (batch, vocab) float32, -inf outside the nucleus. Temperature 0 means greedy
    and reports the plain softmax.
    """
    if temperature > 0 and temperature != 1:
        log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    else:  # cast inside the kernel: no float32 copy of half-precision logits to write and read again
        log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
    if temperature == 0 or top_p >= 1.0:
        return log_probs
    sorted_lp, order = log_probs.sort(dim=-1, descending=True)
    mass_before = sorted_lp.exp().cumsum(dim=-1) - sorted_lp.exp()
    outside = torch.zeros_like(log_probs, dtype=torch.bool).scatter(-1, order, mass_before > top_p)
    return torch.log_softmax(log_probs.masked_fill(outside, float("-inf")), dim=-1)


def sample_tokens(probs: torch.Tensor, generator: torch.Generator | None, block: int = 128) -> torch.Tensor:
    """One draw per row of (batch, vocab) probabilities, at uniform points drawn from `generator` (see
    sample_tokens_at). (batch, vocab) -> (batch,)"""
    uniforms = torch.rand((probs.shape[0],), generator=generator, device=probs.device, dtype=torch.float64)
    return sample_tokens_at(probs, uniforms, block)


def sample_tokens_at(probs: torch.Tensor, uniforms: torch.Tensor, block: int = 128) -> torch.Tensor:
    """One draw per row of (batch, vocab) probabilities, by inverting the CDF at each row's uniform point in [0, 1).

    Equivalent in distribution to torch.multinomial(probs, 1), which on CPU draws a random number for every
    vocabulary entry (26 ms per step for 32 rows of 49k); this draws one per row. The CDF is kept in float64 so
    that rounding cannot shift mass across a 150k-entry vocabulary, and found in two levels: running totals of
    `block`-entry blocks pick the block, a running sum inside that block alone picks the token. A running sum
    over the whole vocabulary is a sequential float64 pass (6.2 ms for 32 x 49k; the two levels take 1.05 ms).
    Zero-probability tokens are never drawn. probs: (batch, vocab); uniforms: (batch,) float64 -> (batch,)
    """
    rows, vocab = probs.shape
    padded = probs if vocab % block == 0 else F.pad(probs, (0, (-vocab) % block))  # zero padding is never drawn
    blocks = padded.view(rows, -1, block)
    totals = blocks.sum(dim=-1, dtype=torch.float64)  # (rows, n_blocks)
    ends = totals.cumsum(dim=-1)
    point = uniforms[:, None] * ends[:, -1:]
    which = torch.searchsorted(ends, point, right=True).clamp(max=ends.shape[1] - 1)  # (rows, 1)
    chosen = blocks.gather(1, which[:, :, None].expand(-1, -1, block)).squeeze(1)  # (rows, block)
    inside = chosen.double().cumsum(dim=-1) + (ends.gather(1, which) - totals.gather(1, which))
    # the two levels sum in different orders; a point within rounding of the block's end stays on its last token
    last = block - 1 - (chosen > 0).flip(-1).int().argmax(dim=-1, keepdim=True)
    token = which * block + torch.minimum(torch.searchsorted(inside, point, right=True), last)
    return token.squeeze(-1)


def stream_keys(
    rows: int, sampling: SamplingConfig, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """(rows,) keys of the rows' random streams, drawn from `generator` (None: torch's global one); greedy decoding
    draws nothing and gets zeros, leaving the generator as it was."""
    if sampling.temperature == 0:
        return torch.zeros(rows, dtype=torch.long, device=device)
    return row_keys(rows, generator, device)


def choose_tokens(
    logits: torch.Tensor, sampling: SamplingConfig, keys: torch.Tensor, step: int | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's next token and its log-prob under the distribution it is drawn from: the argmax at temperature 0,
    else a draw at the row's step-th uniform (alignment/rollout/row_streams.py). logits: (rows, vocab); keys: (rows,)
    the rows' stream keys -> (rows,) int64 tokens, (rows,) float32 log-probs. On a GPU where Triton runs, a draw
    with no nucleus to cut is one kernel that reads the logits twice (alignment/kernels/sampling.py)."""
    if sampling.temperature > 0 and sampling.top_p >= 1.0 and logits.is_cuda and sampling_kernel_serves(logits):
        from alignment.kernels.sampling import sample_rows

        return sample_rows(logits, row_uniforms(keys, step), sampling.temperature)
    return choose_tokens_in_torch(logits, sampling, keys, step)


def sampling_kernel_serves(logits: torch.Tensor) -> bool:
    """Whether the Triton sampling kernel draws from `logits`: --kernels allows it and it passed its first-use check
    on their device and dtype (alignment/kernels/support.py)."""
    return kernel_serves("sampling", logits.device, logits.dtype, check_sampling_kernel)


def check_sampling_kernel(device: torch.device, dtype: torch.dtype) -> None:
    """The sampling kernel against the torch draw it replaces, on `device` in `dtype`: 16 rows of 3,088 words (two of
    its blocks, the last ragged) at temperature 0.7, a stretch of -inf as min_tokens' EOS ban makes, points at both
    ends of the CDF among them, and two rows with nothing to draw from (all -inf; a NaN), which must draw -1. Each
    other row's token must be of nonzero probability with the row's point inside its stretch of the CDF (to 1e-6:
    the sums run in another order), and its log-prob the log-softmax's (to 5e-6, the CPU tests' tolerance). Raises
    an AssertionError saying what differs."""
    from alignment.kernels.sampling import sample_rows

    generator = torch.Generator().manual_seed(0)
    logits = (torch.randn(16, 3088, generator=generator) * 3).to(dtype)
    logits[:, 1000:1100] = float("-inf")
    uniforms = torch.rand(16, dtype=torch.float64, generator=generator)
    uniforms[0], uniforms[1] = 0.0, 1 - 2**-53
    logits[14], logits[15, 7] = float("-inf"), float("nan")  # rows with nothing to draw from: token -1
    logits, uniforms = logits.to(device), uniforms.to(device)
    tokens, log_probs = sample_rows(logits, uniforms, 0.7)
    if tokens[14:].tolist() != [-1, -1]:
        raise AssertionError(f"rows of no finite logits or a NaN drew {tokens[14:].tolist()}, not -1")
    logits, uniforms, tokens, log_probs = logits[:14], uniforms[:14], tokens[:14], log_probs[:14]
    expected = sampling_log_probs(logits, 0.7, 1.0)
    tokens, log_probs, expected, uniforms = tokens.cpu(), log_probs.cpu(), expected.cpu(), uniforms.cpu()
    if not ((tokens >= 0) & (tokens < logits.shape[1])).all():
        raise AssertionError(f"tokens outside the vocabulary: {tokens.tolist()}")
    probs = expected.double().exp()
    ends = probs.cumsum(dim=-1) / probs.sum(dim=-1, keepdim=True)
    end = ends.gather(-1, tokens[:, None]).squeeze(-1)
    start = end - probs.gather(-1, tokens[:, None]).squeeze(-1) / probs.sum(dim=-1)
    held = (probs.gather(-1, tokens[:, None]).squeeze(-1) > 0) & (start - 1e-6 <= uniforms) & (uniforms <= end + 1e-6)
    if not held.all():
        rows = (~held).nonzero().flatten().tolist()
        raise AssertionError(
            f"rows {rows} drew tokens {tokens[rows].tolist()}, whose stretch of the CDF misses the point"
        )
    torch.testing.assert_close(
        log_probs, expected.gather(-1, tokens[:, None]).squeeze(-1), rtol=0, atol=5e-6, msg=lambda m: f"log-probs: {m}"
    )


def choose_tokens_in_torch(
    logits: torch.Tensor, sampling: SamplingConfig, keys: torch.Tensor, step: int | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """choose_tokens in torch's kernels alone, wherever the logits are: the sampling distribution's log-probs
    (sampling_log_probs), then the argmax or a draw from their exp (sample_tokens_at)."""
    log_probs = sampling_log_probs(logits, sampling.temperature, sampling.top_p)
    if sampling.temperature == 0:
        chosen = log_probs.argmax(dim=-1)
    else:
        chosen = sample_tokens_at(log_probs.exp(), row_uniforms(keys, step))
    return flag_non_finite(chosen, log_probs)


def flag_non_finite(chosen: torch.Tensor, log_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(chosen tokens, their log-probs), token -1 where a row's log-probs are NaN: its logits held a NaN or no finite
    value (log_softmax makes the whole row NaN then), as the sampling kernel marks such a row. chosen (rows,),
    log_probs (rows, vocab) -> (rows,), (rows,); no host sync."""
    chosen = chosen.clamp(0, log_probs.shape[-1] - 1)  # a NaN row's draw may land anywhere, even in the padding
    chosen_lp = log_probs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
    return torch.where(chosen_lp.isnan(), -1, chosen), chosen_lp


class NonFiniteLogits(RuntimeError):
    """A row's next-token logits held a NaN or no finite value: nothing can be drawn from them."""


def check_drawn(tokens: Sequence[int], rows: Sequence[int], step: int) -> None:
    """A NonFiniteLogits naming the step and the first row whose token is -1 (decoding.flag_non_finite, the sampling
    kernel): tokens[i] was drawn for rows[i] at `step`, read on the host already."""
    for row, token in zip(rows, tokens):
        if token < 0:
            raise NonFiniteLogits(
                f"decode step {step}, row {row}: its next-token logits hold a NaN or no finite value (all -inf), as an "
                "overflow in float16 or a vocabulary banned whole makes; nothing can be drawn from them, so the "
                "rollout stops here (try --precision bf16-mixed where float16 overflows)"
            )


def stop_tail(stop: tuple[str, ...]) -> int:
    """How many of a sequence's last tokens stop_hits decodes: enough to hold any of the stop strings."""
    return max(len(s) for s in stop) + STOP_TAIL_TOKENS


def stop_hits(tokenizer: PreTrainedTokenizerBase, sequences: list[list[int]], stop: tuple[str, ...]) -> list[bool]:
    """Whether each token sequence's decoded tail (its last stop_tail(stop) tokens) contains one of the stop strings."""
    tail = stop_tail(stop)
    texts = tokenizer.batch_decode([seq[-tail:] for seq in sequences], skip_special_tokens=True)
    return [any(s in text for s in stop) for text in texts]


def finish_rollout(
    tokenizer: PreTrainedTokenizerBase,
    eos_ids: Sequence[int],
    prompt_index: int,
    tokens: list[int],
    logprobs: list[float],
    finish: str,
    sampling: SamplingConfig,
) -> Rollout:
    """The Rollout of one sampled sequence: text without a final EOS, cut after (or at) the first stop string."""
    ends_with_eos = finish == "stop" and tokens[-1] in eos_ids
    text = tokenizer.decode(tokens[:-1] if ends_with_eos else tokens, skip_special_tokens=True)
    hits = [(text.find(s), s) for s in sampling.stop if s in text]
    if hits and finish == "stop":
        at, s = min(hits)
        text = text[: at + len(s)] if sampling.include_stop_str_in_output else text[:at]
    return Rollout(prompt_index, text, tokens, logprobs, finish)  # type: ignore[arg-type]


Advance = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


def decode(
    logits: torch.Tensor,
    advance: Advance,
    tokenizer: PreTrainedTokenizerBase,
    prompt_indices: Sequence[int],
    eos_ids: Sequence[int],
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    bar: tqdm | None = None,
) -> list[Rollout]:
    """Sample every row to its end (see `decode_rows`); the rollouts in row order."""
    finished = dict(decode_rows(logits, advance, tokenizer, prompt_indices, eos_ids, sampling, generator, bar))
    return [finished[row] for row in range(len(finished))]


def decode_rows(
    logits: torch.Tensor,
    advance: Advance,
    tokenizer: PreTrainedTokenizerBase,
    prompt_indices: Sequence[int],
    eos_ids: Sequence[int],
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    bar: tqdm | None = None,
    version: Callable[[], int] | None = None,
) -> Iterator[tuple[int, Rollout]]:
    """Sample every row to its end, yielding (row, rollout) as each row finishes; row j continues prompt
    prompt_indices[j].

    logits: (rows, vocab), each row's first next-token logits. advance(chosen, kept) is called after each
    step with the tokens just chosen for the rows still running, (live,), and, when some rows have just
    finished, the (live,) indices of those that go on among the previous step's rows (None when all do);
    it drops the others from the model state and returns the running rows' next logits, (live, vocab), a
    tensor of its own (decode masks EOS in it in place).
    A row stops at an EOS token, a stop string or max_tokens; neither EOS nor a stop string counts before
    min_tokens, and EOS gets no probability there. Each row draws from its own stream, keyed from `generator` before
    the first step (stream_keys). `bar` counts finished sequences. `version()`, when given, is
    the policy version of the weights that produced the current logits (advance may load new weights), recorded
    for each token in Rollout.versions.
    """
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=logits.device)
    eos_list = eos.tolist()
    rows = logits.shape[0]
    live = list(range(rows))  # position in the batch -> row
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    versions: list[list[int]] | None = None if version is None else [[] for _ in range(rows)]
    finish = ["length"] * rows
    keys = stream_keys(rows, sampling, generator, logits.device)  # of the rows still running, in `live` order
    for step in range(sampling.max_tokens):
        if step < sampling.min_tokens:
            logits = logits.index_fill_(-1, eos, float("-inf"))
        chosen, chosen_lp = choose_tokens(logits, sampling, keys, step)
        done = torch.isin(chosen, eos).tolist()
        step_version = None if version is None else version()
        chosen_list = chosen.tolist()
        check_drawn(chosen_list, live, step)
        for row, token, lp in zip(live, chosen_list, chosen_lp.tolist()):
            tokens[row].append(token)
            logprobs[row].append(lp)
            if versions is not None:
                versions[row].append(step_version)
        if step == 0:
            fault_point("rollout")
        if sampling.stop and step + 1 >= sampling.min_tokens:
            hits = stop_hits(tokenizer, [tokens[row] for row in live], sampling.stop)
            done = [d or h for d, h in zip(done, hits)]
        for position, row in enumerate(live):
            if done[position]:
                finish[row] = "stop"
        keep = [position for position, d in enumerate(done) if not d]
        last = not keep or step + 1 == sampling.max_tokens
        if bar is not None:
            bar.set_postfix(step=step + 1, live=len(keep), refresh=False)
            bar.update(len(live) if last else len(live) - len(keep))  # redraws at most every mininterval
        for position, row in enumerate(live):
            if last or done[position]:
                rollout = finish_rollout(
                    tokenizer, eos_list, prompt_indices[row], tokens[row], logprobs[row], finish[row], sampling
                )
                yield row, rollout if versions is None else dataclasses.replace(rollout, versions=versions[row])
        if last:
            break
        kept = None
        if len(keep) < len(live):
            kept = torch.tensor(keep, device=chosen.device)
            chosen, keys, live = chosen[kept], keys[kept], [live[position] for position in keep]
        logits = advance(chosen, kept)


def prompt_token_ids(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Prompt]) -> list[list[int]]:
    """Text prompts tokenized (as the tokenizer does by default); token-id prompts as they are."""
    texts = [p for p in prompts if isinstance(p, str)]
    encoded = iter(tokenizer(texts)["input_ids"] if texts else [])
    return [next(encoded) if isinstance(p, str) else list(p) for p in prompts]


@dataclass
class GroupBatch:
    """Whole groups sampled together: prompts[start : start + len(prompt_ids)] of a call, tokenized, and the generator
    they draw from (None: torch's global one)."""

    start: int
    prompt_ids: list[list[int]]
    generator: torch.Generator | None


def group_batches(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Prompt],
    n: int,
    sampling: SamplingConfig,
    device: torch.device,
    rows_that_fit: Callable[[int], int],
    positions: Sequence[int] | None = None,
) -> list[GroupBatch]:
    """The prompts tokenized, in batches of whole groups that `rows_that_fit` (sequence length -> rows) allows.

    A seeded batch draws from a generator of its first prompt's seed (prompt_seed of its position in the call:
    `positions`, default 0, 1, ...), so neither two batches nor two parts of a call handed out in several streamed
    Units share random numbers; each row of a batch draws the key of its own stream from that generator, one after
    another, before the first step (alignment/rollout/row_streams.py).
    """
    if n < 1:
        raise ValueError(f"n (samples per prompt) must be >= 1, got {n}")
    positions = range(len(prompts)) if positions is None else positions
    prompt_ids = prompt_token_ids(tokenizer, prompts)
    rows = rows_that_fit(max(len(p) for p in prompt_ids) + sampling.max_tokens)
    per_batch = max(1, rows // n)  # whole groups per batch (at least one, even past the budget)
    batches = []
    for start in range(0, len(prompts), per_batch):
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=device).manual_seed(prompt_seed(sampling.seed, positions[start]))
        batches.append(GroupBatch(start, prompt_ids[start : start + per_batch], generator))
    return batches


def generate_in_groups(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Prompt],
    n: int,
    sampling: SamplingConfig,
    device: torch.device,
    rows_that_fit: Callable[[int], int],
    run: Callable[[list[list[int]], torch.Generator | None, tqdm], list[Rollout]],
    progress: bool,
    positions: Sequence[int] | None = None,
) -> list[Rollout]:
    """The RolloutEngine.generate contract over a backend's `run(prompt_ids, generator, bar)`, which samples n
    rollouts of each of a few tokenized prompts: prompts go in batches of whole groups that `rows_that_fit`
    (sequence length -> rows) allows, seeded by `positions` (group_batches), and come back prompt-major with indices
    into `prompts`."""
    rollouts: list[Rollout] = []
    with tqdm(total=len(prompts) * n, desc="generating", unit="seq", disable=not progress, leave=False) as bar:
        for batch in group_batches(tokenizer, prompts, n, sampling, device, rows_that_fit, positions):
            sampled = run(batch.prompt_ids, batch.generator, bar)
            rollouts += [dataclasses.replace(r, prompt_index=batch.start + r.prompt_index) for r in sampled]
    return rollouts


def load_unless_shared(model: nn.Module, state_dict: dict[str, torch.Tensor]) -> None:
    """Load `state_dict` into `model`, unless the model already holds exactly these tensors (a colocated policy).

    It may leave out what does not train (frozen parameters, buffers): a LoRA policy's sync carries only its
    adapters."""
    own = model.state_dict()
    if own.keys() == state_dict.keys() and all(own[k].data_ptr() == state_dict[k].data_ptr() for k in own):
        return
    frozen = {name for name, t in model.state_dict(keep_vars=True).items() if not t.requires_grad}  # tied names too
    unknown, missing = sorted(state_dict.keys() - own.keys()), sorted(own.keys() - state_dict.keys() - frozen)
    if unknown or missing:
        raise ValueError(f"weights do not fit the rollout model (missing {missing[:3]}, unknown {unknown[:3]})")
    model.load_state_dict(state_dict, strict=False)
