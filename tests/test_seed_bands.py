"""Seeds as an axis of a sweep: --seeds runs every arm once per seed (one after another, or as Ray tasks side by
side), plots show each arm's mean with a 95% band (mean +- 1.96 s / sqrt(n)) and each seed faint beneath, tables give
the mean, std, min and max over the seeds. Expected numbers are computed here independently (numpy, by hand)."""

import json
import math
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from typer.testing import CliRunner

from alignment.experiments.plotting import BAND_TITLE, draw_seed_bands, final_value_figure, plot_runs
from alignment.experiments.seeds import arm_of, per_step, seed_band, spread
from alignment.experiments.sweep import (
    final_by_setting,
    load_preset,
    parse_seeds,
    results_table,
    swept_setting,
)
from scripts import sweep as script


def test_spread_is_the_sample_statistics_and_its_95_percent_band():
    values = [0.25, 0.5, 0.75, 1.0]
    s = spread(values)
    std = float(np.std(values, ddof=1))
    assert s.n == 4 and s.mean == pytest.approx(0.625) and s.std == pytest.approx(std)
    assert std == pytest.approx(math.sqrt(0.3125 / 3))  # squared deviations 0.140625 + 0.015625 + 0.015625 + 0.140625
    assert s.half_width == pytest.approx(1.96 * std / 2) == pytest.approx(0.316294, abs=1e-6)
    assert (s.low, s.high) == pytest.approx((0.625 - 0.316294, 0.625 + 0.316294), abs=1e-6)
    assert (s.min, s.max) == (0.25, 1.0)
    one = spread([0.4])
    assert math.isnan(one.std) and one.half_width == 0 and one.low == one.high == 0.4
    with pytest.raises(ValueError, match="no values"):
        spread([])


def test_band_aligns_seeds_by_step_averages_a_steps_rows_and_counts_the_seeds_at_each_step():
    a = [
        {"grpo_step": 0, "eval_reward": 0.1},
        {"grpo_step": 1, "eval_reward": 0.3},
        {"grpo_step": 2, "eval_reward": 0.5},
    ]
    b = [
        {"grpo_step": 0, "eval_reward": 0.2},
        {"grpo_step": 1, "eval_reward": 0.6},
        {"grpo_step": 2, "eval_reward": 0.4},
    ]
    c = [
        {"grpo_step": 0, "eval_reward": 0.3},
        {"grpo_step": 1, "eval_reward": 0.2},
        {"grpo_step": 1, "eval_reward": 0.4},
    ]
    band = seed_band([a, b, c], "eval_reward")  # c: two rows at step 1 (mean 0.3), no step 2 (stopped early)
    assert band.xs == [0, 1, 2] and [s.n for s in band.spreads] == [3, 3, 2]
    for spread_at, values in zip(band.spreads, ([0.1, 0.2, 0.3], [0.3, 0.6, 0.3], [0.5, 0.4])):
        mean, std = np.mean(values), np.std(values, ddof=1)
        half = 1.96 * std / np.sqrt(len(values))
        assert (spread_at.mean, spread_at.low, spread_at.high) == pytest.approx((mean, mean - half, mean + half))
    timed = [[{"grpo_step": 1, "eval_reward": 0.5, "time_elapsed_s": t}] for t in (10.0, 14.0)]
    assert seed_band(timed, "eval_reward", "time_elapsed_s").xs == [12.0]  # the step at the seeds' mean wall time
    assert per_step([{"grpo_step": 1, "loss": 1.0}, {"grpo_step": 1, "loss": 3.0}], "loss") == {1: (1, 2.0)}
    assert arm_of("dr_grpo_seed3") == "dr_grpo" and arm_of("lr_1e-5_seed-1") == "lr_1e-5" and arm_of("rft") == "rft"


def test_the_band_drawn_is_the_mean_plus_minus_its_half_width_with_each_seed_faint():
    seeds = [
        [{"grpo_step": s, "eval_reward": r} for s, r in enumerate(rewards)] for rewards in ([0.1, 0.5], [0.3, 0.9])
    ]
    fig, ax = plt.subplots()
    assert draw_seed_bands(ax, {"grpo": seeds}, ["eval_reward"])
    faint, mean = ax.lines[:2], ax.lines[2]
    assert [line.get_alpha() for line in faint] == [0.3, 0.3] and list(faint[1].get_ydata()) == [0.3, 0.9]
    assert list(mean.get_ydata()) == pytest.approx([0.2, 0.7]) and mean.get_label() == "grpo (n=2)"
    half = [1.96 * np.std(v, ddof=1) / np.sqrt(2) for v in ([0.1, 0.3], [0.5, 0.9])]
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(0.2 - half[0]) and max(ys) == pytest.approx(0.7 + half[1])
    plt.close(fig)


def write_rows(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True)
    path = folder / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_runs_labelled_by_seed_are_plotted_as_bands(tmp_path, monkeypatch):
    from alignment.experiments import plotting

    titles: dict[str, str] = {}
    save = plotting.save_png
    monkeypatch.setattr(
        plotting, "save_png", lambda fig, path: (titles.update({path.name: fig.axes[0].get_title()}), save(fig, path))
    )
    paths = [
        write_rows(
            tmp_path / f"{arm}_seed{seed}",
            [
                {"grpo_step": s, "eval_reward": 0.1 * s + 0.05 * seed, "grad_norm": 1.0, "time_elapsed_s": 5.0 * s}
                for s in range(3)
            ],
        )
        for arm in ("grpo", "rft")
        for seed in range(2)
    ]
    written = {p.name for p in plot_runs(paths, [], tmp_path / "plots", phases=False)}
    assert {"eval_reward_vs_step.png", "eval_reward_vs_time.png", "grad_norm.png"} <= written
    assert titles["eval_reward_vs_step.png"] == titles["grad_norm.png"] == BAND_TITLE
    plot_runs(paths[:1] + paths[2:3], [], tmp_path / "single", phases=False)  # one seed per arm: plain lines
    assert titles["eval_reward_vs_step.png"] == ""


def test_seeds_flag_replaces_the_presets_seeds_and_bad_seeds_are_named(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("seeds = [7]\n[shared]\nn_grpo_steps = 2\n[arms.a]\n[arms.b]\n")
    assert [r.label for r in load_preset(path).runs] == ["a_seed7", "b_seed7"]
    preset = load_preset(path, seeds=parse_seeds("0, 1,2,3"))
    assert [(r.arm, r.seed, r.settings["seed"]) for r in preset.runs] == [(a, s, s) for a in "ab" for s in range(4)]
    for bad in ("", "0,x", "1,1"):
        with pytest.raises(ValueError, match="--seeds"):
            parse_seeds(bad)
    result = CliRunner().invoke(script.app, [str(path), "--seeds", "0,zero"])
    assert result.exit_code != 0 and "expected comma-separated integers" in result.output


def test_seed_summary_gives_mean_std_min_max_band_and_wall_time(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("seeds = [0, 1, 2, 3]\n[shared]\nn_grpo_steps = 2\n[arms.a]\n[arms.b]\n")
    preset = load_preset(path)
    finals = {"a": [0.25, 0.5, 0.75, 1.0], "b": [0.5, 0.5, 0.5, 0.5]}
    for run in preset.runs:
        final = finals[run.arm][run.seed]
        write_rows(tmp_path / run.label, [{"grpo_step": 2, "eval_reward": final, "time_elapsed_s": 10.0 + run.seed}])
    table = results_table(preset, tmp_path)
    half = 1.96 * np.std(finals["a"], ddof=1) / 2
    assert (
        f"| a | 4 | 0.625 | {np.std(finals['a'], ddof=1):.3f} | 0.250 | 1.000 | {0.625 - half:.3f} to "
        f"{0.625 + half:.3f} | 12 | 0 |" in table
    )
    assert "| b | 4 | 0.500 | 0.000 | 0.500 | 0.500 | 0.500 to 0.500 | 12 | 0 |" in table


def test_a_learning_rate_sweep_plots_final_reward_against_the_rate(tmp_path):
    path = tmp_path / "lr.toml"
    path.write_text(
        "seeds = [0, 1]\n[shared]\nn_grpo_steps = 2\n[arms.lr_3e-6]\nlearning_rate = 3e-6\n"
        "[arms.lr_1e-5]\nlearning_rate = 1e-5\n[arms.lr_3e-5]\nlearning_rate = 3e-5\n"
    )
    preset = load_preset(path)
    assert swept_setting(preset) == "learning_rate"
    for run in preset.runs:
        rows = [{"grpo_step": 2, "eval_reward": run.settings["learning_rate"] * 1e4 + 0.1 * run.seed}]
        if run.label == "lr_3e-5_seed1":
            (tmp_path / run.label).mkdir()
            (tmp_path / run.label / "diverged.json").write_text(json.dumps({"grpo_step": 1, "reason": "nan"}))
            continue
        write_rows(tmp_path / run.label, rows)
    points, failed = final_by_setting(preset, tmp_path, "learning_rate")
    assert points == {
        3e-6: pytest.approx([0.03, 0.13]),
        1e-5: pytest.approx([0.1, 0.2]),
        3e-5: pytest.approx([0.3]),
    }
    assert failed == {3e-5: 1}
    assert final_value_figure(points, "learning rate", "final validation reward", tmp_path / "lr.png", failed)
    assert (tmp_path / "lr.png").stat().st_size > 5000
    record = {"preset": str(path), "script": "train_grpo", "set": {}, "arms": None, "from_best": None}
    written = {p.name for p in script.compare(preset, tmp_path, preset.runs, record)}
    assert {"final_reward_vs_learning_rate.png", "eval_reward_vs_step.png", "results.md"} <= written
    two_settings = tmp_path / "two.toml"
    two_settings.write_text(
        "[shared]\nn_grpo_steps = 2\n[arms.a]\nlearning_rate = 1e-5\n[arms.b]\nlearning_rate = "
        '2e-5\nloss_type = "no_baseline"\n'
    )
    assert swept_setting(load_preset(two_settings)) is None


CHILD = """
import json, os, sys, time
run = sys.argv[1]
os.makedirs(run, exist_ok=True)
start = time.time()
time.sleep(3)
row = {"grpo_step": 1, "eval_reward": float(sys.argv[2]), "time_elapsed_s": 1.0, "start": start, "end": time.time(),
       "parent": os.getppid()}
open(os.path.join(run, "metrics.jsonl"), "w").write(json.dumps(row) + "\\n")
"""


@pytest.mark.slow  # 20-120 s: a Ray task per seed starts; the resources each holds are checked by default below
def test_seeds_run_side_by_side_as_ray_tasks(cluster, tmp_path, monkeypatch):
    """--launcher ray on a cluster without GPUs: each run a Ray task holding one CPU, so the 2-CPU test cluster runs
    both seeds at once. The runs' command is a stand-in that logs a validation (the real script's runs go through the
    same launch; test_sweep.py runs it end to end)."""
    import os

    path = tmp_path / "p.toml"
    path.write_text("[shared]\nn_grpo_steps = 1\n[arms.a]\n")
    rewards = {"a_seed0": 0.25, "a_seed1": 0.75}
    monkeypatch.setattr(
        script,
        "run_command",
        lambda name, config, run_dir, resume: [sys.executable, "-c", CHILD, str(run_dir), str(rewards[run_dir.name])],
    )
    result = CliRunner().invoke(
        script.app, [str(path), "--seeds", "0,1", "--launcher", "ray", "--output-root", str(tmp_path / "out")]
    )
    root = tmp_path / "out" / "p"
    assert result.exit_code == 0, result.output
    rows = {label: json.loads((root / label / "metrics.jsonl").read_text()) for label in rewards}
    assert all(row["parent"] != os.getpid() for row in rows.values())  # launched by a Ray worker, not this process
    (first, second) = sorted(rows.values(), key=lambda r: r["start"])
    assert second["start"] < first["end"]  # side by side
    assert cluster.is_initialized()  # the connection this process had is left open
    results = (root / "results.md").read_text()
    assert "Seeds (--seeds): 0, 1." in results and "| a | 2 | 0.500 |" in results
    assert (root / "plots" / "eval_reward_vs_step.png").is_file()


def test_ray_tasks_hold_gpus_or_cpus_and_a_run_too_big_for_the_cluster_is_refused():
    import typer

    assert script.task_resources({"a_seed0": 1, "a_seed1": 1}, 0, 2) == {
        "a_seed0": {"num_gpus": 0, "num_cpus": 2},
        "a_seed1": {"num_gpus": 0, "num_cpus": 2},
    }  # a cluster without GPUs: CPUs per run
    assert script.task_resources({"a_seed0": 2}, 8, 1) == {"a_seed0": {"num_gpus": 2, "num_cpus": 1}}
    with pytest.raises(typer.BadParameter, match=r"has 1 GPUs, fewer than these runs need: a_seed0 \(2\)"):
        script.task_resources({"a_seed0": 2}, 1, 1)
