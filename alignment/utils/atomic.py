"""Writing result files so that an interrupted run never leaves a truncated file under the final name."""

import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def check_writable_dir(folder: Path, flag: str = "--output-dir") -> None:
    """Raise ValueError naming `flag` unless `folder` can be created and written in (probed with a file)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise ValueError(f"{flag} {folder} cannot be written: {err.strerror or err}") from None


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary sibling, flush to disk, then rename over `path` (atomic on POSIX)."""
    tmp = path.with_name(f".{path.name}.partial")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def replace_dir(staging: Path, target: Path) -> Path:
    """Move a fully written folder `staging` to `target`, replacing it; a crash midway leaves `target` or its
    previous version as `target.old`, never a partial folder under the final name."""
    old = target.with_name(f"{target.name}.old")
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)
    return target
