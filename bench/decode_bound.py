"""What the decode benches share (bench/hf_generation_throughput.py, bench/lm_sampler.py): the memory-bandwidth bound
of decoding, the copy bandwidth it rests on, figures printed as JSON lines, and the static path's two options.

Each decode step reads every weight once plus the live KV cache, so a batch of `rows` sequences decodes at most
    tokens/s <= rows / ((weight_bytes + mean_kv_bytes) / bandwidth),
where mean_kv_bytes is the cache of every row at its mean length (prompt + new_tokens / 2) and the bandwidth is that
of a large device-to-device copy (read and write counted), measured here.
"""

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import typer

from alignment.rollout.decode_choice import SPAN_MULTIPLE, SYNC_EVERY

SYNC_EVERY_OPTION = typer.Option(SYNC_EVERY, help="Static path: decode steps between host syncs.")
SPAN_MULTIPLE_OPTION = typer.Option(
    SPAN_MULTIPLE,
    min=1,
    help="Static path: a step attends over its columns rounded up to this (at least the whole reserved length: every "
    "column, every step).",
)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measured_bandwidth(device: torch.device) -> float:
    """Bytes per second of a copy within `device` (read + write counted): 4 GiB on a GPU, 512 MiB on the CPU."""
    size = (4 if device.type == "cuda" else 0.5) * 2**30
    src = torch.empty(int(size), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync(device)
    start = time.perf_counter()
    for _ in range(5):
        dst.copy_(src)
    sync(device)
    return 2 * 5 * src.numel() / (time.perf_counter() - start)


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


@dataclass(frozen=True)
class Bound:
    """The bandwidth bound of decoding `new_tokens` after `prompt_tokens` for `rows` rows."""

    rows: int
    prompt_tokens: int
    new_tokens: int
    weight_bytes: int
    kv_bytes_per_token: int
    bandwidth: float  # bytes/s

    @property
    def mean_kv_bytes(self) -> float:
        return self.rows * (self.prompt_tokens + self.new_tokens / 2) * self.kv_bytes_per_token

    @property
    def tokens_per_s(self) -> float:
        return self.rows / ((self.weight_bytes + self.mean_kv_bytes) / self.bandwidth)


class Figures:
    """Figures of one bench: JSON lines on stdout with `json_lines` (everything else goes to stderr), else text."""

    def __init__(self, bench: str, json_lines: bool, **context: Any) -> None:
        self.bench, self.json_lines, self.context = bench, json_lines, context

    def note(self, text: str) -> None:
        print(text, file=sys.stderr if self.json_lines else sys.stdout, flush=True)

    def emit(self, name: str, value: float | None, unit: str, **context: Any) -> None:
        """One figure; a None value needs a `reason`."""
        if value is None and "reason" not in context:
            raise ValueError(f"figure {name} has no value and no reason")
        record = {"figure": f"{self.bench}.{name}", "value": value, "unit": unit} | self.context | context
        if self.json_lines:
            print(json.dumps(record), flush=True)
            return
        shown = f"{value:,.1f}" if isinstance(value, float) else str(value)
        extras = ", ".join(f"{k}={v}" for k, v in (self.context | context).items() if k != "device")
        self.note(f"{name}: {shown} {unit} ({extras})")


def timed(run: Callable[[], int], device: torch.device) -> tuple[float, int]:
    """(seconds, tokens) of run(), which returns the tokens it generated."""
    sync(device)
    start = time.perf_counter()
    tokens = run()
    sync(device)
    return time.perf_counter() - start, tokens
