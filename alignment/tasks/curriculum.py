"""A curriculum over a reasoning-gym mix (--curriculum-threshold): a task's difficulty goes up a level when its
recent training accuracy reaches the threshold.

Accuracy is the mean `score` reward (reasoning-gym's score_answer) of the task's last --curriculum-window training
rollouts; once a full window reaches the threshold the task moves to its next level (reasoning-gym's curriculum for
it, every attribute one level up: alignment/tasks/reasoning_gym.py `Mix.config_at`) and its window starts empty.
The task's training rows are then generated again at the new level, in the same places of the run's question
order, before the next step draws; validation rows keep the first level, so validations stay comparable. Levels
and windows are part of a checkpoint: a resumed run continues at the same levels with the same rows.

The GRPO sampler consults it: `record` after grading, `apply` before drawing, `metrics` in each step's row.
"""

from collections import deque
from collections.abc import Sequence
from typing import Any

from alignment.data.task import Task
from alignment.tasks.definition import Row
from alignment.tasks.reasoning_gym import SCORE_REWARD, Mix
from alignment.tasks.rewards import REWARD_PREFIX
from alignment.tasks.source import parse_source


class Curriculum:
    """Levels of the tasks of `mix`, raised when a task's mean score over its last `window` rollouts reaches
    `threshold`."""

    def __init__(self, mix: Mix, threshold: float, window: int) -> None:
        if not 0 < threshold <= 1:
            raise ValueError(f"--curriculum-threshold {threshold}: an accuracy in (0, 1]")
        if window < 1:
            raise ValueError(f"--curriculum-window {window}: at least 1 rollout")
        self.mix, self.threshold, self.window = mix, threshold, window
        self.levels = {name: 0 for name in mix.names}
        self.top = {name: mix.top_level(name) for name in mix.names}
        self.recent: dict[str, deque[float]] = {name: deque(maxlen=window) for name in mix.names}
        self.stale: set[str] = set()  # tasks whose rows are behind their level
        self.validation_questions: frozenset[str] | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> "Curriculum | None":
        """The run's curriculum (None without --curriculum-threshold); refused for a task other than reasoning_gym."""
        threshold = getattr(settings, "curriculum_threshold", None)
        if threshold is None:
            return None
        source = parse_source(settings.task)
        if source.kind != "reasoning_gym" or getattr(settings, "env", None) is not None:
            raise ValueError(f"--curriculum-threshold: only --task reasoning_gym:... has levels, not {settings.task}")
        return cls(Mix.from_settings(source.target, settings), threshold, settings.curriculum_window)

    def observe(self, task_names: Sequence[str], scores: Sequence[float]) -> list[str]:
        """Take rollouts' scores (task_names[i] scored scores[i]); the tasks that moved up a level."""
        moved = []
        for name, score in zip(task_names, scores):
            recent = self.recent[name]
            recent.append(score)
            full = len(recent) == self.window
            if full and sum(recent) / self.window >= self.threshold and self.levels[name] < self.top[name]:
                print(
                    f"curriculum: {name} level {self.levels[name]} -> {self.levels[name] + 1} "
                    f"(accuracy {sum(recent) / self.window:.2f} over its last {self.window} rollouts)"
                )
                self.levels[name] += 1
                recent.clear()
                self.stale.add(name)
                moved.append(name)
        return moved

    def record(self, rows: Sequence[Row], scores: Sequence[dict[str, float]]) -> list[str]:
        """`observe` graded rollouts: rows[i] is the row rollout i answered, scores[i] its RewardSet scores."""
        return self.observe([r["task"] for r in rows], [s[REWARD_PREFIX + SCORE_REWARD] for s in scores])

    def rows_for(self, name: str, count: int) -> list[Row]:
        """`count` training rows of task `name` at its current level."""
        return self.mix.task_rows(name, self.levels[name], count, self.validation_questions or frozenset())

    def apply(self, task: Task) -> None:
        """Generate again the training rows of `task` (a compiled reasoning_gym task: questions are the rows'
        prompts) whose task moved since, in place: a task's rows keep their indices in the question order."""
        if self.validation_questions is None:
            self.validation_questions = frozenset(r["question"] for r in self.mix.validation_rows())
            if any(q != row["prompt"] for q, row in zip(task.questions, task.truths)):
                raise ValueError(f"--curriculum-threshold: task {task.name}'s questions are not its rows' prompts")
        for name in sorted(self.stale):
            places = [i for i, row in enumerate(task.truths) if row["task"] == name]
            for i, row in zip(places, self.rows_for(name, len(places))):
                task.questions[i], task.truths[i] = row["prompt"], row
        self.stale.clear()

    def metrics(self) -> dict[str, float]:
        return {f"curriculum_level@{name}": level for name, level in self.levels.items()}

    def state(self) -> dict[str, Any]:
        """Levels and windows as JSON values, for a checkpoint."""
        return {"levels": dict(self.levels), "recent": {name: list(r) for name, r in self.recent.items()}}

    def load_state(self, state: dict[str, Any]) -> None:
        """Continue from `state` (what `state` returned); rows of tasks above level 0 are generated again by the
        next `apply`."""
        for name, level in state["levels"].items():
            if name not in self.levels:
                raise ValueError(f"checkpoint: its curriculum has task {name}, not in this run's mix")
            self.levels[name] = level
            self.recent[name] = deque(state["recent"][name], maxlen=self.window)
            if level > 0:
                self.stale.add(name)
