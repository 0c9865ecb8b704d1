"""eval_zero_shot.py and best_of_n.py end to end on a tiny random model, and their errors on bad input."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scripts import best_of_n, eval_zero_shot

runner = CliRunner()
PROBLEMS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "What is 10 - 4?", "answer": "#### 6"},
    {"question": "What is 2 * 6?", "answer": "#### 12"},
]


@pytest.fixture
def dataset(tmp_path) -> Path:
    path = tmp_path / "tiny.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return path


def invoke(app, *args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_eval_zero_shot_end_to_end(tiny_model_dir, dataset, tmp_path):
    out = tmp_path / "eval"
    result = invoke(
        eval_zero_shot.app,
        "--dataset",
        dataset,
        "--model",
        tiny_model_dir,
        "--max-tokens",
        8,
        "--output-dir",
        out,
        "--backend",
        "hf",
        "--grader-workers",
        1,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(lines) == summary["num_examples"] == 3
    assert sum(summary["counts"].values()) == 3
    assert {"prompt", "ground_truth", "response", "format_reward", "answer_reward", "reward"} <= set(lines[0])
    assert [line["ground_truth"] for line in lines] == ["7", "6", "12"]
    assert lines[0]["prompt"].endswith("User: Tom has 3 apples and buys 4. How many?\nAssistant: <think>")
    assert summary["generated_tokens"] == sum(line["num_tokens"] for line in lines)
    assert summary["backend"] == "hf" and summary["timings_s"]["generation_s"] > 0
    # a second run into the same folder is refused and the first results stay
    again = invoke(eval_zero_shot.app, "--dataset", dataset, "--model", tiny_model_dir, "--output-dir", out)
    assert again.exit_code != 0 and "--overwrite" in again.output
    assert json.loads((out / "summary.json").read_text()) == summary


def test_best_of_n_end_to_end(tiny_model_dir, dataset, tmp_path):
    out = tmp_path / "bon"
    result = invoke(
        best_of_n.app,
        "--dataset",
        dataset,
        "--model",
        tiny_model_dir,
        "--n-max",
        4,
        "--ns",
        1,
        "--ns",
        2,
        "--ns",
        4,
        "--max-tokens",
        6,
        "--output-dir",
        out,
        "--backend",
        "hf",
        "--grader-workers",
        1,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(lines) == 12 and [line["sample"] for line in lines[:4]] == [0, 1, 2, 3]
    assert set(summary["pass_at"]) == set(summary["best_at"]) == {"1", "2", "4"}
    assert summary["best_at"]["1"] == pytest.approx(summary["pass_at"]["1"])
    assert (out / "best_of_n.png").stat().st_size > 1000


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--dataset", "missing.jsonl"], "--dataset"),
        (["--prompt", "socratic"], "--prompt"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_eval_bad_input_names_the_flag(dataset, tmp_path, args, flag):
    base = ["--dataset", str(dataset), "--model", "unused", "--output-dir", str(tmp_path / "o")]
    result = invoke(eval_zero_shot.app, *base, *args)
    assert result.exit_code != 0
    assert flag in result.output
    assert not (tmp_path / "o").exists()  # rejected before anything was written or loaded


def test_best_of_n_rejects_n_larger_than_samples(dataset, tmp_path):
    result = invoke(
        best_of_n.app,
        "--dataset",
        dataset,
        "--model",
        "unused",
        "--n-max",
        4,
        "--ns",
        8,
        "--output-dir",
        tmp_path / "o",
    )
    assert result.exit_code != 0
    assert "--ns" in result.output and "--n-max=4" in result.output
