"""Each sampled row's own random numbers: its t-th uniform is a function of the row's key and t alone.

The in-process samplers draw a row's token at step t by inverting its CDF at `row_uniforms(key, t)`. A stream drawn
from one generator in batch order would tie a row's numbers to which other rows are still running; a counter-based
stream does not, so the eager decode (rows leave the batch as they finish) and the static one (a fixed-size batch,
finished rows computed until the next compaction, rows moved between slots; alignment/rollout/static_decoding.py)
draw the same numbers for the same row, on the CPU and on a GPU alike, inside a captured CUDA graph too.

The generator is SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014): the
t-th output of the stream seeded `key` mixes key + (t + 1) * 0x9E3779B97F4A7C15 mod 2^64, and its top 53 bits make a
float64 in [0, 1). Keys are 62-bit draws from the batch's generator (one per row, at the start of a batch), so the
seed of a call still fixes every row's numbers. torch has no unsigned 64-bit arithmetic on every device: the words are
int64, whose products wrap mod 2^64 as unsigned ones do, and right shifts are made logical by masking.
"""

import torch

GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment, 2^64 / the golden ratio, odd
MIX_1, MIX_2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # its finalizer's multipliers
KEY_BITS = 62


def _signed(word: int) -> int:
    """A 64-bit unsigned word as the int64 with the same bits."""
    word %= 2**64
    return word - 2**64 if word >= 2**63 else word


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 words (torch shifts arithmetically, copying the sign bit)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def row_keys(rows: int, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """(rows,) int64 keys in [0, 2^62), drawn from `generator` (None: torch's global generator for `device`)."""
    return torch.randint(0, 2**KEY_BITS, (rows,), generator=generator, device=device, dtype=torch.long)


def row_uniforms(keys: torch.Tensor, step: int | torch.Tensor) -> torch.Tensor:
    """The step-th uniform in [0, 1) of each row's stream. keys: (rows,) int64; step: an int or a 0-dim int64 tensor
    on the keys' device (a captured graph reads it at replay) -> (rows,) float64."""
    if isinstance(step, int):
        z = keys + _signed((step + 1) * GOLDEN_GAMMA)
    else:
        z = keys + (step + 1) * _signed(GOLDEN_GAMMA)
    z = (z ^ _shift_right(z, 30)) * _signed(MIX_1)
    z = (z ^ _shift_right(z, 27)) * _signed(MIX_2)
    z = z ^ _shift_right(z, 31)
    return _shift_right(z, 11).double() * 2.0**-53
