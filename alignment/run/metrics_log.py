"""Run logs: metrics.jsonl and rollouts.jsonl in the output folder always, wandb when enabled, and a console line
for each validation row.

Every row carries `grpo_step` (the GRPO step, SFT optimizer step or EI step it belongs to); a row with a gradient
norm is an optimizer step's and also gets `optimizer_step`, the run's count of them, so that an off-policy GRPO
step's several optimizer steps stay apart. wandb gets the same rows, one history row each (never `step=`, which
would merge a step's rows into one), with both counters (and the wall time, `time_elapsed_s`) as axes of their
own: a key first seen in an optimizer step's row is drawn against `optimizer_step`, any other against `grpo_step`.

The wandb run is named after the run folder (the arm of a sweep), grouped by --wandb-group (the sweep's preset),
configured with the run's settings (settings.json), and its id is kept in the folder (wandb.json), so that
`--resume` logs into the same wandb run. Offline, each continuation is a new segment of files under
`wandb/offline-run-*-<id>` with that id; `wandb sync` uploads them in order into one run. Rows logged after the
last checkpoint of a stopped run are logged again when it resumes: metrics.jsonl drops them, wandb's history keeps
both.

Used as a context manager, the log closes on the way out; when the run leaves with a Diverged error (a NaN, or a
loss past --divergence-loss-bound: alignment/run/divergence.py), it first writes diverged.json into the folder and a
last row `{"grpo_step": N, "diverged": 1}`, and ends the wandb run with exit code 1.
"""

import json
import secrets
from pathlib import Path
from types import TracebackType
from typing import Any

from tqdm.auto import tqdm

from alignment.run.divergence import MARKER, divergence_of, write_marker
from alignment.utils.atomic import atomic_write_json
from alignment.utils.console import validation_line

WANDB_FILE = "wandb.json"  # {"id": ..., "project": ...} of the run's wandb run
AXES = ("grpo_step", "optimizer_step", "time_elapsed_s")  # x axes in wandb; wall time is in both kinds of rows


def read_metrics_jsonl(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl, in the order they were logged; a line that is not JSON names its number."""
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {number}: not JSON ({err.msg})") from None
    return rows


def is_optimizer_step(row: dict[str, Any]) -> bool:
    return "grad_norm" in row


class MetricsLog:
    """`config`: the run's settings (as in settings.json); `resume_step`: the checkpoint's step when resuming, 0
    for a fresh run. `enabled=False`: writes nothing (a sharded run's ranks other than 0, whose rows rank 0 logs)."""

    def __init__(
        self,
        output_dir: Path,
        config: dict[str, Any],
        project: str | None,
        mode: str,
        resume_step: int = 0,
        enabled: bool = True,
    ) -> None:
        self.enabled, self.wandb, self.output_dir = enabled, None, output_dir
        self.optimizer_steps, self.defined = 0, set[str]()
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = output_dir / "metrics.jsonl"
        self.rollouts_path = output_dir / "rollouts.jsonl"
        (output_dir / MARKER).unlink(missing_ok=True)  # a run started again is not diverged until it diverges again
        if resume_step:  # rows logged after the checkpoint will be produced again
            self._truncate(self.metrics_path, resume_step)
            self._truncate(self.rollouts_path, resume_step)
        else:
            self.metrics_path.write_text("")
            self.rollouts_path.write_text("")
        if mode != "disabled":
            self.wandb = self._start_wandb(config, project or "alignment", mode, resumed=resume_step > 0)

    def _truncate(self, path: Path, step: int) -> None:
        """Keep the rows up to `step`; metrics rows get their optimizer_step counted again (rows written before it
        existed included), and the count goes on from there."""
        if not path.exists():
            return
        kept = [row for row in map(json.loads, path.read_text().splitlines()) if row["grpo_step"] <= step]
        if path == self.metrics_path:
            for row in kept:
                if is_optimizer_step(row):
                    self.optimizer_steps += 1
                    row["optimizer_step"] = self.optimizer_steps
        path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept))

    def _start_wandb(self, config: dict[str, Any], project: str, mode: str, resumed: bool) -> Any:
        import wandb

        id_file = self.output_dir / WANDB_FILE
        earlier = json.loads(id_file.read_text()) if resumed and id_file.is_file() else {}
        run_id = earlier.get("id") or secrets.token_hex(4)
        atomic_write_json(id_file, {"id": run_id, "project": project})
        run = wandb.init(
            project=project,
            name=self.output_dir.resolve().name,
            group=config.get("wandb_group"),
            config=config,
            id=run_id,
            resume="allow",
            mode=mode,
            dir=str(self.output_dir),
        )
        for axis in AXES:
            run.define_metric(axis)
        return run

    def log(self, row: dict[str, Any]) -> None:
        """Append the row (an optimizer step's gains its `optimizer_step`, in place) to metrics.jsonl and wandb."""
        if not self.enabled:
            return
        if is_optimizer_step(row):
            self.optimizer_steps += 1
            row["optimizer_step"] = self.optimizer_steps
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if "eval_reward" in row:
            tqdm.write(validation_line(row))  # above the progress bar, which stays whole
        if self.wandb is not None:
            axis = "optimizer_step" if is_optimizer_step(row) else "grpo_step"
            for key in row.keys() - self.defined - set(AXES):
                self.wandb.define_metric(key, step_metric=axis)
                self.defined.add(key)
            self.wandb.log(row)

    def log_rollouts(self, step: int, kind: str, examples: list[dict[str, Any]]) -> None:
        if not self.enabled:
            return
        with self.rollouts_path.open("a") as f:
            for example in examples:
                f.write(json.dumps({"grpo_step": step, "kind": kind} | example, ensure_ascii=False) + "\n")

    def close(self, error: BaseException | None = None) -> None:
        """Finish the wandb run; with the error the run stopped on, a divergence is recorded first."""
        diverged = divergence_of(error)
        if self.enabled and diverged is not None:
            write_marker(self.output_dir, diverged)
            self.log({"grpo_step": diverged.step, "diverged": 1})
            if self.wandb is not None:
                self.wandb.summary["diverged_at_step"] = diverged.step
        if self.wandb is not None:
            self.wandb.finish(exit_code=0 if error is None else 1)
            self.wandb = None

    def __enter__(self) -> "MetricsLog":
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close(error)
