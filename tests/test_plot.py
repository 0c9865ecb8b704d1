import json
from pathlib import Path

import pytest

from alignment.experiments.plotting import plot_runs, read_rows


def write_run(folder: Path, rewards: list[float]) -> Path:
    folder.mkdir(parents=True)
    rows = [{"grpo_step": 0, "eval_reward": rewards[0], "time_elapsed_s": 1.0}]
    for step, reward in enumerate(rewards[1:], start=1):
        rows.append(
            {
                "grpo_step": step,
                "loss": 0.1,
                "grad_norm": 1.0 + step,
                "token_entropy": 2.0,
                "train_reward": reward,
                "response_length_mean": 20,
                "response_length_max": 32,
                "kl_prev_k3": 0.01 * step,
                "clip_fraction": 0.1,
                "time_rollout_s": 3.0,
                "time_grading_s": 0.1,
                "time_train_s": 5.0,
                "time_weight_sync_s": 0.0,
                "time_elapsed_s": 10.0 * step,
            }
        )
        rows.append({"grpo_step": step, "eval_reward": reward, "time_elapsed_s": 10.0 * step + 1})
    path = folder / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_two_runs_on_shared_figures(tmp_path):
    a = write_run(tmp_path / "clip", [0.1, 0.2, 0.4])
    b = write_run(tmp_path / "noclip", [0.1, 0.15, 0.2])
    written = plot_runs([a, b], [], tmp_path / "plots")
    names = {p.name for p in written}
    assert {
        "eval_reward_vs_step.png",
        "eval_reward_vs_time.png",
        "token_entropy.png",
        "grad_norm.png",
        "response_length.png",
        "kl.png",
        "clip_fraction.png",
        "phase_times_clip.png",
        "phase_times_noclip.png",
    } <= names
    assert all(p.stat().st_size > 5000 for p in written)


def test_wandb_csv_export_and_label_errors(tmp_path):
    csv_path = tmp_path / "export.csv"
    csv_path.write_text("_step,eval_reward,grad_norm\n0,0.1,\n1,0.3,2.5\n")
    rows = read_rows(csv_path)
    assert rows == [{"grpo_step": 0.0, "eval_reward": 0.1}, {"grpo_step": 1.0, "eval_reward": 0.3, "grad_norm": 2.5}]
    written = plot_runs([csv_path], ["wandb"], tmp_path / "plots")
    assert {p.name for p in written} == {"eval_reward_vs_step.png", "grad_norm.png"}
    with pytest.raises(ValueError, match="2 labels for 1 runs"):
        plot_runs([csv_path], ["a", "b"], tmp_path / "plots")
    with pytest.raises(ValueError, match="no such file"):
        plot_runs([tmp_path / "missing.jsonl"], [], tmp_path / "plots")
