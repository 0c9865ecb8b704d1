"""The metrics log and wandb as a run uses them, offline: the run files wandb wrote are read back
(tests/wandb_offline.py) and must hold the run's name, group, settings and every row, on the GRPO and
optimizer-step axes, across --resume; and a diverged run leaves its step in the folder."""

import json
import math
from dataclasses import replace

import pytest
import wandb

from alignment.config.settings import SETTINGS_FILE
from alignment.grpo_run import train_grpo
from alignment.run.divergence import Diverged, read_marker
from alignment.run.metrics_log import AXES, WANDB_FILE, MetricsLog
from tests.test_grpo_loop import TASK, tiny_config
from tests.wandb_offline import read_segments


@pytest.fixture(autouse=True)
def quiet_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    wandb.teardown()  # finish() may return before the offline file is flushed; teardown waits for it


def metrics(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def sent(segment) -> list[dict]:
    """A segment's history rows without wandb's own columns."""
    return [{k: v for k, v in row.items() if not k.startswith("_")} for row in segment.history]


@pytest.mark.slow  # a run, its resume and wandb's offline sync; the diverged run below keeps wandb by default
def test_an_off_policy_run_and_its_resume_are_one_wandb_run_with_every_row(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "grpo_off_policy" / "epochs_2"  # <output root>/<preset>/<arm>, as scripts/sweep.py lays out
    config = tiny_config(
        tiny_model_dir,
        tmp_path,
        output_dir=run_dir,
        n_grpo_steps=1,
        epochs_per_rollout_batch=2,  # two optimizer steps per GRPO step: wandb must keep both rows
        loss_type="grpo_clip",
        wandb_mode="offline",
        wandb_project="tests",
        wandb_group="grpo_off_policy",
    )
    train_grpo(config, TASK, TASK)
    wandb.teardown()
    run_id = json.loads((run_dir / WANDB_FILE).read_text())["id"]
    [first] = read_segments(run_dir, run_id)
    assert (first.id, first.name, first.group, first.project) == (run_id, "epochs_2", "grpo_off_policy", "tests")
    assert first.config == json.loads((run_dir / SETTINGS_FILE).read_text())
    rows = metrics(run_dir)
    assert [(r["grpo_step"], r.get("optimizer_step")) for r in rows] == [(0, None), (1, 1), (1, 2), (1, None)]
    assert sent(first) == rows  # one history row per logged row, none merged or dropped
    assert first.step_metrics["loss"] == "optimizer_step" and first.step_metrics["eval_reward"] == "grpo_step"
    assert set(AXES) <= set(first.step_metrics) and first.exit_code == 0

    train_grpo(replace(config, n_grpo_steps=2), TASK, TASK, resume=True)
    wandb.teardown()
    assert json.loads((run_dir / WANDB_FILE).read_text())["id"] == run_id  # the same wandb run continues
    segments = read_segments(run_dir, run_id)
    assert len(segments) == 2 and segments[0] == first
    resumed = segments[1]
    assert (resumed.id, resumed.name, resumed.group) == (run_id, "epochs_2", "grpo_off_policy")
    assert resumed.config == json.loads((run_dir / SETTINGS_FILE).read_text()) and resumed.config["n_grpo_steps"] == 2
    rows = metrics(run_dir)
    assert [(r["grpo_step"], r.get("optimizer_step")) for r in rows[4:]] == [(2, 3), (2, 4), (2, None)]
    assert sent(resumed) == rows[4:]  # the optimizer-step count goes on where the checkpoint left it
    assert resumed.step_metrics["loss"] == "optimizer_step"


def test_resume_counts_optimizer_steps_from_the_rows_kept(tmp_path):
    """Rows after the checkpoint are dropped; rows written before optimizer_step existed get it."""
    (tmp_path / "metrics.jsonl").write_text(
        "".join(
            json.dumps(row) + "\n"
            for row in [
                {"grpo_step": 0, "eval_reward": 0.1},
                {"grpo_step": 1, "loss": 0.5, "grad_norm": 1.0},
                {"grpo_step": 1, "loss": 0.4, "grad_norm": 1.0},
                {"grpo_step": 2, "loss": 0.3, "grad_norm": 1.0},  # after the step-1 checkpoint
            ]
        )
    )
    log = MetricsLog(tmp_path, {}, None, "disabled", resume_step=1)
    log.log({"grpo_step": 2, "loss": 0.2, "grad_norm": 2.0})
    log.log({"grpo_step": 2, "eval_reward": 0.3})
    log.close()
    rows = metrics(tmp_path)
    assert [(r["grpo_step"], r.get("optimizer_step"), r.get("loss")) for r in rows] == [
        (0, None, None),
        (1, 1, 0.5),
        (1, 2, 0.4),
        (2, 3, 0.2),
        (2, None, None),
    ]


def test_a_diverged_run_leaves_its_step_in_the_folder_and_in_wandb(tiny_model_dir, tmp_path):
    config = tiny_config(
        tiny_model_dir,
        tmp_path,
        n_grpo_steps=3,
        divergence_loss_bound=1e-9,  # any real loss is past it: step 1 diverges
        wandb_mode="offline",
        wandb_project="tests",
    )
    with pytest.raises(Diverged, match=r"GRPO step 1: loss \S+ is past --divergence-loss-bound 1e-09") as err:
        train_grpo(config, TASK, TASK)
    assert err.value.step == 1
    marker = read_marker(config.output_dir)
    assert marker is not None and marker["grpo_step"] == 1 and "divergence-loss-bound" in marker["reason"]
    rows = metrics(config.output_dir)
    assert rows[-1] == {"grpo_step": 1, "diverged": 1} and not any("loss" in r for r in rows)
    wandb.teardown()
    run_id = json.loads((config.output_dir / WANDB_FILE).read_text())["id"]
    [segment] = read_segments(config.output_dir, run_id)
    assert segment.exit_code == 1 and segment.summary["diverged_at_step"] == 1
    assert sent(segment)[-1] == {"grpo_step": 1, "diverged": 1}


def test_nan_and_inf_survive_the_offline_round_trip(tmp_path):
    log = MetricsLog(tmp_path / "run", {"wandb_group": None}, "tests", "offline")
    log.log({"grpo_step": 1, "loss": math.nan, "grad_norm": math.inf})
    log.close()
    wandb.teardown()
    run_id = json.loads((tmp_path / "run" / WANDB_FILE).read_text())["id"]
    [segment] = read_segments(tmp_path / "run", run_id)
    [row] = sent(segment)
    assert math.isnan(row["loss"]) and row["grad_norm"] == math.inf and row["optimizer_step"] == 1
    assert segment.group == ""  # no group outside a sweep
