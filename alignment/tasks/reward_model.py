"""A trained reward model as one of a task's rewards: a sequence-classification model from a local folder scores the
prompt and completion, a batch at a time.

    from alignment.tasks import Reward, TaskDefinition
    from alignment.tasks.reward_model import RewardModel

    task = TaskDefinition(
        rows="data/tasks/dates.jsonl",
        prompt="Extract the date from: {text}",
        rewards=[exact_date, Reward(RewardModel("models/my-rm"), weight=0.5, name="preference", batched=True)],
    )

The model loads once per process, on its first batch (so preflight, each grading worker and each Ray scorer load
their own, and a task file that is only read loads nothing). With a chat template of its own, the model scores the
exchange as its chat turns (the row's prompt as the user's, the completion as the assistant's); otherwise the prompt
and completion as one text. It travels like every reward of a task file: by the file's name, rebuilt where it runs.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from alignment.tasks.definition import Row


class RewardModel:
    """`RewardModel(folder)(completions, rows)`: one float per completion, the model's single logit. Use it as a
    batched reward (`Reward(RewardModel(folder), batched=True)`). `prompt_field` is the row field holding the prompt
    (text or chat messages; None or missing: the completion alone is scored)."""

    def __init__(
        self,
        folder: str | Path,
        batch_size: int = 8,
        prompt_field: str | None = "prompt",
        max_length: int = 2048,
        device: str = "cpu",
    ) -> None:
        self.folder, self.batch_size, self.prompt_field = Path(folder).expanduser(), batch_size, prompt_field
        self.max_length, self.device = max_length, device
        if batch_size < 1:
            raise ValueError(f"RewardModel {self.folder}: batch_size must be >= 1, got {batch_size}")
        if not (self.folder / "config.json").is_file():
            raise ValueError(f"RewardModel {self.folder}: no model folder there (no config.json)")
        self._model: Any = None
        self._tokenizer: Any = None
        self.__name__ = f"reward_model_{self.folder.name}"  # its label in the logs unless the Reward names it

    def _load(self) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(self.folder)
        model = AutoModelForSequenceClassification.from_pretrained(self.folder).to(self.device).eval()
        if model.config.num_labels != 1:
            raise ValueError(f"RewardModel {self.folder}: {model.config.num_labels} labels; a reward model has one")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id  # the last non-pad token of each row is scored
        self._model, self._tokenizer = model, tokenizer

    def text(self, completion: str, row: Row) -> str:
        """What the model reads: the exchange in its chat template when it has one, else prompt then completion."""
        prompt = row.get(self.prompt_field) if self.prompt_field else None
        if isinstance(prompt, list):  # chat messages
            messages = [*prompt, {"role": "assistant", "content": completion}]
        else:
            messages = [{"role": "user", "content": prompt or ""}, {"role": "assistant", "content": completion}]
        if getattr(self._tokenizer, "chat_template", None):
            return self._tokenizer.apply_chat_template(messages, tokenize=False)
        return "\n".join(str(m["content"]) for m in messages if m["content"])

    def __call__(self, completions: Sequence[str], rows: Sequence[Row]) -> list[float]:
        if self._model is None:
            self._load()
        texts = [self.text(c, r) for c, r in zip(completions, rows)]
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            batch = self._tokenizer(
                texts[start : start + self.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.max_length,
            ).to(self.device)
            with torch.inference_mode():
                logits = self._model(**batch).logits
            scores += logits[:, 0].float().tolist()
        return scores
