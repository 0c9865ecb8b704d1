"""What a run trains on, as the loops read it: questions, their ground truths, a prompt template and a reward
function. A user's task (alignment/tasks/definition.py) becomes one: its rows are the ground truths."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Task:
    questions: list[str]
    truths: list[Any]  # whatever reward_fn takes as ground truth: an answer string, a keyword list, ...
    template: str  # contains {question}
    reward_fn: Callable[[str, Any], dict[str, float]]  # a task's RewardSet (alignment/tasks/) grades batches too
    categories: list[str] | None = None  # per question, what evaluations break the reward down by
    name: str = ""  # the --task or --env that gave it, for messages

    def truths_for(self, questions: Sequence[int], prompt_indices: Sequence[int]) -> list[Any]:
        """Ground truths of responses to prompt_indices, where prompt i asked question questions[i]."""
        return [self.truths[questions[i]] for i in prompt_indices]
