"""alignment.experiments.run_table: metrics.jsonl files and both shapes of wandb CSV export read as runs of rows."""

import json
import math

import pytest

from alignment.experiments.run_table import (
    final_rewards,
    final_rewards_table,
    load_runs,
    read_metrics_jsonl,
    read_wandb_export,
)

# a chart panel's export: Step, then "<run> - <metric>" with smoothing companions, blanks where a run has no point
PANEL = (
    '"Step","clip - eval_reward","clip - eval_reward__MIN","clip - eval_reward__MAX","no_clip - eval_reward"\n'
    '"0","0.1","0.1","0.1","0.2"\n'
    '"5","0.4","0.3","0.5",""\n'
    '"10","0.5","0.5","0.5","0.3"\n'
)
HISTORY = (  # a run's history export: one column per metric, wandb's own bookkeeping columns
    "_step,_runtime,_timestamp,eval_reward,grad_norm,token_entropy\n"
    "0,12.5,1763800000.1,0.25,,\n"
    "1,30.0,1763800017.6,,1.5,2.0\n"
    "2,47.5,1763800035.1,0.5,NaN,1.8\n"
)


def test_panel_export_gives_one_run_per_column_prefix(tmp_path):
    path = tmp_path / "eval_reward.csv"
    path.write_text(PANEL)
    runs = read_wandb_export(path)
    assert runs == {
        "clip": [
            {"grpo_step": 0.0, "eval_reward": 0.1},
            {"grpo_step": 5.0, "eval_reward": 0.4},
            {"grpo_step": 10.0, "eval_reward": 0.5},
        ],
        "no_clip": [{"grpo_step": 0.0, "eval_reward": 0.2}, {"grpo_step": 10.0, "eval_reward": 0.3}],
    }


def test_history_export_is_one_run_named_after_the_file(tmp_path):
    path = tmp_path / "lr_1e-5.csv"
    path.write_text(HISTORY)
    assert read_wandb_export(path) == {
        "lr_1e-5": [
            {"grpo_step": 0.0, "time_elapsed_s": 12.5, "eval_reward": 0.25},
            {"grpo_step": 1.0, "time_elapsed_s": 30.0, "grad_norm": 1.5, "token_entropy": 2.0},
            {"grpo_step": 2.0, "time_elapsed_s": 47.5, "eval_reward": 0.5, "token_entropy": 1.8},
        ]
    }


def test_panel_exports_of_the_same_runs_merge_by_step(tmp_path):
    (tmp_path / "reward.csv").write_text(PANEL)
    (tmp_path / "entropy.csv").write_text("Step,clip - token_entropy,other - token_entropy\n5,1.25,2\n7,1.0,\n")
    runs = load_runs([tmp_path / "reward.csv", tmp_path / "entropy.csv"])
    assert list(runs) == ["clip", "no_clip", "other"]
    assert runs["clip"] == [
        {"grpo_step": 0.0, "eval_reward": 0.1},
        {"grpo_step": 5.0, "eval_reward": 0.4, "token_entropy": 1.25},
        {"grpo_step": 7.0, "token_entropy": 1.0},
        {"grpo_step": 10.0, "eval_reward": 0.5},
    ]
    assert runs["other"] == [{"grpo_step": 5.0, "token_entropy": 2.0}]


def test_metrics_jsonl_runs_keep_their_rows_and_are_named_by_folder(tmp_path):
    rows = [
        {"grpo_step": 0, "eval_reward": 0.25},
        {"grpo_step": 1, "train_reward": 0.5},
        {"grpo_step": 1, "eval_reward": 0.75},
    ]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = load_runs([tmp_path / "a" / "metrics.jsonl", tmp_path / "b" / "metrics.jsonl"])
    assert runs == {"a": rows, "b": rows}
    with pytest.raises(ValueError, match="two runs named 'a'"):
        load_runs([tmp_path / "a" / "metrics.jsonl", tmp_path / "a" / "metrics.jsonl"])


def test_bad_files_name_the_problem(tmp_path):
    (tmp_path / "m.jsonl").write_text('{"grpo_step": 0}\n{"grpo_step": 1\n')
    with pytest.raises(ValueError, match="m.jsonl, line 2: not JSON"):
        read_metrics_jsonl(tmp_path / "m.jsonl")
    (tmp_path / "x.csv").write_text("time,eval_reward\n0,1\n")
    with pytest.raises(ValueError, match="x.csv: no step column.*columns: time, eval_reward"):
        read_wandb_export(tmp_path / "x.csv")
    with pytest.raises(ValueError, match="no such file"):
        load_runs([tmp_path / "missing.csv"])


def test_final_rewards_and_table():
    rows = [
        {"grpo_step": 0, "eval_reward": 0.2, "time_elapsed_s": 1.0},
        {"grpo_step": 5, "loss": 1.0},
        {"grpo_step": 5, "eval_reward": 0.6, "time_elapsed_s": 50.0},
        {"grpo_step": 10, "eval_reward": 0.4},
    ]
    result = final_rewards(rows)
    assert result is not None and result["step"] == 10 and result["final"] == 0.4 and result["best"] == 0.6
    assert math.isnan(result["time_s"])  # wandb panel exports carry no wall time
    assert final_rewards([{"grpo_step": 1, "loss": 1.0}]) is None
    table = final_rewards_table({"a": rows[:3], "b": [{"grpo_step": 1, "loss": 1.0}]})
    assert "| a | 5 | 0.600 | 0.600 | 50 |" in table and "| b | - | no validation | - | - |" in table
