"""Experiment presets and scripts/sweep.py: every shipped preset loads, bad presets fail naming what is wrong,
and a tiny preset runs end to end through the real training script, restarting, skipping and resuming runs."""

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.experiments.sweep import load_preset, results_table, run_state, toml_value, write_run_config
from alignment.run.checkpoint import MARKER, STATE
from scripts import sweep as script

ROOT = Path(__file__).resolve().parents[1]
PRESETS = sorted((ROOT / "configs" / "experiments").rglob("*.toml"))


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
        "stop": ["</answer>", "\n"],
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
    assert "| a | 2 | 0.625 | 0.500 | 0.750 | 0 |" in table and "| b | 1 | 0.125 | 0.125 | 0.125 | 0 |" in table
    assert table.endswith("left out): none yet.\n")  # no arm has finished


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
    result = runner.invoke(script.app, [str(tmp_path / "missing.toml")])
    assert result.exit_code != 0 and "no such preset file" in result.output
    result = runner.invoke(script.app, [str(PRESETS[0]), "--launcher", "slurm"])
    assert result.exit_code != 0 and "slurm" in result.output
    result = runner.invoke(script.app, [str(PRESETS[0]), "--gpus-per-arm", "-1"])
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
