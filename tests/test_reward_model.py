"""A reward model as one of a task's rewards: a tiny random sequence-classification model saved to a folder scores
batches of prompt + completion in its chat template, loads once, and grades in worker processes by the task's name."""

import textwrap

import pytest
import torch
from transformers import AutoModelForSequenceClassification, Qwen2ForSequenceClassification

from alignment.grading.parallel import ParallelGrader
from alignment.tasks.loading import definition_for, reward_set
from alignment.tasks.reward_model import RewardModel
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-rm")
    config = tiny_config("qwen2", len(tokenizer), tokenizer.pad_token_id, num_labels=1)
    Qwen2ForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_scores_are_the_models_logit_on_the_chat_exchange(reward_model_dir, tokenizer):
    model = RewardModel(reward_model_dir, batch_size=2)
    rows = [{"prompt": "Name a fruit."}, {"prompt": "Name a fruit."}, {"prompt": [{"role": "user", "content": "Hi"}]}]
    completions = ["apple", "a rock", "hello there"]
    scores = model(completions, rows)
    loaded = model._model
    assert model(completions, rows) == scores and model._model is loaded  # loaded once
    reference = AutoModelForSequenceClassification.from_pretrained(reward_model_dir).eval()
    for completion, row, score in zip(completions, rows, scores):
        text = model.text(completion, row)
        assert text.startswith("<|im_start|>") and completion in text  # its own tokenizer's chat template
        with torch.no_grad():
            expected = reference(**tokenizer(text, return_tensors="pt")).logits[0, 0].item()
        assert score == pytest.approx(expected, abs=1e-4)  # padded batches score as single rows
    assert len(set(scores)) == 3


@pytest.mark.slow  # about 30 s: each worker imports transformers and loads the model
def test_a_reward_model_in_a_task_file_grades_in_worker_processes(reward_model_dir, tmp_path):
    path = tmp_path / "rm_task.py"
    path.write_text(
        textwrap.dedent(
            f"""
            from alignment.tasks import Reward, TaskDefinition
            from alignment.tasks.reward_model import RewardModel

            task = TaskDefinition(
                rows=[{{"prompt": "Name a fruit."}}],
                rewards=[Reward(RewardModel({str(reward_model_dir)!r}), name="preference", batched=True)],
            )
            """
        )
    )
    source = f"{path}:task"
    rewards = reward_set(source, definition_for(source, {}), {})
    # 16 responses: the pool's deadline (10 s a response) leaves a worker time to import transformers and load it
    completions, rows = ["apple", "pear", "rock", "x"] * 4, [{"prompt": "Name a fruit."}] * 16
    here = rewards.grade_batch(completions, rows)
    with ParallelGrader(rewards, 2) as grader:
        there = grader(completions, rows)
    assert [s["reward_preference"] for s in there] == pytest.approx([s["reward_preference"] for s in here], abs=1e-5)


def test_a_folder_without_a_model_is_refused_when_the_task_is_read(tmp_path):
    with pytest.raises(ValueError, match="RewardModel .*: no model folder there"):
        RewardModel(tmp_path)
