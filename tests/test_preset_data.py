"""Every settings file in configs/ and every preset in configs/experiments/ loads its data, offline, through the code
path a real run takes: short names resolve to local copies of the hub repos, paths as the repo's own files lay them."""

import os
import tomllib
from pathlib import Path

import pytest

from alignment.data.splits import run_data
from alignment.envs.loading import environment_tasks
from alignment.experiments.sweep import load_preset
from alignment.grpo.config import GRPOConfig
from alignment.prompts import load_prompt
from alignment.ray.config import RayGRPOConfig
from alignment.sft_run import load_training_examples, sft_validation
from alignment.supervised.config import EIConfig, SFTConfig
from alignment.tasks.building import run_tasks
from tests.hub_copies import write_course_math

REPO = Path(__file__).resolve().parents[1]
SETTINGS_FILES = {  # configs/*.toml -> the script that takes it
    "grpo_handout_starter": "train_grpo",
    "cs336_leaderboard": "train_grpo",
    "keyword_demo": "train_grpo",
    "keyword_transformer_lm": "train_grpo",
    "keyword_uw_handout": "train_grpo",
    "grpo_gsm8k_cpu": "train_grpo",
    "arithmetic_laptop": "train_grpo",
    "sft_gsm8k_demo": "train_sft",
    "ei_gsm8k_demo": "expert_iteration",
    "keyword_async": "train_grpo_ray",
    "calculator_cpu": "train_grpo",
    "calculator_gsm8k": "train_grpo",
}
CONFIGS = {
    "train_grpo": GRPOConfig,
    "train_sft": SFTConfig,
    "expert_iteration": EIConfig,
    "train_grpo_ray": RayGRPOConfig,
}


def runs() -> list[tuple[str, str, dict]]:
    """(name, script, settings) of every settings file and every arm of every preset."""
    found = []
    for path in sorted((REPO / "configs").glob("*.toml")):
        assert path.stem in SETTINGS_FILES, f"{path.name}: add it to SETTINGS_FILES with the script that takes it"
        found.append((path.stem, SETTINGS_FILES[path.stem], tomllib.loads(path.read_text())))
    for path in sorted((REPO / "configs" / "experiments").rglob("*.toml")):
        preset = load_preset(path)
        found += [(f"{preset.name}/{run.label}", preset.script, run.settings) for run in preset.runs]
    return found


def load_data(script: str, settings: dict) -> int:
    """Load a run's training and validation data as its script would; returns the number of training items."""
    config = CONFIGS[script](**settings)
    if script in ("train_grpo", "train_grpo_ray"):  # the Ray driver loads a run's data as train_grpo does
        if config.env is not None:  # an environment's tasks
            return len(environment_tasks(config.env, config)[0].questions)
        if config.task == "keywords":
            return len(run_tasks(config)[0].questions)
        return len(
            run_data(
                config.dataset,
                config.dataset_split,
                config.validation_dataset,
                config.n_eval_examples,
                config.allow_validation_overlap,
            ).train
        )
    if script == "train_sft":
        examples, _ = load_training_examples(config)
        assert sft_validation(config, examples).questions
        return len(examples)
    return len(
        run_data(
            config.dataset,
            config.dataset_split,
            config.validation_dataset,
            config.n_eval_examples,
            config.allow_validation_overlap,
        ).train
    )


def link_repo_data(root: Path) -> Path:
    """root/data/ holding (as links) what the repository's data/ ships, so that the presets' relative paths resolve
    from root as from the repo's own folder; returns root/data."""
    data = root / "data"
    data.mkdir(parents=True)
    for item in (REPO / "data").iterdir():
        (data / item.name).symlink_to(item)
    return data


@pytest.fixture
def repo_layout(tmp_path, monkeypatch) -> Path:
    """A working folder where the presets' relative paths resolve as from the repo root: data/ as shipped (with the
    course's MATH/ folder that sft_dataset_size points at) and nothing beside it."""
    root = tmp_path / "repo"
    write_course_math(link_repo_data(root) / "MATH", load_prompt("r1_zero"))
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("name,script,settings", runs(), ids=[name for name, _, _ in runs()])
def test_every_preset_loads_its_data(hub_mirror, repo_layout, name, script, settings):
    assert load_data(script, settings) > 0
    assert os.getcwd() == str(repo_layout)
