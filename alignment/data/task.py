"""What a run trains on, as the loops read it: questions, their ground truths, a prompt template and a reward
function. A user's task (alignment/tasks/definition.py) becomes one: its rows are the ground truths."""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from alignment.data.math_datasets import spread_subset


@dataclass
class Task:
    questions: list[str]
    truths: list[Any]  # whatever reward_fn takes as ground truth: an answer string, a keyword list, ...
    template: str  # contains {question}
    reward_fn: Callable[[str, Any], dict[str, float]]  # a task's RewardSet (alignment/tasks/) grades batches too
    categories: list[str] | None = None  # per question, what evaluations break the reward down by
    name: str = ""  # the --task or --env that gave it, for messages
    answer_field: str | None = None  # the field of a row truth that logs show as its ground truth (None: the truth)
    question_field: str | None = None  # the field of a row truth that logs show as its question (None: the question)

    def subset(self, n: int | None) -> "Task":
        """`n` of its questions (None: all) with their truths and categories, spread over them by spread_subset's
        fixed seed, in their order."""
        keep = spread_subset(list(range(len(self.questions))), n)
        return replace(
            self,
            questions=[self.questions[i] for i in keep],
            truths=[self.truths[i] for i in keep],
            categories=None if self.categories is None else [self.categories[i] for i in keep],
        )

    def truths_for(self, questions: Sequence[int], prompt_indices: Sequence[int]) -> list[Any]:
        """Ground truths of responses to prompt_indices, where prompt i asked question questions[i]."""
        return [self.truths[questions[i]] for i in prompt_indices]

    def logged_question(self, question: int) -> str:
        """What logs show as question `question`: its row's question field when the task names one (the math task's
        question, where its prompt is the question in the --prompt template)."""
        truth = self.truths[question]
        if self.question_field is not None and isinstance(truth, Mapping):
            return truth[self.question_field]
        return self.questions[question]

    def logged_truth(self, truth: Any) -> Any:
        """What logs show as a rollout's ground truth: the row's answer field when the task names one."""
        if self.answer_field is not None and isinstance(truth, Mapping):
            return truth.get(self.answer_field)
        return truth
