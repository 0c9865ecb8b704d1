"""Autoregressive sampling from our TransformerLM: a batch of prompts, n samples each, over its KV cache.

Prompts are left-padded so every row's next token sits in the last column; each prompt is prefilled once
and its cache repeated to its n rows; a row leaves the batch (and the cache) as soon as it finishes. Tokens
are drawn and scored exactly as in the hf backend (alignment.hf_rollout: sampling_log_probs, sample_tokens),
so reported log-probs are those of the distribution sampled from. With use_cache=False every step re-runs
the whole sequence instead: the same tokens at quadratic cost, kept for tests and the benchmark.
"""

from collections.abc import Sequence

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from alignment.hf_rollout import sample_tokens, sampling_log_probs
from alignment.rollout import Rollout, SamplingConfig
from alignment.rollout_common import finish_rollout, stop_hits
from alignment.transformer_lm import TransformerLM


def left_pad(prompts: Sequence[Sequence[int]], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, width) token ids, 0 in the padding, and the (batch, width) bool mask of real tokens."""
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = True
    return ids.to(device), mask.to(device)


def draw(logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of (batch, vocab) logits and its log-prob under the sampling distribution, each (batch,)."""
    log_probs = sampling_log_probs(logits, sampling.temperature, sampling.top_p)
    chosen = log_probs.argmax(dim=-1) if sampling.temperature == 0 else sample_tokens(log_probs.exp(), generator)
    return chosen, log_probs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)


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
) -> list[Rollout]:
    """n samples of each tokenized prompt, prompt-major: result[i * n : (i + 1) * n] continue prompts[i].

    Stops a row at an EOS token (eos_ids), a stop string of `sampling` (the tokenizer decodes to check) or
    max_tokens; neither EOS nor a stop string counts before min_tokens, and EOS gets no probability there.
    `generator` seeds the draws (None: torch's global generator); `bar` counts finished sequences.
    """
    if n < 1:
        raise ValueError(f"n (samples per prompt) must be >= 1, got {n}")
    device = model.device
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    ids, mask = left_pad(prompts, device)
    if use_cache:
        hidden, cache = model.forward_with_cache(ids, mask)
        logits = model.lm_head(hidden[:, -1]).repeat_interleave(n, dim=0)
        cache = cache.repeat_interleave(n)
    else:
        ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)
        logits = model.lm_head(model.forward_with_cache(ids, mask)[0][:, -1])
    jobs = [i for i in range(len(prompts)) for _ in range(n)]
    live = list(range(len(jobs)))  # batch row -> job index
    tokens: list[list[int]] = [[] for _ in jobs]
    logprobs: list[list[float]] = [[] for _ in jobs]
    finish = ["length"] * len(jobs)
    for step in range(sampling.max_tokens):
        if step < sampling.min_tokens:
            logits = logits.index_fill(-1, eos, float("-inf"))
        chosen, chosen_lp = draw(logits, sampling, generator)
        done = torch.isin(chosen, eos).tolist()
        for job, token, lp in zip(live, chosen.tolist(), chosen_lp.tolist()):
            tokens[job].append(token)
            logprobs[job].append(lp)
        if sampling.stop and step + 1 >= sampling.min_tokens:
            hits = stop_hits(tokenizer, [tokens[job] for job in live], sampling.stop)
            done = [d or h for d, h in zip(done, hits)]
        for row, job in enumerate(live):
            if done[row]:
                finish[job] = "stop"
        keep = [row for row, d in enumerate(done) if not d]
        if bar is not None:
            bar.set_postfix(step=step + 1, live=len(keep), refresh=False)
            bar.update(len(live) - len(keep) if keep and step + 1 < sampling.max_tokens else len(live))
        if not keep or step + 1 == sampling.max_tokens:
            break
        if len(keep) < len(live):
            index = torch.tensor(keep, device=device)
            chosen, live = chosen[index], [live[row] for row in keep]
            if use_cache:
                cache = cache.select(index)
            else:
                ids, mask = ids[index], mask[index]
        if use_cache:
            hidden, cache = model.forward_with_cache(chosen.unsqueeze(-1), cache=cache)
        else:
            ids, mask = torch.cat([ids, chosen.unsqueeze(-1)], dim=1), torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
            hidden = model.forward_with_cache(ids, mask)[0]
        logits = model.lm_head(hidden[:, -1])
    eos_list = eos.tolist()
    return [finish_rollout(tokenizer, eos_list, jobs[j], tokens[j], logprobs[j], finish[j], sampling) for j in range(len(jobs))]
