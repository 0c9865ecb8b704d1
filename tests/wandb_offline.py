"""wandb's offline run files read back without wandb's servers: what a test needs to see what a run sent.

A `run-<id>.wandb` file (wandb 0.31; the format of leveldb's log): a 7-byte header (b":W&B", 0xBEE1, version 0),
then 32 KiB blocks of chunks. Each chunk has a 7-byte header (CRC-32 of its type byte and payload, payload length,
type: 1 whole record, 2 first / 3 middle / 4 last piece of one) and its payload; a block's tail too short for a
header is padding. A record is a serialized `wandb.proto.wandb_internal_pb2.Record`.
"""

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wandb.proto import wandb_internal_pb2

BLOCK, CHUNK_HEADER = 32 * 1024, 7
WHOLE, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[Any]:
    data = path.read_bytes()
    if struct.unpack("<4sHB", data[:7]) != (b":W&B", 0xBEE1, 0):
        raise ValueError(f"{path}: not a wandb run file")
    position, pieces = 7, b""
    while position + CHUNK_HEADER <= len(data):
        room = BLOCK - position % BLOCK
        crc, length, kind = struct.unpack("<IHB", data[position : position + CHUNK_HEADER])
        if room < CHUNK_HEADER or (kind == 0 and length == 0):  # padding to the block's end
            position += room
            continue
        payload = data[position + CHUNK_HEADER : position + CHUNK_HEADER + length]
        if zlib.crc32(bytes([kind]) + payload) != crc:
            raise ValueError(f"{path}: damaged chunk at byte {position}")
        position += CHUNK_HEADER + length
        pieces = payload if kind in (WHOLE, FIRST) else pieces + payload
        if kind in (WHOLE, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            yield record


def _items(items) -> dict[str, Any]:
    return {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in items}


@dataclass
class Segment:
    """One `wandb.init` of a run, as its offline file holds it."""

    id: str = ""
    name: str = ""
    group: str = ""
    project: str = ""
    start_us: int = 0
    config: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    step_metrics: dict[str, str] = field(default_factory=dict)  # key -> its x axis (define_metric)
    exit_code: int | None = None


def read_segment(path: Path) -> Segment:
    segment = Segment()
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            segment.id, segment.name, segment.group, segment.project = (
                run.run_id,
                run.display_name,
                run.run_group,
                run.project,
            )
            segment.start_us = run.start_time.ToMicroseconds()
            segment.config |= _items(run.config.update)
        elif kind == "config":
            segment.config |= _items(record.config.update)
        elif kind == "history":
            segment.history.append(_items(record.history.item))
        elif kind == "summary":
            segment.summary |= _items(record.summary.update)
        elif kind == "metric":
            segment.step_metrics[record.metric.name] = record.metric.step_metric
        elif kind == "exit":
            segment.exit_code = record.exit.exit_code
    segment.config = {k: v for k, v in segment.config.items() if not k.startswith("_")}  # wandb's own `_wandb`
    return segment


def read_segments(run_dir: Path, run_id: str) -> list[Segment]:
    """Every offline segment of wandb run `run_id` written under run_dir/wandb, oldest first."""
    files = sorted(run_dir.glob(f"wandb/offline-run-*-{run_id}*/run-{run_id}.wandb"))
    return sorted((read_segment(f) for f in files), key=lambda s: s.start_us)
