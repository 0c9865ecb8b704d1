"""Autoregressive sampling from our TransformerLM: a batch of prompts, n samples each, over its KV cache.

Prompts are left-padded so every row's next token sits in the last column; each prompt is prefilled once
and its cache repeated to its n rows; a row leaves the batch (and the cache) as soon as it finishes. Tokens
are drawn, scored and stopped by the decoding loop the hf backend uses (alignment.rollout.decoding.decode), so
reported log-probs are those of the distribution sampled from. With use_cache=False every step re-runs
the whole sequence instead: the same tokens at quadratic cost, kept for tests and the benchmark. Given a
StaticDecoder (`static_decoder`), the prefilled batch decodes on the static path instead: a fixed-shape step over a
static cache, captured as a CUDA graph on CUDA (alignment/rollout/static_decoding.py), with the same tokens.
"""

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from alignment.models.transformer_lm import TransformerLM
from alignment.rollout.decoding import decode, sampling_linears
from alignment.rollout.forward_tape import ForwardTape
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.rollout.static_decoding import KVSpec, Prefill, SlotState, StaticDecoder, StepLogits


def lm_kv_spec(model: TransformerLM) -> KVSpec:
    """The cache one layer of `model` keeps per token."""
    c = model.config
    return KVSpec(c.n_layers, c.n_kv_heads, c.head_dim, model.embed.weight.dtype)


def lm_step_logits(model: TransformerLM) -> StepLogits:
    """The static step's model call: next-token logits (rows, vocab) of state.tokens against the slot buffers."""

    def step(state: SlotState, rows: int, span: int) -> torch.Tensor:
        hidden = model.decode_into(
            state.tokens[:rows, None],
            state.positions[:rows, None],
            state.attention_mask(rows, span),
            state.slots(rows, span),
            state.column,
        )
        return model.lm_head(hidden[:, -1])

    return step


def static_decoder(model: TransformerLM, sync_every: int, keep: bool = True) -> StaticDecoder:
    """A StaticDecoder of `model` (keep it across calls: it holds the slot state and, with `keep`, the captured
    graphs)."""
    weights = lambda: [*model.parameters(), *model.buffers()]  # noqa: E731
    return StaticDecoder(lm_step_logits(model), lm_kv_spec(model), weights, sync_every, keep)


def left_pad(prompts: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, width) token ids, 0 in the padding, and the (batch, width) bool mask of real tokens."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = True
    return ids.to(device), mask.to(device)


@torch.inference_mode()
def sample(
    model: TransformerLM,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[Sequence[int]],
    n: int,
    sampling: SamplingConfig,
    eos_ids: Sequence[int],
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    bar: tqdm | None = None,
    tape: ForwardTape | None = None,
    static: StaticDecoder | None = None,
) -> list[Rollout]:
    """n samples of each tokenized prompt, prompt-major: result[i * n : (i + 1) * n] continue prompts[i].

    Stops a row at an EOS token (eos_ids), a stop string of `sampling` (the tokenizer decodes to check) or
    max_tokens; neither EOS nor a stop string counts before min_tokens, and EOS gets no probability there.
    `generator` seeds the draws (None: torch's global generator); `bar` counts finished sequences; `tape`
    records the forward passes for the learner (with the cache only: alignment.rollout.forward_tape). `static`: decode
    on the static path with this decoder of `model` (not with a tape or without the cache).
    """
    if n < 1:
        raise ValueError(f"n (samples per prompt) must be >= 1, got {n}")
    if tape is not None and not use_cache:
        raise ValueError("recording the forward passes (a ForwardTape) needs use_cache=True")
    if static is not None and (tape is not None or not use_cache):
        raise ValueError("the static decode path takes neither a ForwardTape nor use_cache=False")
    ids, mask = left_pad(prompts, model.device)
    prompt_indices = [i for i in range(len(prompts)) for _ in range(n)]
    if static is not None:
        with sampling_linears(model, None):
            hidden, prompt_cache = model.forward_with_cache(ids, mask)
            prefill = Prefill(
                model.lm_head(hidden[:, -1]), prompt_cache.keys, prompt_cache.values, mask, mask.sum(dim=1)
            )
            rows = static.decode_rows(prefill, n, tokenizer, prompt_indices, eos_ids, sampling, generator, bar)
            finished = dict(rows)
        return [finished[row] for row in range(len(finished))]
    cache = None

    def advance(chosen: torch.Tensor, kept: torch.Tensor | None) -> torch.Tensor:
        nonlocal cache, ids, mask
        if cache is not None:
            cache = cache if kept is None else cache.select(kept)
            if tape is not None:
                tape.add_response_tokens(chosen, kept)
            hidden, cache = model.forward_with_cache(chosen.unsqueeze(-1), cache=cache)
        else:
            if kept is not None:
                ids, mask = ids[kept], mask[kept]
            ids, mask = (
                torch.cat([ids, chosen.unsqueeze(-1)], dim=1),
                torch.cat([mask, mask.new_ones((len(chosen), 1))], dim=1),
            )
            hidden = model.forward_with_cache(ids, mask)[0]
        return model.lm_head(hidden[:, -1])

    with sampling_linears(model, tape):
        if tape is not None:
            tape.add_prompts(ids, mask, n, sampling.max_tokens)
        if use_cache:
            hidden, cache = model.forward_with_cache(ids, mask)
            logits = model.lm_head(hidden[:, -1]).repeat_interleave(n, dim=0)
            cache = cache.repeat_interleave(n)
        else:
            ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)
            logits = model.lm_head(model.forward_with_cache(ids, mask)[0][:, -1])
        return decode(logits, advance, tokenizer, prompt_indices, eos_ids, sampling, generator, bar)
