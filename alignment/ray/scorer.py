"""The Scorer actor: grades rollout texts (ParallelGrader: worker processes for large batches).

Kept apart from the model actors, and handed texts rather than Rollouts, so that its process never imports
torch or transformers: it starts in a fraction of a second instead of several.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass

from alignment.data.task import Task
from alignment.grading.parallel import ParallelGrader


@dataclass
class Scored:
    scores: list[dict[str, float]]  # one per rollout, in the generator's order
    seconds: float


class Scorer:
    name = "Scorer"

    def __init__(self, task: Task, workers: int | None) -> None:
        self.task, self.grader = task, ParallelGrader(task.reward_fn, workers)

    def ping(self) -> str:
        return self.name

    def node(self) -> str:
        """The id of the Ray node this actor runs on."""
        from alignment.ray.env import ray

        return ray.get_runtime_context().get_node_id()

    def grade(self, questions: Sequence[int], texts: Sequence[tuple[int, str]] | Scored) -> Scored:
        """Scores of (prompt index, response) pairs; prompt index i asked questions[i]. Episodes of an environment
        come scored by it (the generator's Scored), and pass through."""
        if isinstance(texts, Scored):
            return texts
        start = time.perf_counter()
        truths = self.task.truths_for(questions, [prompt for prompt, _ in texts])
        scores = self.grader([text for _, text in texts], truths)
        return Scored(scores, time.perf_counter() - start)
