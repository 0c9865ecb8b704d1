"""Rollouts with a transformers model: batched sampling over a KV cache, written out so it is exact.

Prompts are left-padded so every row's next token sits in the last column, and prefilled once per prompt. Then a
batch decodes along one of two paths (alignment/rollout/decode_choice.py): eagerly, finished rows leaving the batch
(and the cache) at once, so a batch costs as much as its live rows; or on the static path, a fixed-shape step over
a static cache captured as a CUDA graph (alignment/rollout/static_decoding.py, alignment/rollout/hf_static.py).
"""

from collections.abc import Callable, Iterator, Sequence

import torch
from tqdm.auto import tqdm
from transformers import Cache, PreTrainedModel, PreTrainedTokenizerBase

from alignment.distributed.sharding import is_sharded
from alignment.rollout.decode_choice import SYNC_EVERY, Decode, check_decode, check_sync_every, decode_path
from alignment.rollout.decoding import (
    decode_rows,
    default_memory_budget,
    generate_in_groups,
    group_batches,
    load_unless_shared,
    sampling_linears,
)
from alignment.rollout.forward_tape import ForwardTape
from alignment.rollout.hf_static import hf_step_logits, kv_spec, static_support
from alignment.rollout.interface import Prompt, Rollout, SamplingConfig
from alignment.rollout.reserved_cache import ReservedCache
from alignment.rollout.static_decoding import Prefill, StaticDecoder
from alignment.rollout.streaming import Barrier, FinishedGroup, KVAfterLoad, StreamFeed, Unit, groups_of_rows


def kv_cache_bytes_per_token(model: PreTrainedModel) -> int:
    """Bytes of key/value cache one token occupies across all layers."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    return 2 * c.num_hidden_layers * kv_heads * head_dim * model.dtype.itemsize


class HFRolloutEngine:
    """The rollout interface over a transformers causal LM (shared with the policy when colocated). `decode` and
    `sync_every`: the decode path and, on the static one, the steps between host syncs (decode_choice.py);
    `keep_decode_state`: the static path's slots and graphs stay between calls, unless the model trains on the same
    device between them and needs the memory."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        memory_budget_bytes: int | None = None,
        progress: bool = True,
        decode: Decode = "auto",
        sync_every: int = SYNC_EVERY,
        keep_decode_state: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.memory_budget_bytes = memory_budget_bytes
        self.progress = progress
        self.decode = check_decode(decode)
        self.sync_every = check_sync_every(sync_every)
        self.keep_decode_state = keep_decode_state
        self._static: StaticDecoder | None = None  # built at the first static batch
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        self.eos_ids = torch.tensor(sorted(eos_ids), dtype=torch.long)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
        self.tape: ForwardTape | None = None  # set by ForwardTape.recording: say which tokens each call feeds

    def load_policy_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        load_unless_shared(self.model, state_dict)

    def batch_size_for(self, sequence_tokens: int) -> int:
        """Rows per batch such that their KV cache and logits fit the memory budget."""
        held = 0 if self._static is None else self._static.held_bytes()  # kept slots, reused by the next call
        budget = self.memory_budget_bytes or default_memory_budget(self.model.device, held)
        per_row = sequence_tokens * kv_cache_bytes_per_token(self.model) + 4 * 4 * self.model.config.vocab_size
        return max(1, budget // per_row)

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, positions: Sequence[int] | None = None
    ) -> list[Rollout]:
        return generate_in_groups(
            self.tokenizer,
            prompts,
            n,
            sampling,
            self.model.device,
            self.batch_size_for,
            lambda prompt_ids, generator, bar: self._generate_batch(prompt_ids, n, sampling, generator, bar),
            self.progress,
            positions,
        )

    def stream(
        self, feed: StreamFeed, partial: bool = True, kv: KVAfterLoad = "recompute"
    ) -> Iterator[FinishedGroup | Barrier]:
        """StreamingEngine.stream (alignment/rollout/streaming.py): units one after another, each sampled exactly as
        `generate` samples its prompts (same batches, seeded alike), each group yielded once its n rows are
        done. With `partial`, offered weights are loaded between two decode steps; without, between units."""
        while (item := feed.next_item()) is not None:
            if not feed.load(self._load, item.floor):  # a unit starts on the newest weights
                return
            if not isinstance(item, Unit):
                yield item
                continue
            batches = group_batches(
                self.tokenizer,
                item.prompts,
                item.n,
                item.sampling,
                self.model.device,
                self.batch_size_for,
                item.seed_positions(),
            )
            inflight = _InFlight(feed, self._load, kv == "recompute") if partial else None
            for batch in batches:
                rows = self._batch_rows(batch.prompt_ids, item.n, item.sampling, batch.generator, None, feed, inflight)
                for prompt, rollouts in groups_of_rows(rows, item.n):
                    yield FinishedGroup(item.keys[batch.start + prompt], rollouts)

    def _load(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        load_unless_shared(self.model, state_dict)

    def static_decoder(self) -> StaticDecoder:
        """The static path's decoder of this engine's model (with `keep_decode_state`, the slots and graphs of
        earlier calls)."""
        if self._static is None:
            model = self.model
            weights = lambda: [*model.parameters(), *model.buffers()]  # noqa: E731
            self._static = StaticDecoder(
                hf_step_logits(model), kv_spec(model), weights, self.sync_every, self.keep_decode_state
            )
        return self._static

    def _generate_batch(
        self, prompts: list[list[int]], n: int, sampling: SamplingConfig, generator: torch.Generator | None, bar: tqdm
    ) -> list[Rollout]:
        finished = dict(self._batch_rows(prompts, n, sampling, generator, bar))
        return [finished[row] for row in range(len(finished))]

    @torch.inference_mode()
    def _batch_rows(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        bar: tqdm | None,
        feed: StreamFeed | None = None,
        inflight: "_InFlight | None" = None,
    ) -> Iterator[tuple[int, Rollout]]:
        """n samples of each prompt, (row, rollout) as each row finishes (rows i * n .. (i + 1) * n - 1 answer
        prompts[i]); each prompt is prefilled once and its cache copied to its n rows. With a `feed`, each token
        records the feed's weights version; with `inflight`, offered weights are loaded between decode steps."""
        device = self.model.device
        width = max(len(ids) for ids in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids)
            attention[row, width - len(ids) :] = 1
        input_ids, attention = input_ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        tape = self.tape
        if tape is not None and inflight is not None:
            raise ValueError("in-flight weight loads would invalidate the forward tape the learner replays")
        path = decode_path(
            self.decode,
            device,
            recording=tape is not None,
            inflight=inflight is not None,
            sharded=is_sharded(self.model),
            unsupported=static_support(self.model),
        )
        if path == "static":
            yield from self._static_rows(input_ids, attention, positions, n, sampling, generator, bar, feed)
            return
        cache = ReservedCache(sampling.max_tokens)  # room for every new token: no per-step copy
        fed = input_ids.repeat_interleave(n, dim=0) if inflight is not None and inflight.recompute else None

        def advance(chosen: torch.Tensor, kept: torch.Tensor | None) -> torch.Tensor:
            nonlocal attention, position, cache, fed
            if kept is not None:
                cache.batch_select_indices(kept)
                attention, position = attention[kept], position[kept]
                fed = None if fed is None else fed[kept]
            if tape is not None:
                tape.add_response_tokens(chosen, kept)
            attention = torch.cat([attention, attention.new_ones((len(chosen), 1))], dim=-1)
            if fed is not None:
                fed = torch.cat([fed, chosen.unsqueeze(-1)], dim=-1)
            if inflight is not None and inflight.load() and fed is not None:
                # keys and values of every position again, under the new weights (AReaL's interruptible generation)
                cache = ReservedCache(sampling.max_tokens)
                logits = last_logits(self.model, fed, attention, (attention.cumsum(-1) - 1).clamp(min=0), cache)
            else:
                logits = last_logits(self.model, chosen.unsqueeze(-1), attention, position.unsqueeze(-1), cache)
            position = position + 1
            return logits

        prompt_indices = [i for i in range(len(prompts)) for _ in range(n)]
        with sampling_linears(self.model, tape):
            if tape is not None:
                tape.add_prompts(input_ids, attention.bool(), n, sampling.max_tokens)
            logits = last_logits(self.model, input_ids, attention, positions, cache)
            cache.batch_repeat_interleave(n)
            attention, position = attention.repeat_interleave(n, dim=0), positions[:, -1].repeat_interleave(n) + 1
            yield from decode_rows(
                logits.repeat_interleave(n, dim=0),
                advance,
                self.tokenizer,
                prompt_indices,
                self.eos_ids.tolist(),
                sampling,
                generator,
                bar,
                None if feed is None else lambda: feed.version,
            )

    def _static_rows(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        positions: torch.Tensor,
        n: int,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
        bar: tqdm | None,
        feed: StreamFeed | None,
    ) -> Iterator[tuple[int, Rollout]]:
        """_batch_rows on the static path: the same prefill (a cache without reserve: the slots hold the rest)."""
        cache = ReservedCache(0)
        with sampling_linears(self.model, None):
            logits = last_logits(self.model, input_ids, attention, positions, cache)
            prefill = Prefill(
                logits,
                [layer.keys for layer in cache.layers],
                [layer.values for layer in cache.layers],
                attention.bool(),
                positions[:, -1] + 1,
            )
            yield from self.static_decoder().decode_rows(
                prefill,
                n,
                self.tokenizer,
                [i for i in range(len(input_ids)) for _ in range(n)],
                self.eos_ids.tolist(),
                sampling,
                generator,
                bar,
                None if feed is None else lambda: feed.version,
            )


class _InFlight:
    """Weights offered to a feed, loaded between two decode steps; `recompute`: the caller rebuilds the cache."""

    def __init__(self, feed: StreamFeed, apply: Callable[[dict[str, torch.Tensor], int], None], recompute: bool):
        self.feed, self.apply, self.recompute = feed, apply, recompute

    def load(self) -> bool:
        """Load offered weights, if any; whether it did."""
        if not self.feed.has_weights():
            return False
        before = self.feed.version
        self.feed.load(self.apply)
        return self.feed.version != before


def last_logits(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    positions: torch.Tensor,
    cache: Cache,
) -> torch.Tensor:
    """(batch, vocab) the next-token logits after `input_ids` (batch, new) fed at `positions` on top of `cache`,
    which takes their keys and values; `attention` (batch, cached + new) marks the real tokens."""
    return model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    ).logits[:, -1]
