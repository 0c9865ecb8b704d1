"""Which decode path an in-process engine (hf, transformer_lm) takes for a batch, decided here and nowhere else.

- static (alignment/rollout/static_decoding.py): a fixed-shape step over a static KV cache, captured as a CUDA
  graph on CUDA, the host syncing every few steps;
- eager (alignment/rollout/decoding.py): the token-by-token loop, finished rows leaving the batch at once.

Both sample the same tokens with the same log-probs (to rounding). `--decode` chooses:
- auto: static on CUDA, eager on the CPU, where the static path measured slower (docs/benchmarks/static_decode.md);
- static: static wherever it can serve, the CPU included (uncaptured there);
- eager: eager always.
The static path cannot serve, and a batch decodes eagerly, while a forward tape records the rollout for the learner
to replay (it keeps every decode step's linear-layer outputs per token), under in-flight weight loads (a streaming
engine with partial rollouts may load weights between any two steps and rebuild the cache), for a policy sharded over
processes (its forward gathers parameters as it goes), and for a model the static step does not cover
(alignment/rollout/hf_static.py's static_support). Asked for by name, the static path warns once per reason it falls
back for.
"""

import warnings
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from alignment.config.settings import setting

Decode = Literal["auto", "static", "eager"]
DecodePath = Literal["static", "eager"]
DECODE_HELP = (
    "Decode path of the hf and transformer_lm backends: static (a fixed-shape decode step over a static KV cache, "
    "captured as a CUDA graph per batch-size bucket on CUDA, the host syncing every --decode-sync-every steps), eager "
    "(the token-by-token loop), or auto (static on CUDA, eager on the CPU). Both sample the same tokens; where the "
    "static path cannot serve (a forward tape recording, in-flight weight loads, a sharded policy, a model it does not "
    "cover) the eager one does (alignment/rollout/decode_choice.py)."
)
SYNC_EVERY = 16  # decode steps between two host syncs on the static path
SYNC_EVERY_HELP = "Static decode path: decode steps between two host syncs that collect finished rows."
# a static step attends over its columns rounded up to this: each span is a graph to capture, each column past the last
# one written is read for nothing (at 64 the 1.5B shape's mean read at 256 x (64 + 512) is 2.58 GB against 2.35 filled)
SPAN_MULTIPLE = 64


@dataclass
class DecodeSettings:
    """The in-process engines' decode path, for every script that samples from them (GRPO, SFT and expert iteration,
    evaluation); a resumed run may change either (both compute the same samples)."""

    decode: Decode = setting("auto", DECODE_HELP)
    decode_sync_every: int = setting(SYNC_EVERY, SYNC_EVERY_HELP)


def check_decode(decode: str) -> Decode:
    """`decode` if it is one of the choices, else a ValueError naming them."""
    if decode not in get_args(Decode):
        raise ValueError(f"decode must be one of {', '.join(get_args(Decode))}, got {decode!r}")
    return decode  # type: ignore[return-value]


def check_sync_every(sync_every: int) -> int:
    """`sync_every` if it is at least 1, else a ValueError naming it."""
    if sync_every < 1:
        raise ValueError(f"sync_every must be >= 1, got {sync_every}")
    return sync_every


def decode_path(
    decode: Decode,
    device: torch.device,
    *,
    recording: bool = False,
    inflight: bool = False,
    sharded: bool = False,
    unsupported: str | None = None,
) -> DecodePath:
    """The path a batch takes on `device`: recording (a forward tape is recording), inflight (weights may load between
    two decode steps), sharded (the policy is sharded over processes) and unsupported (why the static step does not
    cover the model, or None) are the reasons the static path cannot serve."""
    if decode == "eager":
        return "eager"
    reasons = [
        reason
        for reason, holds in (
            ("a forward tape is recording the rollout for the learner", recording),
            ("weights may load between two decode steps (partial rollouts)", inflight),
            ("the policy is sharded over processes", sharded),
            (f"the static step does not cover {unsupported}", unsupported is not None),
        )
        if holds
    ]
    if reasons:
        if decode == "static":
            warnings.warn(f"--decode static: decoding eagerly because {'; '.join(reasons)}", stacklevel=2)
        return "eager"
    return "static" if decode == "static" or device.type == "cuda" else "eager"
