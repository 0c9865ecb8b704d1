"""Run logs: metrics.jsonl and rollouts.jsonl in the output folder always, and wandb when enabled."""

import json
from pathlib import Path
from typing import Any


class MetricsLog:
    """`enabled=False`: writes nothing (a sharded run's ranks other than 0, whose rows rank 0 logs)."""

    def __init__(
        self,
        output_dir: Path,
        config: dict[str, Any],
        project: str | None,
        mode: str,
        resume_step: int = 0,
        enabled: bool = True,
    ) -> None:
        self.enabled, self.wandb = enabled, None
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = output_dir / "metrics.jsonl"
        self.rollouts_path = output_dir / "rollouts.jsonl"
        if resume_step:  # rows logged after the checkpoint will be produced again
            self._truncate(self.metrics_path, resume_step)
            self._truncate(self.rollouts_path, resume_step)
        else:
            self.metrics_path.write_text("")
            self.rollouts_path.write_text("")
        if mode != "disabled":
            import wandb

            self.wandb = wandb.init(project=project or "alignment", mode=mode, config=config, dir=str(output_dir))

    @staticmethod
    def _truncate(path: Path, step: int) -> None:
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["grpo_step"] <= step]
            path.write_text("".join(line + "\n" for line in kept))

    def log(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.wandb is not None:
            self.wandb.log(row, step=row["grpo_step"])

    def log_rollouts(self, step: int, kind: str, examples: list[dict[str, Any]]) -> None:
        if not self.enabled:
            return
        with self.rollouts_path.open("a") as f:
            for example in examples:
                f.write(json.dumps({"grpo_step": step, "kind": kind} | example, ensure_ascii=False) + "\n")

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()
