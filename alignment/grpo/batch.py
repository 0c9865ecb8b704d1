"""A rollout batch as training tensors: prompt + sampled tokens, right-padded, with the response mask.

Tokens come from the rollouts themselves, never from re-tokenizing their text, so the trainer scores
exactly what the sampler produced. A rollout that carries its own prompt and unsampled tokens (a multi-turn
episode's observations, alignment/envs/episode.py) is laid out the same way, its response mask 1 on the sampled
tokens only, so every loss, aggregation and correction, all computed under the mask, leaves observations out.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from alignment.rollout.interface import Rollout


@dataclass
class RolloutBatch:
    input_ids: torch.Tensor  # (batch, seq): prompt + response, without the last token
    labels: torch.Tensor  # (batch, seq): input_ids shifted left by one
    response_mask: torch.Tensor  # (batch, seq) bool: True where the label is a response token
    raw_rewards: torch.Tensor  # (batch, 1)
    advantages: torch.Tensor  # (batch, 1), or (batch, seq) per token (--turn-rewards, on-policy distillation)
    rollout_log_probs: torch.Tensor  # (batch, seq): the sampler's log-prob of each response label, 0 elsewhere
    old_log_probs: torch.Tensor | None = None  # (batch, seq), set once per rollout batch when off-policy
    slots: torch.Tensor | None = None  # (batch, seq) ForwardTape slots of the input positions, when recorded
    in_loss: torch.Tensor | None = None  # (batch, 1) bool: rows the loss counts (--mask-truncated leaves some out)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, index: slice | torch.Tensor) -> "RolloutBatch":
        """Rows `index` of every tensor, trimmed after the last response token among them."""
        mask = self.response_mask[index]
        width = int(mask.any(dim=0).nonzero().max()) + 1 if mask.any() else mask.shape[1]

        def rows(t: torch.Tensor | None, per_token: bool) -> torch.Tensor | None:
            return None if t is None else t[index][:, :width] if per_token else t[index]

        return RolloutBatch(
            input_ids=rows(self.input_ids, True),
            labels=rows(self.labels, True),
            response_mask=mask[:, :width],
            raw_rewards=rows(self.raw_rewards, False),
            advantages=rows(self.advantages, True),  # trimming leaves a (rows, 1) column as it is
            rollout_log_probs=rows(self.rollout_log_probs, True),
            old_log_probs=rows(self.old_log_probs, True),
            slots=rows(self.slots, True),
            in_loss=rows(self.in_loss, False),
        )


def truncated(rollout: Rollout, max_tokens: int) -> bool:
    """Cut at the token limit (not stopped by EOS or a stop string)."""
    return rollout.finish_reason == "length" and len(rollout.token_ids) >= max_tokens


def collate(
    prompt_ids: Sequence[Sequence[int]],
    rollouts: Sequence[Rollout],
    raw_rewards: torch.Tensor,
    advantages: torch.Tensor | Sequence[torch.Tensor],
    pad_id: int,
) -> RolloutBatch:
    """Right-padded tensors for rollouts[i], whose prompt is its own prompt_ids when it carries them, else
    prompt_ids[rollouts[i].prompt_index]. `advantages`: (n,) one per rollout, or one (len(token_ids),) tensor per
    rollout (a per-token advantage)."""
    sequences = [
        list(prompt_ids[r.prompt_index] if r.prompt_ids is None else r.prompt_ids) + r.token_ids for r in rollouts
    ]
    width = max(len(s) for s in sequences)
    full = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    is_response = torch.zeros((len(sequences), width), dtype=torch.bool)
    sampler_log_probs = torch.zeros((len(sequences), width), dtype=torch.float32)
    per_token = isinstance(advantages, Sequence)
    token_advantages = torch.zeros((len(sequences), width), dtype=torch.float32) if per_token else None
    for i, (sequence, rollout) in enumerate(zip(sequences, rollouts)):
        full[i, : len(sequence)] = torch.tensor(sequence)
        response = slice(len(sequence) - len(rollout.token_ids), len(sequence))
        sampled = rollout.sampled_mask
        is_response[i, response] = True if sampled is None else torch.tensor(sampled, dtype=torch.bool)
        sampler_log_probs[i, response] = torch.tensor(rollout.logprobs, dtype=torch.float32)
        if token_advantages is not None:
            token_advantages[i, response] = advantages[i].float()
    return RolloutBatch(
        input_ids=full[:, :-1],
        labels=full[:, 1:],
        response_mask=is_response[:, 1:],
        raw_rewards=raw_rewards.float().view(-1, 1),
        advantages=token_advantages[:, 1:] if token_advantages is not None else advantages.float().view(-1, 1),
        rollout_log_probs=sampler_log_probs[:, 1:],
    )
