"""The run's events.jsonl: which actor ran on which node, and (later rows) actors lost and replaced mid-run."""

import json
import logging
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


class RunEvents:
    """Appends one JSON object per event, stamped with the wall-clock time; a resumed run appends to the same file."""

    def __init__(self, folder: Path, fresh: bool = False) -> None:
        """`fresh`: a new run (not resumed or restarted) starts the file again."""
        self.path = folder / "events.jsonl"
        if fresh:
            self.path.unlink(missing_ok=True)

    def log(self, event: str, **fields: Any) -> dict:
        row = {"event": event, "time": time.time(), **fields}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        logger.info("%s: %s", event, fields)
        return row

    def read(self) -> list[dict]:
        return [json.loads(line) for line in self.path.read_text().splitlines()] if self.path.exists() else []
