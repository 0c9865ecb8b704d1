"""Autoregressive sampling from our TransformerLM: a batch of prompts, n samples each, over its KV cache.

Prompts are left-padded so every row's next token sits in the last column; each prompt is prefilled once
and its cache repeated to its n rows; a row leaves the batch (and the cache) as soon as it finishes. Tokens
are drawn, scored and stopped by the decoding loop the hf backend uses (alignment.rollout.decoding.decode), so
reported log-probs are those of the distribution sampled from. With use_cache=False every step re-runs
the whole sequence instead: the same tokens at quadratic cost, kept for tests and the benchmark.
"""

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from alignment.models.transformer_lm import TransformerLM
from alignment.rollout.decoding import decode, sampling_linears
from alignment.rollout.forward_tape import ForwardTape
from alignment.rollout.interface import Rollout, SamplingConfig


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
) -> list[Rollout]:
    """n samples of each tokenized prompt, prompt-major: result[i * n : (i + 1) * n] continue prompts[i].

    Stops a row at an EOS token (eos_ids), a stop string of `sampling` (the tokenizer decodes to check) or
    max_tokens; neither EOS nor a stop string counts before min_tokens, and EOS gets no probability there.
    `generator` seeds the draws (None: torch's global generator); `bar` counts finished sequences; `tape`
    records the forward passes for the learner (with the cache only: alignment.rollout.forward_tape).
    """
    if n < 1:
        raise ValueError(f"n (samples per prompt) must be >= 1, got {n}")
    if tape is not None and not use_cache:
        raise ValueError("recording the forward passes (a ForwardTape) needs use_cache=True")
    ids, mask = left_pad(prompts, model.device)
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

    prompt_indices = [i for i in range(len(prompts)) for _ in range(n)]
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
