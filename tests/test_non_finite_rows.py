"""Bad numbers say so: a row of logits with a NaN, or with no finite value (all -inf), has nothing to draw from. Both
draws (torch's here; the Triton kernel's in tests/test_sampling_kernel.py) mark it token -1, never a silent token 0,
and the eager loop and the static path stop the rollout with an error naming the step and the row."""

import pytest
import torch

from alignment.rollout.decoding import NonFiniteLogits, choose_tokens_in_torch, decode
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.static_decoding import KVSpec, Prefill, SlotState, StaticDecoder

VOCAB = 300
DRAWS = {
    "sampled": SamplingConfig(max_tokens=12, stop=()),
    "tempered top-p": SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=12, stop=()),
    "greedy": SamplingConfig(temperature=0.0, max_tokens=12, stop=()),
}


def poisoned(logits: torch.Tensor) -> torch.Tensor:
    """Rows 1 and 3 of `logits` spoiled: all -inf (a vocabulary banned whole), one NaN (an fp16 overflow)."""
    logits = logits.clone()
    logits[1] = float("-inf")
    logits[3, 17] = float("nan")
    return logits


@pytest.mark.parametrize("draw", DRAWS)
def test_the_torch_draw_marks_rows_with_nothing_to_draw_from(draw):
    logits = torch.randn(5, VOCAB, generator=torch.Generator().manual_seed(0))
    keys = torch.arange(5)
    clean_tokens, clean_lp = choose_tokens_in_torch(logits, DRAWS[draw], keys, 4)
    tokens, log_probs = choose_tokens_in_torch(poisoned(logits), DRAWS[draw], keys, 4)
    assert tokens[[1, 3]].tolist() == [-1, -1] and log_probs[[1, 3]].isnan().all()
    kept = [0, 2, 4]  # the other rows draw what they drew before
    assert torch.equal(tokens[kept], clean_tokens[kept]) and torch.equal(log_probs[kept], clean_lp[kept])
    assert (clean_tokens >= 0).all()


class WordTokenizer:
    """Just what the decode loops ask of a tokenizer without stop strings: decoding ids to text."""

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


def spoiled_at(step: int, row: int):
    """Next-token logits for the rows still running: finite, but row `row`'s hold a NaN at decode step `step`."""
    generator = torch.Generator().manual_seed(1)

    def logits_for(rows: torch.Tensor, at: int) -> torch.Tensor:
        logits = torch.randn(len(rows), VOCAB, generator=generator)
        logits[:, :3] -= 30  # EOS (0, 1, 2) unlikely: the rows run to the step
        if at == step:
            logits[(rows == row).nonzero().flatten(), 5] = float("nan")
        return logits

    return logits_for


def test_the_eager_loop_stops_naming_the_step_and_the_row():
    logits_for = spoiled_at(step=6, row=2)
    rows = torch.arange(4)
    step = 0

    def advance(chosen, kept):
        nonlocal step
        step += 1
        return logits_for(rows, step)

    with pytest.raises(NonFiniteLogits, match="decode step 6, row 2: its next-token logits hold a NaN"):
        decode(logits_for(rows, 0), advance, WordTokenizer(), [0, 0, 1, 1], [0, 1, 2], DRAWS["sampled"], None)


def test_the_static_path_stops_naming_the_step_and_the_row():
    """The step feeds token 0 in place of the -1 (nothing reads outside the embedding); the host, reading the window
    back, names the step and the row."""
    logits_for = spoiled_at(step=7, row=3)
    fed = []

    def step_logits(state: SlotState, rows: int, span: int) -> torch.Tensor:
        fed.append(state.tokens[:rows].clone())
        return logits_for(state.row_of_slot[:rows], int(state.step))

    kv = KVSpec(layers=1, kv_heads=1, head_dim=4, dtype=torch.float32)
    decoder = StaticDecoder(step_logits, kv, lambda: [], sync_every=4)
    cache = [torch.zeros(2, 1, 3, 4)]
    prefill = Prefill(
        logits_for(torch.tensor([0, 2]), 0), cache, cache, torch.ones(2, 3, dtype=torch.bool), torch.full((2,), 3)
    )
    with pytest.raises(NonFiniteLogits, match="decode step 7, row 3: its next-token logits hold a NaN"):
        list(decoder.decode_rows(prefill, 2, WordTokenizer(), [0, 0, 1, 1], [0, 1, 2], DRAWS["sampled"], None))
    assert all((tokens >= 0).all() for tokens in fed)
