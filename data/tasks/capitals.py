"""Name a country's capital: a task of one's own in one file, the example of docs/guides/own_task.md.

    uv run scripts/train_grpo.py --task data/tasks/capitals.py:task --model smollm2-135m

Its rows are data/tasks/capitals/ (train.jsonl and test.jsonl: `country`, `capital_city`, `continent`); the task
reads the capital as `answer` (a field rename), asks in the model's chat turn, and trains on two weighted rewards.
"""

from pathlib import Path

from alignment.tasks import Reward, TaskDefinition


def correct(completion: str, row: dict) -> float:
    """1 when the completion names the capital."""
    return float(row["answer"].lower() in completion.lower())


def brief(completion: str, row: dict) -> float:
    """1 for an answer of a few words, down to 0 at 40 words: a capital needs no essay."""
    return max(0.0, min(1.0, (40 - len(completion.split())) / 36))


task = TaskDefinition(
    rows=str(Path(__file__).parent / "capitals"),
    prompt="What is the capital of {country}? Answer with the city's name.",
    system_prompt="You answer geography questions in a few words.",
    rewards=[correct, Reward(brief, weight=0.2)],
    fields={"answer": "capital_city"},
    answer_field="answer",
    category_field="continent",
)
