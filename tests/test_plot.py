import json
from pathlib import Path

import pytest

from alignment.experiments.plotting import (
    KL_SUM_KEYS,
    describe_time_per_step,
    kl_validation_figure,
    pass_at_n_figure,
    plot_runs,
    read_best_of_n,
    read_rows,
    time_breakdown,
    time_breakdown_figure,
    time_per_step,
)


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
                "kl_ref_k1_sum": 0.5 * step,  # UW v2's Eq. 8
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
        "time_per_step.png",
        "kl_sum_and_validation.png",
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


def test_time_breakdown_counts_each_step_once_against_its_wall_time(tmp_path):
    rows = read_rows(write_run(tmp_path / "run", [0.1, 0.2, 0.4]))
    rows.insert(2, rows[1] | {"loss": 0.2})  # a second optimizer-step row of step 1 shares its timings
    assert time_breakdown(rows) == {
        "rollout": 6.0,
        "grading": 0.2,
        "old_logprob": 0.0,
        "train": 10.0,
        "weight_sync": 0.0,
        "wall": 21.0,
    }
    assert time_breakdown_figure({"run": rows}, tmp_path / "t.png") and (tmp_path / "t.png").stat().st_size > 5000
    assert not time_breakdown_figure({"evals only": [{"grpo_step": 0, "eval_reward": 0.5}]}, tmp_path / "none.png")


def test_kl_with_validation_and_pass_at_n_figures(tmp_path):
    rows = read_rows(write_run(tmp_path / "run", [0.1, 0.2, 0.4]))
    assert kl_validation_figure({"run": rows}, tmp_path / "kl.png") and (tmp_path / "kl.png").stat().st_size > 5000
    without_kl = [{k: v for k, v in row.items() if not k.startswith("kl_")} for row in rows]
    assert not kl_validation_figure({"run": without_kl}, tmp_path / "none.png") and not (tmp_path / "none.png").exists()
    (tmp_path / "summary.json").write_text(json.dumps({"pass_at": {"1": 0.25, "4": 0.5}, "best_at": {"1": 0.25}}))
    summary = read_best_of_n(tmp_path / "summary.json")
    assert summary == {"pass_at": {1: 0.25, 4: 0.5}, "best_at": {1: 0.25}}
    assert pass_at_n_figure({"smollm2": summary}, tmp_path / "pass.png")
    (tmp_path / "other.json").write_text('{"generated_tokens": 3}')
    with pytest.raises(ValueError, match="not a summary.json of scripts/best_of_n.py"):
        read_best_of_n(tmp_path / "other.json")


def test_time_per_step_averages_each_phase_over_the_steps():
    """UW A3 v1 problem 14: "report averages per training step". A step's rows share its timings (counted once); a
    sync that did not finish (NaN) is left out of its mean; the whole step's time where the Ray driver logs it."""
    timings = {"time_rollout_s": 3.0, "time_grading_s": 0.5, "time_train_s": 5.0, "time_old_logprob_s": 1.0}
    rows = [
        {"grpo_step": 1, "time_weight_sync_s": 0.2, "time_step_s": 10.0} | timings,
        {"grpo_step": 1, "time_weight_sync_s": 0.2, "time_step_s": 10.0} | timings,  # a second optimizer step
        {"grpo_step": 1, "eval_reward": 0.5},
        {"grpo_step": 2, "time_weight_sync_s": 0.4, "time_step_s": 12.0} | timings | {"time_train_s": 7.0},
        {"grpo_step": 3, "time_weight_sync_s": float("nan"), "time_step_s": 14.0} | timings,
    ]
    means = time_per_step(rows)
    assert means == pytest.approx(
        {
            "rollout": 3.0,
            "grading": 0.5,
            "old_logprob": 1.0,
            "train": 17 / 3,
            "weight_sync": 0.3,
            "step": 12.0,
            "steps": 3,
        }
    )
    assert describe_time_per_step(rows) == (
        "seconds per GRPO step (mean of 3 steps): rollout 3.000, grading 0.500, old_logprob 1.000, train 5.667, "
        "weight_sync 0.300; whole step 12.000"
    )
    assert time_per_step([{"grpo_step": 0, "eval_reward": 0.1}]) == {} and describe_time_per_step([]) is None


def test_eq8_sums_are_plotted_beside_validation_reward(tmp_path):
    rows = read_rows(write_run(tmp_path / "run", [0.1, 0.2, 0.4]))
    assert kl_validation_figure({"run": rows}, tmp_path / "sum.png", keys=KL_SUM_KEYS)
    assert (tmp_path / "sum.png").stat().st_size > 5000
    without = [{k: v for k, v in row.items() if not k.endswith("_sum")} for row in rows]
    assert not kl_validation_figure({"run": without}, tmp_path / "x.png", keys=KL_SUM_KEYS)  # no sum logged


@pytest.fixture
def xlabels(monkeypatch) -> dict[str, str]:
    """The x-axis label of every figure drawn, by file name, read from the matplotlib figure as it is saved."""
    from alignment.experiments import plotting

    seen: dict[str, str] = {}
    save = plotting.save_png

    def recording(fig, path: Path) -> None:
        seen[path.name] = fig.axes[0].get_xlabel()
        save(fig, path)

    monkeypatch.setattr(plotting, "save_png", recording)
    return seen


def write_settings(folder: Path, config_cls: type) -> None:
    (folder / "settings.json").write_text(json.dumps(config_cls(output_dir=folder).to_json()))


def test_each_run_kind_names_its_step(tmp_path):
    from alignment.experiments.plotting import step_label
    from alignment.grpo.config import GRPOConfig
    from alignment.supervised.config import EIConfig, SFTConfig

    folders = {}
    for name, config_cls in (("grpo", GRPOConfig), ("sft", SFTConfig), ("ei", EIConfig)):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        write_settings(folders[name], config_cls)
    assert [step_label([folders[k]] * 2) for k in ("grpo", "sft", "ei")] == ["GRPO step", "SFT step", "EI step"]
    assert step_label([folders["grpo"], folders["sft"]]) == "step"  # runs of different kinds
    assert step_label([folders["ei"], tmp_path]) == "step"  # a folder without settings.json (a wandb export)


def test_plots_of_ei_runs_are_against_the_ei_step(tmp_path, xlabels):
    from alignment.supervised.config import EIConfig

    runs = [write_run(tmp_path / f"run{i}", [0.1, 0.2]) for i in range(2)]
    for path in runs:
        write_settings(path.parent, EIConfig)
    plot_runs(runs, [], tmp_path / "plots", phases=False)
    assert xlabels["eval_reward_vs_step.png"] == "EI step" and xlabels["token_entropy.png"] == "EI step"
    assert xlabels["eval_reward_vs_time.png"] == "wall time (s)"


def test_sft_and_ei_run_figures_name_their_step_and_entropy(tmp_path, xlabels):
    from alignment.experiments.plotting import plot_sft_run
    from alignment.supervised.config import EIConfig

    run = tmp_path / "ei"
    run.mkdir()
    write_settings(run, EIConfig)
    rows = [{"grpo_step": 0, "eval_reward": 0.1, "eval_format_reward": 0.5, "eval_answer_reward": 0.1}] + [
        {"grpo_step": s, "kept_fraction": 0.1, "token_entropy": 1.5, "sft_token_entropy": 1.2, "loss": 0.9}
        for s in (1, 2)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = {p.name for p in plot_sft_run(run)}
    assert {"rollout_entropy.png", "train_token_entropy.png", "kept_fraction.png", "eval_rewards.png"} <= drawn
    assert set(xlabels.values()) == {"EI step"}
