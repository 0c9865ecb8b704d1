"""Experiment presets and scripts/sweep.py: every shipped preset loads, bad presets fail naming what is wrong,
and a tiny preset runs end to end through the real training script, restarting, skipping and resuming runs."""

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.experiments.sweep import (
    best_arm,
    folder_before_course_folders,
    load_preset,
    parse_overrides,
    preset_folder,
    results_table,
    run_state,
    toml_value,
    write_run_config,
    write_sweep_record,
)
from alignment.run.checkpoint import MARKER, STATE
from alignment.run.divergence import Diverged, write_marker
from alignment.utils.console import QUIET_ENV, VERBOSE_ENV
from scripts import sweep as script
from tests.test_console import LIBRARY_LINE

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "configs" / "experiments").rglob("*.toml"))
SWEEP_PRESETS = PRESETS + sorted((ROOT / "configs" / "pku").glob("grpo_*.toml"))
BASELINES_CPU = ROOT / "configs" / "experiments" / "cpu" / "grpo_baselines_cpu.toml"


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_every_shipped_preset_loads_and_validates(path):
    preset = load_preset(path)
    assert preset.runs and preset.script in ("train_grpo", "train_grpo_ray", "train_sft", "expert_iteration")
    assert len({run.label for run in preset.runs}) == len(preset.runs)
    for run in preset.runs:
        assert preset.script == "train_sft" or preset.total_steps(run) >= 1


def test_handout_presets_differ_only_in_their_arms():
    preset = load_preset(ROOT / "configs" / "experiments" / "grpo_baselines.toml")
    starter = tomllib.loads((ROOT / "configs" / "grpo_handout_starter.toml").read_text())
    del starter["output_dir"]  # the starter's own run folder; the sweep gives each run its own
    no_baseline, baseline = preset.runs
    assert no_baseline.settings == starter | {"loss_type": "no_baseline"}
    assert baseline.settings == starter | {"loss_type": "reinforce_with_baseline"}
    sweep = load_preset(ROOT / "configs" / "experiments" / "grpo_off_policy_sweep.toml")
    grid = {(r.settings["epochs_per_rollout_batch"], r.settings["train_batch_size"]) for r in sweep.runs}
    assert grid == {(e, b) for e in (1, 2, 4) for b in (256, 128, 64)}
    assert all(r.settings["rollout_batch_size"] == 256 and r.settings["n_grpo_steps"] < 50 for r in sweep.runs)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text,message",
    [
        ("[shared]\nn_grpo_steps = 2\n", "needs at least one [arms.<name>] table"),
        ("colour = 1\n[arms.a]\nn_grpo_steps = 2\n", "unknown top-level keys colour"),
        ("[arms.a]\nn_grpo_steps = 2\nlearning_rat = 1.0\n", "arm 'a': unknown settings learning_rat"),
        (
            "[arms.a]\nn_grpo_steps = 2\nrollout_batch_size = 10\ngroup_size = 4\n",
            "arm 'a': --rollout-batch-size (10) must be divisible by --group-size (4)",
        ),
        ("[arms.a]\nlearning_rate = 1.0\n", "arm 'a': n_grpo_steps is not set"),
        ("seeds = []\n[arms.a]\nn_grpo_steps = 2\n", "seeds must be a non-empty list of integers"),
        ('script = "train_nothing"\n[arms.a]\nn_grpo_steps = 2\n', "no scripts/train_nothing.py"),
        ('base = "missing.toml"\n[arms.a]\nn_grpo_steps = 2\n', "no such base settings file"),
        ("placeholder = 2\n[arms.a]\nn_grpo_steps = 2\n", "placeholder must be a table of settings"),
        ("[arms.a\n", "not valid TOML"),
    ],
)
def test_bad_presets_name_the_problem(tmp_path, text, message):
    path = write(tmp_path / "bad.toml", text)
    with pytest.raises(ValueError, match="bad.toml") as err:
        load_preset(path)
    assert message in str(err.value)


def test_seeds_and_base_expand_into_labelled_runs(tmp_path):
    write(tmp_path / "base.toml", "n_grpo_steps = 3\nlearning_rate = 1e-4\n")
    path = write(
        tmp_path / "p.toml",
        'base = "base.toml"\nseeds = [3, 4]\n[shared]\nlearning_rate = 2e-4\n'
        '[arms.x]\nloss_type = "no_baseline"\n[arms.y]\nn_grpo_steps = 5\n',
    )
    preset = load_preset(path)
    assert [(r.label, r.arm, r.seed) for r in preset.runs] == [
        ("x_seed3", "x", 3),
        ("x_seed4", "x", 4),
        ("y_seed3", "y", 3),
        ("y_seed4", "y", 4),
    ]
    assert preset.runs[0].settings == {"n_grpo_steps": 3, "learning_rate": 2e-4, "loss_type": "no_baseline", "seed": 3}
    assert [preset.total_steps(r) for r in preset.runs] == [3, 3, 5, 5]


def test_presets_of_the_same_name_for_different_handouts_keep_their_runs_apart(tmp_path, monkeypatch):
    folders = {path: preset_folder(path) for path in SWEEP_PRESETS}
    experiments, pku = ROOT / "configs" / "experiments", ROOT / "configs" / "pku"
    assert folders[experiments / "grpo_baselines.toml"] == Path("grpo_baselines")  # CS336 A5's, at the top
    assert folders[pku / "grpo_baselines.toml"] == Path("pku/grpo_baselines")
    assert folders[experiments / "uw_v1" / "p13_colocated.toml"] == Path("uw_v1/p13_colocated")
    assert folders[experiments / "cpu" / "grpo_baselines_cpu.toml"] == Path("cpu/grpo_baselines_cpu")
    assert len(set(folders.values())) == len(folders)  # no two shipped presets share a folder
    assert preset_folder(write(tmp_path / "mine.toml", "")) == Path("mine")  # a preset outside configs/
    assert load_preset(pku / "grpo_baselines.toml").folder == Path("pku/grpo_baselines")

    def stop(*args, **kwargs):
        raise SystemExit(3)

    monkeypatch.setattr(script, "prepare", stop)  # after the sweep's record is written, before any run
    result = CliRunner().invoke(script.app, [str(pku / "grpo_baselines.toml"), "--output-root", str(tmp_path / "o")])
    assert result.exit_code == 3, result.output
    record = json.loads((tmp_path / "o" / "pku" / "grpo_baselines" / "sweep.json").read_text())
    assert [run["label"] for run in record["runs"]] == ["no_baseline", "reinforce_with_baseline"]
    assert not (tmp_path / "o" / "grpo_baselines").exists()


def test_runs_of_a_preset_from_before_course_folders_are_not_started_over(tmp_path):
    pku = ROOT / "configs" / "pku" / "grpo_baselines.toml"
    cs336 = ROOT / "configs" / "experiments" / "grpo_baselines.toml"
    before = tmp_path / "o" / "grpo_baselines"  # where PKU's runs went when every preset's folder was its name
    write_sweep_record(before, pku, load_preset(pku), {"set": {}, "arms": None, "from_best": None})
    result = CliRunner().invoke(script.app, [str(pku), "--output-root", str(tmp_path / "o")])
    assert result.exit_code == 2 and f"move it to {tmp_path / 'o' / 'pku' / 'grpo_baselines'}" in result.output
    assert not (tmp_path / "o" / "pku").exists()  # nothing started
    assert folder_before_course_folders(tmp_path / "o", cs336, load_preset(cs336)) is None  # CS336's stay put
    write_sweep_record(before, cs336, load_preset(cs336), {"set": {}, "arms": None, "from_best": None})
    assert folder_before_course_folders(tmp_path / "o", pku, load_preset(pku)) is None  # another preset's runs


def test_placeholder_settings_stand_in_until_from_best_replaces_them(tmp_path):
    """The focused off-policy sweep's second arm: the preset's guess alone, the broad sweep's best arm with
    --from-best; the on-policy reference arm is the same either way."""
    focused = ROOT / "configs" / "experiments" / "grpo_off_policy_sweep_focused.toml"
    reference, guess = load_preset(focused).runs
    held = ("epochs_per_rollout_batch", "train_batch_size", "gradient_accumulation_steps")
    assert load_preset(focused).placeholder == held
    assert (guess.settings["epochs_per_rollout_batch"], guess.settings["train_batch_size"]) == (2, 128)
    assert (reference.settings["epochs_per_rollout_batch"], reference.settings["train_batch_size"]) == (1, 256)

    broad_path = ROOT / "configs" / "experiments" / "grpo_off_policy_sweep.toml"
    broad, root = load_preset(broad_path), tmp_path / "grpo_off_policy_sweep"
    for run in broad.runs:  # e4_b64 ends best
        fake_run(root / run.label, [0.1, 0.5 if run.arm == "e4_b64" else 0.3], 40, run.settings)
    write_sweep_record(root, broad_path, broad, {"set": {}, "arms": None, "from_best": None})
    chained = {run.arm: run.settings for run in load_preset(focused, base=best_arm(root)).runs}
    best = chained["best_broad"]
    assert (best["epochs_per_rollout_batch"], best["train_batch_size"], best["gradient_accumulation_steps"]) == (
        4,
        64,
        32,
    )
    assert best["n_grpo_steps"] == 200 and best["loss_type"] == "grpo_clip"  # [shared] still goes over the base
    assert chained["e1_b256"] == reference.settings | {"eval_every": 5}  # the broad sweep validated every 5 steps


def checkpoint_at(run_dir: Path, step: int) -> None:
    (run_dir / "checkpoint").mkdir(parents=True)
    (run_dir / "checkpoint" / STATE).write_text("{}")
    (run_dir / "checkpoint" / MARKER).write_text(str(step))


def test_run_state(tmp_path):
    assert run_state(tmp_path / "never", 4) == "new"
    (tmp_path / "empty").mkdir()
    assert run_state(tmp_path / "empty", 4) == "new"
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "metrics.jsonl").write_text('{"grpo_step": 0, "eval_reward": 0.5}\n')
    assert run_state(tmp_path / "early", 4) == "restart"  # stopped before its first checkpoint
    checkpoint_at(tmp_path / "half", 2)
    assert run_state(tmp_path / "half", 4) == "resume"
    checkpoint_at(tmp_path / "done", 4)
    assert run_state(tmp_path / "done", 4) == "finished"
    (tmp_path / "torn" / "checkpoint").mkdir(parents=True)
    (tmp_path / "torn" / "checkpoint" / STATE).write_text("{}")  # no COMPLETE marker: a torn save
    assert run_state(tmp_path / "torn", 4) == "restart"
    checkpoint_at(tmp_path / "sft", 7)  # a script whose total is no setting: finished once policy/ is written
    assert run_state(tmp_path / "sft", None) == "resume"
    (tmp_path / "sft" / "policy").mkdir()
    assert run_state(tmp_path / "sft", None) == "finished"


def test_run_config_round_trips_through_toml(tmp_path):
    settings = {
        "model": 'a "quoted" \\ path',
        "output_dir": Path("out/x"),
        "learning_rate": 3e-5,
        "seed": 0,
        "kl_prev": False,
        "lora_target_modules": ["q_proj", "v_proj"],
        "normalize_constant": None,
        "cliprange": float("inf"),
    }
    loaded = tomllib.loads(write_run_config(tmp_path / "c" / "run.toml", settings).read_text())
    expected = {k: v for k, v in settings.items() if v is not None} | {"output_dir": "out/x"}
    assert loaded == expected  # None (the script's default) is left out
    with pytest.raises(ValueError, match="cannot write"):
        toml_value({"nested": 1})


def test_results_table_with_seed_summary(tmp_path):
    path = write(tmp_path / "p.toml", "seeds = [0, 1]\n[shared]\nn_grpo_steps = 2\n[arms.a]\n[arms.b]\n")
    preset = load_preset(path)
    for label, rewards in {"a_seed0": [0.25, 0.5], "a_seed1": [0.25, 0.75], "b_seed0": [0.25, 0.125]}.items():
        (tmp_path / label).mkdir()
        rows = [{"grpo_step": 2 * i, "eval_reward": r, "time_elapsed_s": 10.0 * i} for i, r in enumerate(rewards)]
        (tmp_path / label / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = results_table(preset, tmp_path)
    assert "| a_seed0 | a | 0 | stopped before its first checkpoint | 2 | 0.500 | 0.500 | 10 |" in table
    assert "| b_seed0 | b | 0 | stopped before its first checkpoint | 2 | 0.125 | 0.250 | 10 |" in table
    assert "| b_seed1 | b | 1 | not run | - | - | - | - |" in table
    assert "| a | 2 | 0.625 | 0.177 | 0.500 | 0.750 | 0.380 to 0.870 | 10 | 0 |" in table  # std 0.25 / sqrt(2)
    assert "| b | 1 | 0.125 | - | 0.125 | 0.125 | - | 10 | 0 |" in table
    assert table.endswith("left out): none yet.\n")  # no arm has finished


def test_set_overrides_are_typed_like_the_setting_and_go_over_every_arm(tmp_path):
    assert parse_overrides(
        "train_grpo",
        [
            "learning_rate=3e-5",
            "n_grpo_steps=7",
            "kl_prev=true",
            "loss_type=grpo_clip",
            'lora_target_modules=["q_proj", "v_proj"]',
            "normalize_constant=none",
            "model=outputs/sft/policy",
            "cliprange_high=1",  # an int where a float is expected: a float
        ],
    ) == {
        "learning_rate": 3e-5,
        "n_grpo_steps": 7,
        "kl_prev": True,
        "loss_type": "grpo_clip",
        "lora_target_modules": ["q_proj", "v_proj"],
        "normalize_constant": None,
        "model": "outputs/sft/policy",
        "cliprange_high": 1.0,
    }
    assert parse_overrides("train_grpo_ray", ["strategy=colocated-k-batches", "multistep_k=4"]) == {
        "strategy": "colocated-k-batches",
        "multistep_k": 4,
    }
    for item, message in [
        (
            "learning_rat=1e-5",
            "--set learning_rat: not a setting of train_grpo (GRPOConfig); "
            "did you mean learning_rate, warm_start_sft_learning_rate?",
        ),
        ("n_grpo_steps=2.5", "--set n_grpo_steps=2.5: expected an int"),
        ("learning_rate=fast", "--set learning_rate=fast: expected a float"),
        ("kl_prev=maybe", "--set kl_prev=maybe: expected true or false"),
        ("loss_type=clip", "--set loss_type=clip: not one of no_baseline, reinforce_with_baseline, grpo_clip"),
        ("strategy=async", "--set strategy: not a setting of train_grpo (GRPOConfig)"),
        ("n_grpo_steps", "expected KEY=VALUE"),
    ]:
        with pytest.raises(ValueError) as err:
            parse_overrides("train_grpo", [item])
        assert message in str(err.value)
    preset = write(tmp_path / "p.toml", "[shared]\nn_grpo_steps = 2\n[arms.a]\nlearning_rate = 1e-4\n[arms.b]\n")
    runs = load_preset(preset, {"learning_rate": 3e-5, "kl_prev": True}).runs
    assert all(run.settings == {"n_grpo_steps": 2, "learning_rate": 3e-5, "kl_prev": True} for run in runs)
    with pytest.raises(ValueError, match="arm 'a': --learning-rate must be > 0"):
        load_preset(preset, {"learning_rate": -1.0})  # the script's own checks, over the overridden settings


def fake_run(run_dir: Path, finals: list[float], checkpoint: int | None, settings: dict, **ray: float) -> None:
    """A run folder as a training run leaves it: validation rows (and Ray's loop rows), a checkpoint, its config."""
    run_dir.mkdir(parents=True)
    rows = []
    for i, reward in enumerate(finals):
        if i and ray:
            rows.append({"grpo_step": i, "loss": 0.1, "grad_norm": 1.0, "time_elapsed_s": 10.0 * i} | ray)
        rows.append({"grpo_step": i, "eval_reward": reward, "time_elapsed_s": 10.0 * i})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if checkpoint is not None:
        checkpoint_at(run_dir, checkpoint)
    write_run_config(run_dir.parent / "configs" / f"{run_dir.name}.toml", settings | {"output_dir": run_dir})


def test_best_arm_names_its_metric_and_leaves_out_diverged_and_unfinished_arms(tmp_path):
    preset_path = write(
        tmp_path / "lr.toml",
        "seeds = [0, 1]\n[shared]\nn_grpo_steps = 2\n[arms.lr_a]\nlearning_rate = 1e-5\n"
        "[arms.lr_b]\nlearning_rate = 1e-4\n[arms.lr_c]\nlearning_rate = 3e-5\n",
    )
    preset, root = load_preset(preset_path), tmp_path / "out" / "lr"
    finals = {"lr_a": [0.5, 0.7], "lr_b": [0.9, 0.2], "lr_c": [0.8, 0.8]}
    for run in preset.runs:
        reward = finals[run.arm][run.seed]
        fake_run(root / run.label, [0.1, reward], 1 if run.label == "lr_c_seed1" else 2, run.settings)
    write_marker(root / "lr_b_seed1", Diverged("GRPO step 2: loss nan", 2))  # its validation at step 1 stays
    write_sweep_record(root, preset_path, preset, {"set": {}, "arms": None, "from_best": None})
    table = results_table(preset, root)
    assert "| lr_b_seed1 | lr_b | 1 | diverged at step 2 | 1 | 0.200 | 0.200 | 10 |" in table
    assert "| lr_c_seed1 | lr_c | 1 | stopped (resumable) | 1 | 0.800 | 0.800 | 10 |" in table
    assert "| lr_b | 1 | 0.900 | - | 0.900 | 0.900 | - | 10 | 1 |" in table  # diverged: out of the mean, counted
    assert "left out): **lr_a**, 0.600 (mean of 2 seeds)." in table  # lr_b diverged once, lr_c is unfinished

    best = best_arm(root)
    assert (best.arm, best.reward, best.seeds) == ("lr_a", 0.6, 2)
    assert best.settings == {"n_grpo_steps": 2, "learning_rate": 1e-5}  # no run's folder, seed or group
    assert best.describe() == f"best arm lr_a of {root} (final validation reward 0.600, mean of 2 seeds)"
    chained = write(
        tmp_path / "next.toml",
        'base = "missing.toml"\n[shared]\nn_grpo_steps = 3\n[arms.clip]\nloss_type = "grpo_clip"\n',
    )
    [run] = load_preset(chained, base=best).runs  # the best arm's settings stand in for the preset's base
    assert run.settings == {"n_grpo_steps": 3, "learning_rate": 1e-5, "loss_type": "grpo_clip"}
    with pytest.raises(ValueError, match="--from-best .*: no sweep.json there"):
        best_arm(tmp_path)


def test_results_of_ray_runs_give_loop_throughput_and_speed_up(tmp_path):
    preset_path = write(
        tmp_path / "p.toml",
        'script = "train_grpo_ray"\n[shared]\nn_grpo_steps = 2\n[arms.sync]\n'
        '[arms.async]\nstrategy = "disaggregated-one-behind"\n',
    )
    preset = load_preset(preset_path)
    loop = {"time_step_s": 4.0, "device_hours": 0.01, "time_weight_sync_s": 0.5}
    fake_run(tmp_path / "sync", [0.1, 0.2, 0.3], 2, preset.runs[0].settings, samples_per_s=8.0, **loop)
    fake_run(
        tmp_path / "async",
        [0.1, 0.2, 0.3],
        2,
        preset.runs[1].settings,
        samples_per_s=16.0,
        **loop | {"time_step_s": 2.0},
    )
    table = results_table(preset, tmp_path)
    assert "| samples | samples/s (loop) | device-hours | weight sync (s) | speed-up over sync |" in table
    assert "| sync | sync |  | finished | 2 | 0.300 | 0.300 | 20 | 64 | 8.00 | 0.0100 | 0.500 | 1.00x |" in table
    assert "| async | async |  | finished | 2 | 0.300 | 0.300 | 20 | 64 | 16.00 | 0.0100 | 0.500 | 2.00x |" in table


TINY = """
[shared]
model = "{model}"
task = "keywords"
n_train_prompts = 16
n_eval_examples = 4
n_grpo_steps = 1
learning_rate = 1e-3
rollout_batch_size = 4
group_size = 2
train_batch_size = 4
gradient_accumulation_steps = 2
sampling_max_tokens = 6
sampling_min_tokens = 2
eval_every = 1
checkpoint_every = 1
grader_workers = 1
backend = "hf"
kl_reference = false
kl_prev = false

[arms.plain]
loss_type = "reinforce_with_baseline"

[arms.clip]
loss_type = "grpo_clip"
{clip_steps}
"""


def rows_of(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a minute: three training subprocesses and a Ray launcher; the diverged-arm test below runs
# the same sweep machinery in subprocesses in the default suite
def test_tiny_preset_end_to_end_restart_skip_and_resume(tiny_model_dir, tmp_path, monkeypatch):
    """Three training subprocesses: a restarted and a new run, then the one run extended is resumed (on Ray)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a tiny model gains nothing from threads; on a busy CPU they cost
    preset = write(tmp_path / "tiny.toml", TINY.format(model=tiny_model_dir, clip_steps=""))
    root = tmp_path / "out" / "tiny"
    (root / "plain").mkdir(parents=True)
    (root / "plain" / "metrics.jsonl").write_text('{"grpo_step": 0, "eval_reward": 0.5}\n')  # died before a checkpoint
    runner = CliRunner()
    result = runner.invoke(script.app, [str(preset), "--output-root", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output + "".join(p.read_text() for p in (root / "logs").glob("*.log"))
    assert "plain: restart" in result.output and "clip: new" in result.output
    for arm in ("plain", "clip"):
        assert run_state(root / arm, 1) == "finished"
        assert [r["grpo_step"] for r in rows_of(root / arm) if "eval_reward" in r] == [0, 1]
        assert tomllib.loads((root / "configs" / f"{arm}.toml").read_text())["output_dir"] == str(root / arm)
    assert {
        "eval_reward_vs_step.png",
        "eval_reward_vs_time.png",
        "token_entropy.png",
        "grad_norm.png",
        "response_length.png",
        "clip_fraction.png",
    } <= {p.name for p in (root / "plots").iterdir()}
    results = (root / "results.md").read_text()
    assert all(f"| {arm} | {arm} |  | finished | 1 |" in results for arm in ("plain", "clip"))

    plain_before, clip_before = (root / "plain" / "metrics.jsonl").read_bytes(), rows_of(root / "clip")
    write(
        preset, TINY.format(model=tiny_model_dir, clip_steps="").replace("learning_rate = 1e-3", "learning_rate = 2e-3")
    )
    result = runner.invoke(script.app, [str(preset), "--output-root", str(tmp_path / "out")])
    assert result.exit_code != 0 and "run plain finished with other settings (learning_rate)" in result.output
    write(preset, TINY.format(model=tiny_model_dir, clip_steps="n_grpo_steps = 2"))  # the clip run is now unfinished
    result = runner.invoke(
        script.app, [str(preset), "--output-root", str(tmp_path / "out"), "--launcher", "ray", "--gpus-per-arm", "0"]
    )
    assert result.exit_code == 0, result.output + (root / "logs" / "clip.log").read_text()
    assert "plain: finished" in result.output and "clip: resume" in result.output
    assert (root / "plain" / "metrics.jsonl").read_bytes() == plain_before  # skipped, untouched
    clip_after = rows_of(root / "clip")
    assert clip_after[: len(clip_before)] == clip_before  # continued from the step-1 checkpoint, nothing redone
    assert [r["grpo_step"] for r in clip_after[len(clip_before) :]] == [2, 2]  # the step's row and its validation
    assert run_state(root / "clip", 2) == "finished"
    commands = [line for line in (root / "logs" / "clip.log").read_text().splitlines() if line.startswith("$ ")]
    assert len(commands) == 2 and "--resume" not in commands[0] and f"--resume {root / 'clip'}" in commands[1]
    assert "| clip | clip |  | finished | 2 |" in (root / "results.md").read_text()


@pytest.mark.slow  # 22 s: three training subprocesses; run state, results table and best arm are tested by default
def test_a_diverged_arm_is_reported_skipped_and_left_out_of_the_best(tiny_model_dir, tmp_path, monkeypatch):
    """Two training subprocesses: --arms clip with a loss bound every loss is past (it diverges at step 1), then
    --arms plain; the diverged run is skipped on reruns, and --from-best picks plain. (The tiny model earns no
    keyword reward: the overlong penalty under no_baseline gives the diverging run a loss other than 0.)"""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv(VERBOSE_ENV, "0")  # restored afterwards: the sweep sets it for its runs, in this process
    for name in QUIET_ENV:
        monkeypatch.delenv(name, raising=False)
    preset = write(tmp_path / "tiny.toml", TINY.format(model=tiny_model_dir, clip_steps=""))
    out, root, runner = tmp_path / "out", tmp_path / "out" / "tiny", CliRunner()
    diverging = [str(preset), "--output-root", str(out), "--arms", "clip"]
    diverging += ["--set", "loss_type=no_baseline", "--set", "overlong_buffer=3", "--set", "divergence_loss_bound=1e-9"]
    result = runner.invoke(script.app, diverging)
    assert result.exit_code == 0, result.output + (root / "logs" / "clip.log").read_text()  # a result, not a failure
    assert "clip: new" in result.output and "plain" not in result.output.split("wrote")[0]
    assert "diverged runs (results.md says at which step): clip" in result.output
    results = (root / "results.md").read_text()
    assert "| clip | clip |  | diverged at step 1 | 0 |" in results and "| plain | plain |  | not run |" in results
    assert (
        'last command ran): `loss_type = "no_baseline"`, `overlong_buffer = 3`, `divergence_loss_bound = 1e-09`.'
        in results
    )
    assert "Arms the last command ran (--arms): clip." in results
    console = (root / "logs" / "clip.log").read_text()  # train_grpo.py's console: no library lines by default
    assert not LIBRARY_LINE.findall(console) and "step 0: held-out reward" in console, console
    printed = [line for line in console.splitlines() if not line.startswith("$ ")]  # after the sweep's command line
    assert printed[0].startswith("torch threads: 1 (OMP_NUM_THREADS"), console  # the run's first: its threads, why
    assert (root / "plots" / "eval_reward_vs_step.png").is_file()  # its curve up to the divergence is drawn
    assert json.loads((root / "sweep.json").read_text())["set"]["divergence_loss_bound"] == 1e-9

    result = runner.invoke(script.app, diverging)
    assert result.exit_code == 0 and "clip: diverged at step 1, skipped (--diverged resume or restart" in result.output
    result = runner.invoke(script.app, diverging[:-2])  # the bound gone: not the settings it diverged with
    assert result.exit_code != 0 and "run clip diverged with other settings (divergence_loss_bound)" in result.output
    assert "pass --diverged restart" in result.output

    result = runner.invoke(script.app, [str(preset), "--output-root", str(out), "--arms", "plain", "--verbose"])
    assert result.exit_code == 0, result.output + (root / "logs" / "plain.log").read_text()
    assert (
        "Loading weights" in (root / "logs" / "plain.log").read_text()
    )  # --verbose reaches the runs: transformers' bar
    assert "clip" not in result.output.split("wrote")[0]  # the arms not asked for are left alone
    assert "left out): **plain**" in (root / "results.md").read_text()
    # chained: the best arm's settings as the base; for this preset they are plain's own, so plain stays finished
    result = runner.invoke(
        script.app, [str(preset), "--output-root", str(out), "--arms", "plain", "--from-best", str(root)]
    )
    assert result.exit_code == 0, result.output
    assert (
        f"base: best arm plain of {root} (final validation reward" in result.output
        and "plain: finished" in result.output
    )
    assert f"Base (--from-best): best arm plain of {root}" in (root / "results.md").read_text()
    assert tomllib.loads((root / "configs" / "plain.toml").read_text())["wandb_group"] == "tiny"


RAY_TINY = """
script = "train_grpo_ray"
[shared]
model = "{model}"
task = "keywords"
n_train_prompts = 16
n_eval_examples = 2
n_grpo_steps = 2
learning_rate = 1e-3
rollout_batch_size = 4
group_size = 2
train_batch_size = 4
gradient_accumulation_steps = 2
sampling_max_tokens = 6
sampling_min_tokens = 2
eval_every = 2
checkpoint_every = 2
grader_workers = 1
backend = "hf"
loss_type = "grpo_clip"

[arms.variant_a]
strategy = "colocated-sync"

[arms.variant_b_k2]
strategy = "colocated-k-batches"
multistep_k = 2
"""


@pytest.mark.slow  # two GRPO-on-Ray runs, each starting its own Ray cluster: 3.5 minutes on the loaded 2-core VM
def test_a_ray_preset_runs_end_to_end(tiny_model_dir, tmp_path):
    preset = write(tmp_path / "ray_tiny.toml", RAY_TINY.format(model=tiny_model_dir))
    root = tmp_path / "out" / "ray_tiny"
    result = CliRunner().invoke(
        script.app, [str(preset), "--output-root", str(tmp_path / "out"), "--launcher", "local"]
    )
    logs = "".join(p.read_text()[-3000:] for p in (root / "logs").glob("*.log"))
    assert result.exit_code == 0, result.output + logs
    for arm in ("variant_a", "variant_b_k2"):
        assert run_state(root / arm, 2) == "finished"
        assert [r["grpo_step"] for r in rows_of(root / arm) if "loss" in r] == [1, 2]
    results = (root / "results.md").read_text()
    assert "| samples/s (loop) | device-hours | weight sync (s) | speed-up over variant_a |" in results
    assert "| variant_a | variant_a |  | finished | 2 |" in results and " | 8 | " in results  # 2 steps x 4 samples
    assert "1.00x |" in results
    assert {"phase_times_variant_a.png", "phase_times_variant_b_k2.png", "time_breakdown.png"} <= {
        p.name for p in (root / "plots").iterdir()
    }


def test_any_script_and_a_failed_run(tmp_path):
    """A preset may name another script; scripts/plot.py takes no --config, so its run fails, and is reported."""
    preset = write(tmp_path / "p.toml", 'script = "plot"\nsteps_setting = "steps"\n[arms.a]\nsteps = 1\n')
    result = CliRunner().invoke(script.app, [str(preset), "--output-root", str(tmp_path / "out")])
    assert result.exit_code == 1 and "failed runs" in result.output and "a: exit status 2" in result.output
    log = (tmp_path / "out" / "p" / "logs" / "a.log").read_text()
    assert "scripts/plot.py --config" in log and "No such option: --config" in log
    assert "| a | a |  | not run | - |" in (tmp_path / "out" / "p" / "results.md").read_text()


def test_bad_flags_and_preset_are_reported(tmp_path):
    runner = CliRunner()
    for flags, message in [
        (["--set", "learning_rat=1"], "did you mean learning_rate, warm_start_sft_learning_rate?"),
        (["--arms", "no_baseline,nope"], "no arm nope in grpo_baselines_cpu.toml; its arms: no_baseline,"),
        (["--from-best", str(tmp_path)], "no sweep.json there"),
        (["--diverged", "ignore"], "ignore"),
    ]:
        result = runner.invoke(script.app, [str(BASELINES_CPU), *flags])
        assert result.exit_code != 0 and message in result.output, flags
    result = runner.invoke(script.app, [str(tmp_path / "missing.toml")])
    assert result.exit_code != 0 and "no such preset file" in result.output
    result = runner.invoke(script.app, [str(BASELINES_CPU), "--launcher", "slurm"])
    assert result.exit_code != 0 and "slurm" in result.output
    result = runner.invoke(script.app, [str(BASELINES_CPU), "--gpus-per-arm", "-1"])
    assert result.exit_code != 0 and "must be >= 0" in result.output


@pytest.mark.parametrize(
    "backend,build,gpus",
    [
        ("vllm", "cpu", 2),
        ("auto", "cuda", 2),
        ("auto", None, 1),
        ("auto", "cpu", 1),
        ("hf", "cuda", 1),
        ("transformer_lm", "cuda", 1),
    ],
)
def test_a_run_gets_a_rollout_gpu_when_vllm_generates(monkeypatch, backend, build, gpus):
    import alignment.experiments.sweep

    monkeypatch.setattr(
        alignment.experiments.sweep, "vllm_build", lambda: build
    )  # which vLLM wheel a GPU machine has installed
    assert alignment.experiments.sweep.gpus_needed({"backend": backend}) == gpus


def test_sweep_plots_of_sft_runs_are_against_the_sft_step(tmp_path, monkeypatch):
    """scripts/sweep.py's comparison figures label the step axis with the preset's own step, not GRPO's."""
    from alignment.experiments import plotting
    from alignment.supervised.config import SFTConfig
    from scripts.sweep import compare

    seen: dict[str, str] = {}
    save = plotting.save_png

    def recording(fig, path: Path) -> None:  # the x-axis label, read from the figure as it is saved
        seen[path.name] = fig.axes[0].get_xlabel()
        save(fig, path)

    monkeypatch.setattr(plotting, "save_png", recording)
    preset_path = tmp_path / "sft_sizes.toml"
    preset_path.write_text('script = "train_sft"\n[arms.n128]\nn_examples = 128\n[arms.n256]\nn_examples = 256\n')
    preset = load_preset(preset_path)
    root = tmp_path / "out"
    for run in preset.runs:
        folder = root / run.label
        folder.mkdir(parents=True)
        (folder / "settings.json").write_text(json.dumps(SFTConfig(output_dir=folder).to_json()))
        rows = [{"grpo_step": s, "eval_reward": 0.1 * s, "loss": 1.0 / (s + 1), "time_elapsed_s": s} for s in range(3)]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    compare(
        preset,
        root,
        preset.runs,
        {"preset": str(preset_path), "script": "train_sft", "set": {}, "arms": [], "from_best": None},
    )
    assert seen["eval_reward_vs_step.png"] == "SFT step"
