"""The generated arithmetic task: determinism, disjoint splits, correct answers, grading, loading, jsonl export."""

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.config.cli import read_config_file
from alignment.data.arithmetic import ArithmeticSpec, generate, in_test_split, parse_source, write_jsonl
from alignment.data.math_datasets import load_math_examples
from alignment.data.sft_examples import load_sft_examples
from alignment.data.splits import run_data
from alignment.experiments.plotting import read_rows
from alignment.grader import reward_fn_for
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.sampler import validation_sampling
from alignment.prompts import format_prompt, load_prompt
from alignment.sft_run import warm_start_config
from alignment.tasks.building import run_tasks
from scripts import train_grpo as train_grpo_script

SOURCE = "arithmetic?ops=1-3&max=30&train=400&test=60"
LINE = re.compile(r"^(\d+) ([-+*/]) (\d+) = (\d+)$")


def contents(spec: ArithmeticSpec, split: str) -> list[str]:
    return [p.content() for p in generate(spec, split)]


def test_same_seed_same_problems_and_other_seeds_differ():
    spec = parse_source(SOURCE)
    assert [p.question for p in generate(spec, "train")] == [p.question for p in generate(spec, "train")]
    other = parse_source(SOURCE + "&seed=1")
    assert len(set(contents(spec, "train")) & set(contents(other, "train"))) < 40  # a tenth could coincide
    assert contents(spec, "test") == contents(other, "test")  # the held-out exam does not move with the seed


def test_splits_are_disjoint_for_every_seed_and_the_test_split_is_distinct():
    spec = parse_source(SOURCE)
    test = contents(spec, "test")
    assert len(test) == len(set(test)) == 60
    for seed in range(3):
        train = contents(parse_source(f"{SOURCE}&seed={seed}"), "train")
        assert len(train) == len(set(train)) == 400
        assert not set(train) & set(test)
    assert all(in_test_split(p) for p in generate(spec, "test"))


def test_answers_recomputed_from_the_question_and_solution():
    """The numbers the question states, in order, are the solution's; each line's arithmetic and the final answer
    hold; answers are whole, non-negative, and the operation counts span the asked range."""
    ops_seen = set()
    for record in [p.record() for p in generate(parse_source(SOURCE), "test")]:
        *lines, final = record["answer"].split("\n")
        steps = [LINE.match(line) for line in lines]
        assert all(steps), record["answer"]
        value = int(steps[0].group(1))
        for step in steps:
            a, op, b, result = int(step.group(1)), step.group(2), int(step.group(3)), int(step.group(4))
            assert a == value
            value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
            assert value == result >= 0 and (op != "/" or a % b == 0)
        assert final == f"#### {value}"
        stated = [int(n) for n in re.findall(r"\d+", record["question"])]
        assert stated == [int(steps[0].group(1))] + [int(s.group(3)) for s in steps]
        ops_seen.add(len(steps))
    assert ops_seen == {1, 2, 3}


@pytest.mark.parametrize(
    ("response", "truth", "format_reward", "reward"),
    [
        ("3 + 4 = 7 </think> <answer> 7 </answer>", "7", 1.0, 1.0),
        ("3 + 4 = 7 </think> <answer> 7.0 </answer>", "7", 1.0, 1.0),
        ("12 * 2 = 24 </think> <answer>24</answer>", "24", 1.0, 1.0),
        ("3 + 4 = 8 </think> <answer> 8 </answer>", "7", 1.0, 0.0),
        ("3 + 4 = 7, so the answer is 7", "7", 0.0, 0.0),
    ],
)
def test_r1_zero_grader_on_the_task_answers(response, truth, format_reward, reward):
    scores = reward_fn_for("r1_zero", "course")(response, truth)
    assert (scores["format_reward"], scores["reward"]) == (format_reward, reward)


def test_loaders_read_it_by_name_with_either_prompt():
    data = run_data(SOURCE, "train", None, 20)
    assert (len(data.train), len(data.validation)) == (400, 20)
    assert "overlap: 0 of 20" in data.notes[-1]
    test = load_math_examples(SOURCE)  # the evaluation split by default
    assert [e.question for e in test] == [p.question for p in generate(parse_source(SOURCE), "test")]
    assert test[0].answer == test[0].solution.rsplit("#### ", 1)[1]
    _, task = run_tasks(GRPOConfig(task="math", dataset=SOURCE, n_eval_examples=20, prompt="question_only"))
    assert task.questions[0] == format_prompt(load_prompt("question_only"), data.validation[0].question)
    assert task.reward_fn(f"so \\boxed{{{data.validation[0].answer}}}", task.truths[0])["reward"] == 1.0
    trace = load_sft_examples(SOURCE, "gsm8k", load_prompt("r1_zero"), "train", 5)[0]
    assert trace.response.endswith(f"</think> <answer> {trace.ground_truth} </answer>")
    assert reward_fn_for("r1_zero", "course")(trace.response, trace.ground_truth)["reward"] == 1.0


def test_jsonl_export_reads_back_as_the_same_dataset(tmp_path):
    train_file, test_file = write_jsonl(SOURCE, tmp_path / "arith")
    assert (train_file.name, test_file.name) == ("train.jsonl", "test.jsonl")
    from_files = run_data(str(tmp_path / "arith"), "train", None, None)
    by_name = run_data(SOURCE, "train", None, None)
    assert from_files.train == by_name.train and from_files.validation == by_name.validation


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("arithmetic?ops=0-2", "ops must be a range within 1-3"),
        ("arithmetic?ops=1-4", "ops must be a range within 1-3"),
        ("arithmetic?max=x", "max='x' is not a whole number"),
        ("arithmetic?depth=2", "unknown parameter 'depth'"),
        ("arithmetic?min=5&max=5", "needs 1 <= min < max"),
        ("arithmetic?ops=1&max=3&test=40", "found only"),
    ],
)
def test_bad_sources_name_the_parameter(source, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        generate(parse_source(source), "test")


def test_preset_warm_start_evaluates_as_grpo_validates():
    """The preset's warm start is an SFT run on the same questions, validated on GRPO's held-out questions at GRPO's
    validation settings, so its last evaluation and GRPO's step 0 measure the same thing."""
    config = GRPOConfig(**read_config_file(Path("configs/arithmetic_laptop.toml"), GRPOConfig))
    validate(config)
    sft = warm_start_config(config)
    assert (sft.dataset, sft.model, sft.prompt, sft.data_format) == (config.dataset, config.model, "r1_zero", "gsm8k")
    assert sft.n_examples == config.warm_start_sft_steps * config.warm_start_sft_batch_size
    grpo_validation = validation_sampling(config)
    assert (sft.n_eval_examples, sft.eval_max_tokens, sft.eval_temperature, sft.eval_top_p, sft.seed) == (
        config.n_eval_examples,
        grpo_validation.max_tokens,
        grpo_validation.temperature,
        grpo_validation.top_p,
        config.seed,
    )
    # the preset validates greedily while it samples rollouts at another temperature: the warm start follows the former
    assert sft.eval_temperature == 0 != config.sampling_temperature
    assert sft.output_dir == config.output_dir / "warm_start"
    with pytest.raises(ValueError, match="--warm-start-sft-steps needs --task math"):
        validate(replace(config, task="keywords"))
    with pytest.raises(ValueError, match="--warm-start-sft-batch-size must be >= 1"):
        validate(replace(config, warm_start_sft_batch_size=0))
    assert config.torch_threads == 1 == sft.torch_threads  # a setting of every training script now, not SFT's alone
    with pytest.raises(ValueError, match="--torch-threads must be >= 1"):
        validate(replace(config, torch_threads=0))


@pytest.mark.slow  # an SFT run then a GRPO run, 4-5 s
def test_one_command_warm_starts_then_trains_grpo_from_that_policy(tiny_model_dir, tmp_path):
    """scripts/train_grpo.py with --warm-start-sft-steps: the SFT run in warm_start/ (validated before and after),
    GRPO started from its policy/, and both gains printed."""
    out = tmp_path / "run"
    flags = ["--model", str(tiny_model_dir), "--dataset", "arithmetic?ops=1&max=30&train=20&test=4"]
    flags += ["--warm-start-sft-steps", "1", "--warm-start-sft-batch-size", "2", "--backend", "hf"]
    flags += ["--n-grpo-steps", "1", "--rollout-batch-size", "4", "--group-size", "2", "--train-batch-size", "4"]
    flags += ["--gradient-accumulation-steps", "2", "--sampling-max-tokens", "6", "--n-eval-examples", "4"]
    flags += ["--grader-workers", "1", "--output-dir", str(out)]
    result = CliRunner().invoke(train_grpo_script.app, flags)
    assert result.exit_code == 0, result.output
    warm_evals = [row for row in read_rows(out / "warm_start" / "metrics.jsonl") if "eval_reward" in row]
    assert [row["grpo_step"] for row in warm_evals] == [0, 1]
    assert json.loads((out / "settings.json").read_text())["model"] == str(out / "warm_start" / "policy")
    assert "warm start (SFT, 1 step of 2): held-out reward" in result.output
    assert re.search(r"held-out reward: [\d.]+ at step 0 \(4 questions\) -> [\d.]+ at step 1", result.output)
