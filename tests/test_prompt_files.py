"""Each prompt brings its reward function and stop strings, by name or as a template file (PKU's data/*.prompt);
eval_zero_shot stops where its prompt does, evaluates competition_math's held-out tenth, defaults to A5's pairing;
--grader reaches every reward function, and runs saved before it existed keep their lenient grading."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.data.splits import evaluation_examples, run_data
from alignment.grader import (
    lenient_question_only_reward_fn,
    lenient_r1_zero_reward_fn,
    question_only_reward_fn,
    r1_zero_reward_fn,
)
from alignment.grpo.config import GRPOConfig, validate
from alignment.prompts import PROMPTS_DIR, prompt_kind, stop_strings
from alignment.run.generation import GenerationConfig
from alignment.run.training_settings import TrainingSettings
from alignment.tasks.building import evaluation_task, run_tasks, task_stop
from scripts import eval_zero_shot

runner = CliRunner()


@pytest.fixture
def pku_prompt_files(tmp_path) -> Path:
    """PKU's data/ folder: the same two templates as ours, under their own paths."""
    folder = tmp_path / "data"
    folder.mkdir()
    for name in ("r1_zero", "question_only"):
        (folder / f"{name}.prompt").write_text((PROMPTS_DIR / f"{name}.prompt").read_text())
    return folder


def test_a_template_file_is_graded_and_stopped_as_its_kind(pku_prompt_files, tmp_path):
    assert prompt_kind("r1_zero") == "r1_zero" and stop_strings("r1_zero") == ("</answer>",)
    assert prompt_kind("question_only") == "question_only" and stop_strings("question_only") == ()
    r1_file, question_file = pku_prompt_files / "r1_zero.prompt", pku_prompt_files / "question_only.prompt"
    assert prompt_kind(str(r1_file)) == "r1_zero" and stop_strings(str(r1_file)) == ("</answer>",)
    assert prompt_kind(str(question_file)) == "question_only" and stop_strings(str(question_file)) == ()
    own = tmp_path / "mine.prompt"
    own.write_text("Solve it and put the answer in <answer> </answer> tags.\n{question}\n")
    assert prompt_kind(str(own)) == "r1_zero"
    assert GRPOConfig(prompt=str(question_file)).stop == ()
    assert GRPOConfig(prompt=str(r1_file)).stop == ("</answer>",)
    # a run's math task, and an evaluation's, grades as the prompt's kind and --grader say: responses on which the four
    # graders differ
    graders = [
        (str(r1_file), "course", r1_zero_reward_fn),
        (str(question_file), "lenient", lenient_question_only_reward_fn),
        ("r1_zero", "lenient", lenient_r1_zero_reward_fn),
        (str(question_file), "course", question_only_reward_fn),
    ]
    data = str(Path(__file__).parents[1] / "data" / "sample_math.jsonl")
    for prompt, grader, reward_fn in graders:
        trained, _ = run_tasks(GRPOConfig(task="math", dataset=data, n_eval_examples=2, prompt=prompt, grader=grader))
        evaluated = evaluation_task(eval_zero_shot.EvalConfig(dataset=data, prompt=prompt, grader=grader))
        for task in (trained, evaluated):
            row = task.truths[0]
            answer = row["answer"]
            responses = [f"x </think> <answer>{answer}</answer> so", f"\\fbox{{{answer}}}", f"\\boxed{{{answer}}}"]
            assert [task.reward_fn(r, row) for r in responses] == [reward_fn(r, answer) for r in responses]


def test_a_bad_prompt_is_refused_naming_the_flag(tmp_path):
    with pytest.raises(ValueError, match="--prompt: unknown prompt 'r1'"):
        validate(GRPOConfig(prompt="r1"))
    (tmp_path / "no_slot.prompt").write_text("no placeholder")
    with pytest.raises(ValueError, match="--prompt: .* has no {question} placeholder"):
        validate(GRPOConfig(prompt=str(tmp_path / "no_slot.prompt")))


def test_eval_stops_where_its_prompt_does(tiny_model_dir, pku_prompt_files, tmp_path):
    """question_only must not stop at </answer> (its response runs to EOS); r1_zero, by name or file, does."""
    from alignment.run import generation

    data = str(Path(__file__).parents[1] / "data" / "sample_math.jsonl")
    for prompt, stop in (
        ("question_only", ()),
        (str(pku_prompt_files / "question_only.prompt"), ()),
        ("r1_zero", ("</answer>",)),
        (str(pku_prompt_files / "r1_zero.prompt"), ("</answer>",)),
    ):
        config = eval_zero_shot.EvalConfig(
            dataset=data, prompt=prompt, model=str(tiny_model_dir), backend="hf", output_dir=tmp_path / "setup"
        )
        assert generation.set_up(config, task_stop(config)).sampling.stop == stop, prompt
    explicit = eval_zero_shot.EvalConfig(
        dataset=data,
        prompt="question_only",
        stop=["\n\n"],
        model=str(tiny_model_dir),
        backend="hf",
        output_dir=tmp_path,
    )
    assert generation.set_up(explicit, task_stop(explicit)).sampling.stop == ("\n\n",)
    out = tmp_path / "eval"  # and a whole run with PKU's file
    flags = ["--dataset", data, "--model", tiny_model_dir, "--limit", 2, "--backend", "hf", "--grader-workers", 1]
    flags += ["--prompt", pku_prompt_files / "question_only.prompt", "--max-tokens", 6, "--output-dir", out]
    result = runner.invoke(eval_zero_shot.app, [str(f) for f in flags])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["stop"] is None and summary["num_examples"] == 2


def test_eval_defaults_to_a5s_pairing():
    config = GenerationConfig()
    assert (config.model, config.dataset, config.prompt, config.grader) == (
        "Qwen/Qwen2.5-Math-1.5B",
        "math",
        "r1_zero",
        "course",
    )


def test_competition_math_evaluates_the_tenth_a_training_run_holds_out(hub_mirror, capsys):
    examples, note = evaluation_examples("competition_math")
    data = run_data("competition_math", "train", None, 10_000)
    assert [e.question for e in examples] == [e.question for e in data.validation]  # the same questions, all
    assert len(examples) == (len(data.train) + len(examples)) // 10
    assert "evaluating the" in note and "a training run holds out" in note
    whole, none = evaluation_examples("math")
    assert none is None and len(whole) > len(examples)  # a source with a test split: that split, no note
    loaded = evaluation_task(eval_zero_shot.EvalConfig(dataset="competition_math", prompt="r1_zero"))
    assert len(loaded.questions) == len(examples) and "a training run holds out" in capsys.readouterr().out


def test_runs_saved_before_the_grader_setting_resume_lenient(tmp_path):
    from alignment.config.settings import read_run_settings

    settings = GRPOConfig(output_dir=tmp_path).to_json()
    del settings["grader"]  # settings.json of a run started before --grader existed
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    assert read_run_settings(tmp_path, GRPOConfig)["grader"] == "lenient"
    assert TrainingSettings.ADDED["grader"] == "lenient" and GRPOConfig().grader == "course"
