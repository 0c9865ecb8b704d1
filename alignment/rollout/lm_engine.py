"""The rollout interface over our TransformerLM (backend `transformer_lm`), sampling with alignment.rollout.lm_sampler.

Prompts go in batches of whole groups sized to a memory budget, like the hf backend's; the engine samples
from the model object it is given, so a policy trained in place needs no weight copies.
"""

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from alignment.distributed.sharding import is_sharded
from alignment.models.transformer_lm import TransformerLM
from alignment.rollout.decode_choice import SYNC_EVERY, Decode, check_decode, check_sync_every, decode_path
from alignment.rollout.decoding import default_memory_budget, generate_in_groups, load_unless_shared, prompt_token_ids
from alignment.rollout.forward_tape import ForwardTape
from alignment.rollout.interface import Prompt, Rollout, SamplingConfig
from alignment.rollout.lm_sampler import sample, static_decoder
from alignment.rollout.static_decoding import StaticDecoder


def kv_cache_bytes_per_token(model: TransformerLM) -> int:
    """Bytes of key/value cache one token occupies across all layers."""
    c = model.config
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * model.embed.weight.element_size()


class TransformerLMRolloutEngine:
    """Rollouts from a TransformerLM; EOS is the tokenizer's EOS token unless eos_ids says otherwise. `decode` and
    `sync_every`: the decode path and, on the static one, the steps between host syncs (decode_choice.py);
    `keep_decode_state`: the static path's slots and graphs stay between calls, unless the model trains on the same
    device between them and needs the memory."""

    def __init__(
        self,
        model: TransformerLM,
        tokenizer: PreTrainedTokenizerBase,
        memory_budget_bytes: int | None = None,
        progress: bool = True,
        use_cache: bool = True,
        eos_ids: Sequence[int] | None = None,
        decode: Decode = "auto",
        sync_every: int = SYNC_EVERY,
        keep_decode_state: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.memory_budget_bytes = memory_budget_bytes
        self.progress = progress
        self.use_cache = use_cache
        if eos_ids is None and tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer defines no EOS token; pass eos_ids")
        self.eos_ids = list(eos_ids) if eos_ids is not None else [tokenizer.eos_token_id]
        self.tape: ForwardTape | None = None  # set by ForwardTape.recording: the sampler says which tokens it feeds
        self.decode = check_decode(decode)
        self.sync_every = check_sync_every(sync_every)
        self.keep_decode_state = keep_decode_state
        self._static: StaticDecoder | None = None  # built at the first static batch

    def static_decoder(self) -> StaticDecoder:
        """The static path's decoder of this engine's model (with `keep_decode_state`, the slots and graphs of
        earlier calls)."""
        if self._static is None:
            self._static = static_decoder(self.model, self.sync_every, self.keep_decode_state)
        return self._static

    def load_policy_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        load_unless_shared(self.model, state_dict)

    def batch_size_for(self, sequence_tokens: int) -> int:
        """Rows per batch such that their KV cache and logits fit the memory budget. The cache is counted
        twice: it grows by concatenation, so the old and the new copy coexist for a moment."""
        held = 0 if self._static is None else self._static.held_bytes()  # kept slots, reused by the next call
        budget = self.memory_budget_bytes or default_memory_budget(self.model.device, held)
        per_row = 2 * sequence_tokens * kv_cache_bytes_per_token(self.model) + 4 * 4 * self.model.config.vocab_size
        return max(1, budget // per_row)

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, positions: Sequence[int] | None = None
    ) -> list[Rollout]:
        context = self.model.config.context_length
        if context is not None and prompts:
            longest = max(len(ids) for ids in prompt_token_ids(self.tokenizer, prompts))
            if longest + sampling.max_tokens > context:
                raise ValueError(
                    f"a prompt of {longest} tokens plus {sampling.max_tokens} new ones exceeds the model's context "
                    f"length, {context} (its context_length); shorten the prompt or the maximum new tokens"
                )
        path = decode_path(
            self.decode,
            self.model.device,
            recording=self.tape is not None,
            sharded=is_sharded(self.model),
            unsupported=None if self.use_cache else "decoding without a cache",
        )
        return generate_in_groups(
            self.tokenizer,
            prompts,
            n,
            sampling,
            self.model.device,
            self.batch_size_for,
            lambda prompt_ids, generator, bar: sample(
                self.model,
                self.tokenizer,
                prompt_ids,
                n,
                sampling,
                self.eos_ids,
                generator,
                self.use_cache,
                bar,
                self.tape,
                self.static_decoder() if path == "static" else None,
            ),
            self.progress,
            positions,
        )
