"""configs/grpo_handout_starter.toml and GRPOConfig's defaults are the CS336 A5 starter hyperparameters, value by value,
and the loop they drive is the handout's: no KL monitors unless asked for (grpo_kl_monitoring asks). The UW presets
run on their handouts' settings: v2's keyword block (for the student's own model; a SmolLM2 stand-in only as an arm
labelled so, at its own rate) and v1's starter block."""

import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

from alignment.experiments.sweep import load_preset
from alignment.grpo.config import GRPOConfig
from alignment.ray.config import RayGRPOConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# The handout's starter block (CS336 A5, "GRPO train loop"): setting -> (value, the handout's line for it)
HANDOUT = {
    "n_grpo_steps": (200, "n_grpo_steps: int = 200"),
    "learning_rate": (1e-5, "learning_rate: float = 1e-5"),
    "advantage_eps": (1e-6, "advantage_eps: float = 1e-6"),
    "rollout_batch_size": (256, "rollout_batch_size: int = 256"),
    "group_size": (8, "group_size: int = 8"),
    "sampling_temperature": (1.0, "sampling_temperature: float = 1.0"),
    "sampling_min_tokens": (
        4,
        "sampling_min_tokens: int = 4 # As in Expert Iteration, disallow empty string responses",
    ),
    "sampling_max_tokens": (1024, "sampling_max_tokens: int = 1024"),
    "epochs_per_rollout_batch": (1, "epochs_per_rollout_batch: int = 1 # On-policy"),
    "train_batch_size": (256, "train_batch_size: int = 256 # On-policy"),
    "gradient_accumulation_steps": (
        128,
        "gradient_accumulation_steps: int = 128 # microbatch size is 2, will fit on H100",
    ),
    "loss_type": ("reinforce_with_baseline", 'loss_type: Literal[...] = "reinforce_with_baseline"'),
    "use_std_normalization": (True, "use_std_normalization: bool = True"),
    "weight_decay": (0.0, "torch.optim.AdamW(..., weight_decay=0.0, betas=(0.9, 0.95))"),
    "adam_beta1": (0.9, "torch.optim.AdamW(..., weight_decay=0.0, betas=(0.9, 0.95))"),
    "adam_beta2": (0.95, "torch.optim.AdamW(..., weight_decay=0.0, betas=(0.9, 0.95))"),
    "max_grad_norm": (1.0, "gradient clipping with clip value 1.0"),
    "cliprange": (0.2, "GRPO-Clip with epsilon 0.2"),
    "model": ("Qwen/Qwen2.5-Math-1.5B", "Qwen 2.5 Math 1.5B Base"),
    "prompt": ("r1_zero", "the r1_zero prompt"),
}


@pytest.mark.parametrize("name", HANDOUT)
def test_starter_file_and_defaults_are_the_handouts(name):
    value, line = HANDOUT[name]
    starter = tomllib.loads((CONFIGS / "grpo_handout_starter.toml").read_text())
    assert starter.get(name, value) == value, (
        f"configs/grpo_handout_starter.toml {name} = {starter[name]!r}; the handout: {line}"
    )
    default = next(f.default for f in fields(GRPOConfig) if f.name == name)
    assert default == value, f"GRPOConfig.{name} defaults to {default!r}; the handout: {line}"


def test_vllm_gets_the_handouts_share_of_a_gpu_of_its_own():
    """gpu_memory_utilization: float = 0.85 is for vLLM on its own GPU, as the handout runs it; on a GPU shared with
    the policy the memory plan sizes it (tests/test_memory_plan.py), so the setting defaults to None."""
    from alignment.run.memory_plan import OWN_GPU_SHARE

    assert OWN_GPU_SHARE == 0.85 and GRPOConfig().gpu_memory_utilization is None


def test_kl_monitors_are_off_except_where_a_preset_asks():
    config = GRPOConfig(**tomllib.loads((CONFIGS / "grpo_handout_starter.toml").read_text()))
    assert not config.kl_reference and not config.kl_prev  # the handout's loop keeps no reference copy
    for run in load_preset(CONFIGS / "experiments" / "grpo_kl_monitoring.toml").runs:
        assert run.settings["kl_reference"] and run.settings["kl_prev"]


# UW CSE599-O A3 v2 §3.1.2's block, and problem 5's "prompts that include a single keyword" and its reward rule
UW_V2 = {
    "n_grpo_steps": 100,
    "learning_rate": 5e-4,
    "group_size": 4,
    "sampling_temperature": 0.8,
    "sampling_max_tokens": 60,
    "sampling_min_tokens": 0,  # the block sets none (CS336's 4 would hold EOS back)
    "advantage_eps": 1e-8,
    "loss_type": "grpo_clip",
    "use_std_normalization": True,
    "keywords_per_prompt": 1,
    "keyword_match": "substring",
    "task": "keywords",
}
STAND_IN_RATE = 3e-5  # SmolLM2's pretrained weights collapse at the handout's 5e-4 (docs/benchmarks/handouts.md)


@pytest.mark.parametrize(
    "path",
    sorted((CONFIGS / "experiments").glob("*/uw_v2*.toml")) + sorted((CONFIGS / "experiments").glob("uw_v2/*")),
    ids=lambda p: p.stem,
)
def test_uw_v2_presets_are_on_the_handouts_settings(path):
    on_cpu = path.parent.name == "cpu"  # CPU twins run fewer steps
    for run in load_preset(path).runs:
        config = RayGRPOConfig(**run.settings)
        expected = UW_V2 | ({"n_grpo_steps": config.n_grpo_steps} if on_cpu else {})
        if config.model == "smollm2-135m":  # a stand-in: an arm labelled as the departure, at its own rate
            assert "smollm2" in run.label and "lr3e-5" in run.label, run.label
            expected = expected | {"learning_rate": STAND_IN_RATE}
        else:
            assert config.model == "outputs/my_lm" and config.backend == "transformer_lm"  # the student's own model
        assert {k: getattr(config, k) for k in expected} == expected, f"{path.name}: {run.label}"
        assert not config.off_policy  # one optimizer step per rollout batch


# What each UW A3 v1 preset varies from the starter block (problems 13 and 14 ask for GRPO-Clip)
UW_V1_VARIED = {
    "p9_learning_rate": {"learning_rate"},
    "p10_baselines": {"loss_type"},
    "p11_length_normalization": set(),
    "p12_group_standard_deviation": {"use_std_normalization"},
    "p13_colocated": {"loss_type"},
    "p14_async": {"loss_type"},
    "p15_kl_divergence": set(),
}
UW_V1_VALIDATION = 1024  # v1: "evaluate on at least 1024 validation examples"


@pytest.mark.parametrize("path", sorted((CONFIGS / "experiments" / "uw_v1").glob("*.toml")), ids=lambda p: p.stem)
def test_uw_v1_presets_are_on_the_handouts_starter_settings_and_one_validation_set(path):
    """UW A3 v1's starter block is CS336 A5's value for value; every v1 preset trains on MATH as v1 lists it
    (competition_math) and validates on 1,024 of its held-out tenth, the questions problem 1's baseline evaluates."""
    varied = UW_V1_VARIED[path.stem]
    preset = load_preset(path)
    config_cls = RayGRPOConfig if preset.script == "train_grpo_ray" else GRPOConfig
    for run in preset.runs:
        config = config_cls(**run.settings)
        starter = {k: v for k, (v, _) in HANDOUT.items() if k not in varied}
        assert {k: getattr(config, k) for k in starter} == starter, run.label
        assert (config.dataset, config.validation_dataset) == ("competition_math", None), run.label
        assert config.n_eval_examples == UW_V1_VALIDATION, run.label
        if preset.script == "train_grpo_ray":
            assert config.loss_type == "grpo_clip", run.label


def test_uw_v1_baseline_evaluates_the_questions_the_grpo_curves_validate_on(hub_mirror):
    """Problem 1's command in the guide (eval_zero_shot.py --dataset competition_math --limit 1024) picks the same
    questions a v1 GRPO run validates on, and none it trains on."""
    from alignment.data.splits import run_data
    from alignment.tasks.building import evaluation_task
    from scripts.eval_zero_shot import EvalConfig

    page = (CONFIGS.parent / "docs" / "guides" / "uw_a3_v1.md").read_text()
    [command] = [line for line in page.splitlines() if line.startswith("uv run") and "eval_zero_shot.py" in line]
    assert f"--dataset competition_math --limit {UW_V1_VALIDATION}" in command, command
    for n in (4, UW_V1_VALIDATION):  # the mirror holds 105 problems: 4 is a true subset of its held-out tenth
        config = EvalConfig(dataset="competition_math", prompt="r1_zero", limit=n)
        task = evaluation_task(config).subset(config.limit)  # what the script samples
        baseline = [row["question"] for row in task.truths]
        data = run_data("competition_math", "train", None, n)
        assert baseline == [e.question for e in data.validation]
        assert not set(baseline) & {e.question for e in data.train}
