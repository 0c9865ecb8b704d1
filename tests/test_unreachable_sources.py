"""A hub model or dataset that cannot be reached (offline, no network, a mistyped id or path) ends every script and
every preset in one line naming the local remedies (--model PATH, --dataset PATH, ALIGNMENT_DATA_MIRROR), exit
status 2, no traceback, before any model loads; a repo in the hub cache or the mirror still loads offline. A model
folder not written yet is named as a missing local path, the hub never asked (the A1 import's with its command)."""

import importlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import huggingface_hub
import pytest
from typer.testing import CliRunner

from alignment.data.math_datasets import HUB_DATASETS, MIRROR_ENV, load_math_examples
from alignment.experiments.sweep import load_preset
from alignment.models.loading import SMOLLM2, is_local_path, resolve_model
from alignment.utils.hub import SourceUnavailable
from tests.hub_copies import write_course_math
from tests.test_preset_data import SETTINGS_FILES, link_repo_data

REPO = Path(__file__).resolve().parents[1]
REMEDIES = ("--model PATH", "--dataset PATH", "ALIGNMENT_DATA_MIRROR")
SCRIPT_OF = SETTINGS_FILES | {
    "pku/zero_shot": "eval_zero_shot",
    "pku/best_of_n": "best_of_n",
    "pku/grpo": "train_grpo",
    "pku/kissing_grpo": "train_grpo",
    "cs336_2026/grpo_starter": "train_grpo",
    "cs336_2026/prompting_question_only": "eval_zero_shot",
    "cs336_2026/prompting_r1_zero": "eval_zero_shot",
    "cs336_2026/prompting_r1_zero_three_shot_gsm8k": "eval_zero_shot",
}


def assert_one_remedy_line(output: str, names: str) -> None:
    """The whole error is one line naming the source and every local remedy, and nothing printed is a traceback."""
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in output, output[-3000:]
    assert names in errors[0] and all(remedy in errors[0] for remedy in REMEDIES), errors[0]


def assert_one_missing_folder_line(output: str, model: str) -> None:
    """One line naming the folder as a missing local path (the hub never asked) and, for the A1 import's folder, the
    command that writes it."""
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "Traceback" not in output, output[-3000:]
    assert f"model {model!r} cannot be loaded: no such folder (a local path, so the hub was not asked)" in errors[0]
    if model == "outputs/my_lm":
        assert "uv run scripts/import_a1_model.py --weights model.pt" in errors[0]
        assert errors[0].endswith("--output-dir outputs/my_lm`")
    assert "ConnectError" not in output and "ALIGNMENT_DATA_MIRROR" not in errors[0]


@pytest.fixture
def offline(tmp_path, monkeypatch) -> Path:
    """The hub switched off (HF_HUB_OFFLINE=1) with an empty hub cache and no mirror; returns the cache folder."""
    cache = tmp_path / "hub-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    return cache


def names_the_hub(settings: dict) -> bool:
    """Whether a run reads its model or data from the hub (a hub id, a short name the repository ships no copy of)
    or from a local path that does not exist (a mistyped or not yet written model folder)."""
    model = settings.get("model", "Qwen/Qwen2.5-Math-1.5B")
    datasets = [settings.get(k) for k in ("dataset", "validation_dataset") if settings.get("task", "math") == "math"]
    return (model != SMOLLM2 and not Path(model).exists()) or any(map(from_the_hub, datasets))


def from_the_hub(dataset: str | None) -> bool:
    return dataset in HUB_DATASETS and HUB_DATASETS[dataset].shipped is None


def runs() -> list[tuple[str, str, dict]]:
    """(name, script, settings) of every settings file, and of the first arm of every preset, naming the hub."""
    found = []
    for path in sorted((REPO / "configs").rglob("*.toml")):
        name = str(path.relative_to(REPO / "configs").with_suffix(""))
        text = tomllib.loads(path.read_text())
        if "arms" in text:
            preset = load_preset(path)
            found.append((name, preset.script, preset.runs[0].settings))
        else:
            found.append((name, SCRIPT_OF[name], text))
    return [run for run in found if names_the_hub(run[2])]


@pytest.mark.parametrize("name,script,settings", runs(), ids=[name for name, _, _ in runs()])
def test_every_preset_naming_the_hub_ends_in_one_line_offline(offline, tmp_path, monkeypatch, name, script, settings):
    root = tmp_path / "repo"  # the presets' relative paths resolve as from the repo root
    link_repo_data(root)
    monkeypatch.chdir(root)
    if settings.get("dataset") == "data/MATH/sft.jsonl":  # the course's MATH/ folder, copied as the preset says
        write_course_math(root / "data" / "MATH", "{question}")
    # another run's output (PKU's Best-of-N reads the zero-shot run's generations) is checked before the model
    settings = {k: v for k, v in settings.items() if k != "zero_shot_generations"}
    config = tmp_path / "run.json"
    config.write_text(json.dumps(settings | {"output_dir": str(tmp_path / "out")}))
    app = importlib.import_module(f"scripts.{script}").app
    result = CliRunner().invoke(app, ["--config", str(config)])
    assert result.exit_code == 2, result.output[-3000:]
    model = settings.get("model", "")
    if is_local_path(model):  # a model folder not written yet: named, with no hub remedies
        assert_one_missing_folder_line(result.output, model)
    else:
        assert_one_remedy_line(result.output, "cannot be loaded")
        datasets = [settings.get(k) for k in ("dataset", "validation_dataset")]
        named = [model] + [HUB_DATASETS[d].repo for d in datasets if from_the_hub(d)]
        assert any(f"{source!r} cannot be loaded" in result.output for source in named if source), result.output
    assert not (tmp_path / "out" / "metrics.jsonl").exists()  # it stopped before anything ran


@pytest.mark.slow  # a fresh interpreter, 7-9 s; the same stop is checked in-process in the default suite
def test_pku_zero_shot_preset_as_a_student_runs_it_offline(tmp_path):
    """The script itself in a fresh process, HF_HUB_OFFLINE=1 and an empty cache: one line on stderr, exit 2."""
    env = {k: v for k, v in os.environ.items() if k != MIRROR_ENV} | {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    done = subprocess.run(
        [sys.executable, "scripts/eval_zero_shot.py", "--config", "configs/pku/zero_shot.toml"]
        + ["--output-dir", str(tmp_path / "out")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr[-3000:]
    assert len(done.stderr.splitlines()) == 1
    assert_one_remedy_line(done.stderr, "model 'Qwen/Qwen3-0.6B'")  # its data, `gsm8k`, is shipped
    assert not (tmp_path / "out").exists()  # refused before the output folder, before any model


@pytest.mark.slow
@pytest.mark.parametrize(
    "script,flags,names",
    [
        ("train_grpo", ["--config", "configs/pku/grpo.toml", "--dataset", "openai/gsm8k"], "dataset 'openai/gsm8k'"),
        ("train_grpo", ["--config", "configs/pku/grpo.toml", "--dataset", "JSONL"], "model 'Qwen/Qwen3-0.6B'"),
        ("best_of_n", ["--model", "Qwen/Qwen3-0.6B", "--dataset", "JSONL"], "model 'Qwen/Qwen3-0.6B'"),
        ("train_sft", ["--dataset", "JSONL", "--validation-dataset", "HELD"], "model 'Qwen/Qwen2.5-Math-1.5B'"),
        ("expert_iteration", ["--dataset", "JSONL", "--validation-dataset", "HELD"], "model 'Qwen/Qwen2.5-Math"),
        ("train_grpo_ray", ["--config", "configs/keyword_demo.toml", "--model", "nobody/no-such-model"], "nobody/"),
        ("build_keyword_dataset", ["--model", "nobody/no-such-model"], "model 'nobody/no-such-model'"),
    ],
)
def test_each_script_in_a_fresh_process(tmp_path, script, flags, names):
    files = {"JSONL": tmp_path / "gsm8k.jsonl", "HELD": tmp_path / "held_out.jsonl"}
    for n, path in enumerate(files.values()):
        path.write_text(json.dumps({"question": f"What is 2 + {n}?", "answer": f"so\n#### {2 + n}"}) + "\n")
    env = {k: v for k, v in os.environ.items() if k != MIRROR_ENV} | {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
    }
    args = [str(files.get(flag, flag)) for flag in flags] + ["--output-dir", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, f"scripts/{script}.py", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert_one_remedy_line(done.stderr, names)


@pytest.mark.slow
def test_a_missing_model_folder_in_a_fresh_process(tmp_path):
    """eval_zero_shot with a mistyped folder, in a process with the network as it is: no hub request, one line."""
    done = subprocess.run(
        [sys.executable, "scripts/eval_zero_shot.py", "--model", "outputs/no/such/policy", "--dataset", "gsm8k"]
        + ["--output-dir", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert_one_missing_folder_line(done.stderr, "outputs/no/such/policy")
    assert not (tmp_path / "out").exists()


def test_a_cached_or_mirrored_repo_still_loads_offline(offline, hub_mirror_root, tiny_model_dir, monkeypatch):
    with pytest.raises(SourceUnavailable, match="dataset 'openai/gsm8k' cannot be loaded: not a local path, not in"):
        load_math_examples("openai/gsm8k")
    monkeypatch.setenv(MIRROR_ENV, str(hub_mirror_root))
    assert len(load_math_examples("openai/gsm8k")) > 0  # the mirror's copy
    # a model in the hub cache, laid out as huggingface_hub lays it out, is no error: transformers loads it offline
    snapshot = offline / "models--someone--tiny" / "snapshots" / ("0" * 40)
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(tiny_model_dir)
    assert resolve_model("someone/tiny") == "someone/tiny"
    with pytest.raises(SourceUnavailable, match="model 'someone/other' cannot be loaded"):
        resolve_model("someone/other")
    with pytest.raises(SourceUnavailable, match="'outputs/no/such/policy' cannot be loaded: no such folder"):
        resolve_model("outputs/no/such/policy")  # a mistyped path is no hub id: no request is made for it


def test_planning_a_handout_model_needs_no_hub(offline, tmp_path):
    from scripts import train_grpo

    flags = ["--config", str(REPO / "configs" / "pku" / "grpo.toml"), "--output-dir", str(tmp_path / "out")]
    assert CliRunner().invoke(train_grpo.app, [*flags, "--plan-memory", "2x80"]).exit_code == 0  # published shape
    other = CliRunner().invoke(train_grpo.app, [*flags, "--model", "someone/other", "--plan-memory", "2x80"])
    assert other.exit_code == 2
    assert_one_remedy_line(other.output, "model 'someone/other'")


@pytest.mark.parametrize("folder", ["outputs/my_lm", "./outputs/my_lm", "outputs/a1_model", "ABS/outputs/my_lm"])
def test_a_missing_a1_import_folder_names_the_import_and_not_the_hub(folder, tmp_path, monkeypatch):
    """The A1 import's folder before the import ran: the import command, before any model loads and without asking
    the hub (a hub that cannot be reached would answer ConnectError)."""
    import alignment.models.loading as loading

    folder = folder.replace("ABS", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loading, "check_hub_source", lambda *a: pytest.fail(f"asked the hub for {a}"))
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(SourceUnavailable) as raised:
        loading.load_model_and_tokenizer(folder)
    message = str(raised.value)
    assert message.startswith(f"model {folder!r} cannot be loaded: no such folder")
    assert "uv run scripts/import_a1_model.py --weights model.pt" in message and f"--output-dir {folder}`" in message


def test_only_a_name_that_may_be_a_hub_id_is_sent_to_the_hub(tmp_path, monkeypatch):
    import alignment.models.loading as loading

    asked = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loading, "check_hub_source", lambda repo, kind: asked.append(repo))
    loading.check_model_source("Qwen/Qwen3-0.6B")
    assert asked == ["Qwen/Qwen3-0.6B"]
    for path in ("outputs/sft/policy", "runs/a/b", "../elsewhere/model", "~/models/x", "/no/such/model"):
        with pytest.raises(SourceUnavailable, match=f"model '{re.escape(path)}' cannot be loaded: no such folder"):
            loading.check_model_source(path)
        with pytest.raises(SourceUnavailable, match="give --model an existing model folder, a hub id, or smollm2"):
            loading.check_model_source(path)
    (tmp_path / "outputs" / "my_lm").mkdir(parents=True)
    loading.check_model_source("outputs/my_lm")  # there now: loaded as the folder it is
    assert asked == ["Qwen/Qwen3-0.6B"]
