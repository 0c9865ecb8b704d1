"""The policy's log-probs of a rollout batch's responses, as the GRPO learner needs them.

- `score`: every row, without gradient, in microbatches: the old policy's log-probs off-policy, the frozen
  reference's and the KL monitors'.
- `mean_token_entropy`: every row, without gradient: the `token_entropy` an optimizer step logs, for a run that
  does not train on the batch (expert iteration logs its rollouts' entropy with it, to compare with GRPO's).
- `score_for_update`: one microbatch of an optimizer step, with gradient only where the backward can matter.
  A row whose loss weight is exactly 0 (its advantage; its reward for no_baseline), such as every row of a group
  whose rewards all agree, adds exactly 0 to the gradient under every loss here (each multiplies that weight into
  every token term, GRPO-Clip's min and clip included), and so does a row --mask-truncated leaves out. Those rows
  are scored in a pass without gradient, for the loss value and the metrics (--skip-zero-advantage); with the
  forward tape that pass costs an eighth of a forward and backward (0.23 vs 2.02 s, CPU demo).

Both score each distinct prompt once per microbatch (alignment/grpo/shared_prompt.py).
"""

import torch
from torch import nn

from alignment.distributed.sharding import microbatch_turns, shard_group
from alignment.grpo.batch import RolloutBatch
from alignment.grpo.shared_prompt import shared_prompt_log_probs
from alignment.masked import masked_mean
from alignment.rollout.forward_tape import ForwardTape


@torch.no_grad()  # not inference_mode: a sharded policy's first gather here would make its buffers inference tensors
def score(model: nn.Module, batch: RolloutBatch, micro_batch_size: int) -> torch.Tensor:
    """Log-probs of the batch's labels under `model`, computed in microbatches. -> (batch, seq) on CPU."""
    device = next(model.parameters()).device
    chunks = []
    for start in range(0, len(batch), micro_batch_size):
        part = batch.select(slice(start, start + micro_batch_size))
        log_probs = shared_prompt_log_probs(
            model, part.input_ids.to(device), part.labels.to(device), part.response_mask.to(device)
        )["log_probs"]
        width = batch.input_ids.shape[1] - log_probs.shape[1]
        chunks.append(torch.nn.functional.pad(log_probs.float().cpu(), (0, width)))
    return torch.cat(chunks)


@torch.no_grad()
def mean_token_entropy(model: nn.Module, batch: RolloutBatch, micro_batch_size: int) -> float:
    """The policy's response entropy as the GRPO learner logs it (`token_entropy`): the exact entropy of each
    response token's next-token distribution (alignment/logprobs.py), averaged over each microbatch's response
    tokens, then over the microbatches. A sharded policy's ranks each score their turns (every rank holds the batch)."""
    device, shards = next(model.parameters()).device, shard_group(model)
    means = []
    for rows, counts in microbatch_turns(len(batch), micro_batch_size, shards):
        micro = batch.select(rows)
        mask = micro.response_mask.to(device)
        out = shared_prompt_log_probs(
            model, micro.input_ids.to(device), micro.labels.to(device), mask, return_token_entropy=True
        )
        if counts:
            means.append(masked_mean(out["token_entropy"], mask).item())
    if shards is not None:
        (means,) = shards.merged(means)
    return sum(means) / len(means)


def rows_needing_backward(weights: torch.Tensor, in_loss: torch.Tensor | None) -> torch.Tensor:
    """(batch,) bool: rows whose weight (batch,) is not 0 and that the loss counts (`in_loss` (batch, 1), None: all).
    One row stays even when none is left, so that every parameter still gets its (zero) gradient and AdamW counts
    the step as it would."""
    learn = weights != 0
    if in_loss is not None:
        learn &= in_loss.flatten()
    if not learn.any():
        learn[0] = True
    return learn


def score_for_update(
    policy: nn.Module, micro: RolloutBatch, learn: torch.Tensor, tape: ForwardTape | None = None
) -> dict[str, torch.Tensor]:
    """The policy's log-probs and entropies of a microbatch's labels, (rows, seq) each, differentiable at the rows
    `learn` (rows,) bool and scored without gradient elsewhere. `tape`: replay the sampler's recorded forward
    (alignment/rollout/forward_tape.py) at the batch's slots."""
    device = next(policy.parameters()).device

    def scored(rows: RolloutBatch) -> dict[str, torch.Tensor]:
        return shared_prompt_log_probs(
            policy,
            rows.input_ids.to(device),
            rows.labels.to(device),
            rows.response_mask.to(device),
            return_token_entropy=True,
            tape=tape,
            slots=None if rows.slots is None else rows.slots.to(device),
        )

    if learn.all():
        return scored(micro)
    out = {key: torch.zeros(micro.labels.shape, device=device) for key in ("log_probs", "token_entropy")}
    for rows, grad in ((~learn, False), (learn, True)):
        if rows.any():
            index = rows.nonzero().flatten()
            with torch.set_grad_enabled(grad):
                part = scored(micro.select(index))
            for key, value in part.items():  # select trims columns after the part's last response token
                value = torch.nn.functional.pad(value, (0, out[key].shape[1] - value.shape[1]))
                out[key] = out[key].index_put((index.to(device),), value)
    if not out["log_probs"].requires_grad:
        out["log_probs"].requires_grad_()  # nothing to learn in this microbatch: its backward reaches no parameter
    return out
