"""The CS336 2026 A5 ("Reasoning RL") presets carry the handout's settings, value by value: the suggested
hyperparameters in configs/cs336_2026/grpo_starter.toml, and each experiment's arms in
configs/experiments/cs336_2026/ (every arm loads and passes the training script's checks, as test_sweep.py checks for
every shipped preset). The CPU twin of the on-policy variants differs from the handout's only in size."""

import tomllib
from pathlib import Path

import pytest

from alignment.experiments.sweep import load_preset, swept_setting
from alignment.grpo.config import GRPOConfig, validate

ROOT = Path(__file__).resolve().parents[1]
STARTER = ROOT / "configs" / "cs336_2026" / "grpo_starter.toml"
PRESETS = ROOT / "configs" / "experiments" / "cs336_2026"
# The handout's suggested hyperparameters (section 4.3) and section 3.4's sampling: setting -> (value, its line)
HANDOUT = {
    "n_grpo_steps": (200, "num_rollout_steps = 200"),
    "learning_rate": (1e-5, "learning_rate = 1e-5"),
    "rollout_batch_size": (256, "rollout_batch_size = train_batch_size = 256"),
    "train_batch_size": (256, "rollout_batch_size = train_batch_size = 256"),
    "group_size": (8, "group_size = 8"),
    "gradient_accumulation_steps": (32, "gradient_accumulation_steps = 32"),
    "sampling_temperature": (1.0, "sampling_temperature = 1.0"),
    "sampling_top_p": (1.0, "temperature 1.0, top-p 1.0, max generation length 512"),
    "sampling_max_tokens": (512, "sampling_max_tokens = 512"),
    "max_grad_norm": (1.0, "max_grad_norm = 1.0"),
    "adam_beta1": (0.9, "AdamW(..., betas=(0.9, 0.95), weight_decay=0.0)"),
    "adam_beta2": (0.95, "AdamW(..., betas=(0.9, 0.95), weight_decay=0.0)"),
    "weight_decay": (0.0, "AdamW(..., betas=(0.9, 0.95), weight_decay=0.0)"),
    "eval_every": (10, "evaluate on the validation set once every 10 rollout batches"),
    "n_eval_examples": (1024, "evaluate on at least 1024 validation examples"),
    "log_train_rollouts_every": (40, "log the training rollouts ... every 40 rollout batches"),
    "epochs_per_rollout_batch": (1, "on-policy: 1 training step per inference batch"),
    "advantage_eps": (1e-6, "advantage_eps: float = 1e-6"),
    "baseline": ("mean", 'standard GRPO: baseline = "mean"'),
    "advantage_normalizer": ("std", 'advantage_normalizer = "std"'),
    "loss_type": ("reinforce_with_baseline", 'importance_reweighting_method = "none"'),
    "loss_aggregation": ("sequence_mean", 'loss_normalization = "sequence"'),
    "model": ("allenai/OLMo-2-0425-1B", "OLMo-2-0425-1B"),
    "dataset": ("gsm8k", "GSM8K"),
    "n_train_examples": (6400, "n_train_examples = 6400"),
    "prompt": ("r1_zero", "use the zero-shot r1_zero prompt"),
}


def starter() -> dict:
    return tomllib.loads(STARTER.read_text())


@pytest.mark.parametrize("name", HANDOUT)
def test_the_starter_file_is_the_handouts(name):
    """Each value as the run gets it: the file's, or the setting's default (baseline and normalizer: GRPO's)."""
    value, line = HANDOUT[name]
    config = GRPOConfig(**starter())
    got = config.normalizer if name == "advantage_normalizer" else getattr(config, name)
    assert got == value, f"{STARTER.name}: {name} is {got!r}; the handout: {line}"


def test_the_starter_runs_alone_and_is_on_policy():
    config = GRPOConfig(**starter())
    validate(config)
    assert not config.off_policy and config.micro_train_batch_size == 8  # 256 rollouts in 32 microbatches
    assert config.n_prompts_per_rollout_batch == 32


def preset(name: str):
    return load_preset(PRESETS / f"{name}.toml")


def arms(name: str) -> dict[str, dict]:
    return {run.arm: run.settings for run in preset(name).runs}


def test_every_preset_keeps_the_starter_outside_what_its_experiment_changes():
    changes = {
        "on_policy": set(),
        "learning_rate": {"learning_rate"},
        "prompt_ablation": {"prompt"},
        "variants_on_policy": {"loss_aggregation", "normalize_constant", "baseline", "advantage_normalizer"},
        "off_policy": {"train_batch_size", "gradient_accumulation_steps", "loss_type", "cliprange"},
        "try_your_own": {"advantage_estimator", "loss_aggregation", "normalize_constant"},
    }
    base = starter()
    for name, changed in changes.items():
        for run in preset(name).runs:
            kept = {k: v for k, v in run.settings.items() if k not in changed | {"seed"}}
            assert kept == {k: v for k, v in base.items() if k not in changed | {"output_dir"}}, (name, run.label)


def test_four_seeds_where_the_handout_asks_for_them():
    for name in ("on_policy", "variants_on_policy", "off_policy", "prompt_ablation"):
        for arm in preset(name).arms:
            assert sorted(r.seed for r in preset(name).runs if r.arm == arm) == [0, 1, 2, 3], (name, arm)


def test_learning_rates_bracket_the_default_and_plot_against_the_final_reward():
    rates = sorted({s["learning_rate"] for s in arms("learning_rate").values()})
    assert min(rates) < 1e-5 < max(rates) and 1e-5 in rates
    assert swept_setting(preset("learning_rate")) == "learning_rate"


def test_prompt_ablation_runs_the_other_two_prompts():
    prompts = {arm: s["prompt"] for arm, s in arms("prompt_ablation").items()}
    # the course repository's question_only file asks for a boxed answer: question_only_boxed here
    assert prompts == {"question_only": "question_only_boxed", "r1_zero_three_shot_gsm8k": "r1_zero_three_shot_gsm8k"}


def test_the_on_policy_variants_are_section_5_4s_with_z_b_g_512():
    expected = {  # baseline, advantage_normalizer (section 5.4); all with loss_normalization = "constant"
        "GRPO_constant": ("mean", "std"),
        "Dr_GRPO": ("mean", "none"),
        "RFT": ("none", "none"),
        "MaxRL": ("mean", "mean"),
    }
    got = arms("variants_on_policy")
    assert {arm: (s["baseline"], s["advantage_normalizer"]) for arm, s in got.items()} == expected
    for settings in got.values():
        config = GRPOConfig(**settings)
        assert config.loss_aggregation == "constant" and not config.off_policy
        # constant aggregation: each response's token sum / normalize_constant, then the mean over the train batch
        assert config.train_batch_size * config.normalize_constant == 256 * 8 * 512 // 8 == 131072  # Z = B x G x 512
        assert config.skip_zero_advantage  # RFT's wrong answers (and uniform groups) skip the backward


def test_off_policy_takes_32_steps_per_rollout_batch_with_the_papers_clip_ranges():
    got = arms("off_policy")
    for settings in got.values():
        config = GRPOConfig(**settings)
        assert (config.rollout_batch_size, config.train_batch_size, config.gradient_accumulation_steps) == (256, 8, 1)
        assert config.rollout_batch_size // config.train_batch_size == 32 and config.off_policy
    loss = {arm: (s["loss_type"], s.get("cliprange")) for arm, s in got.items()}
    assert loss == {
        "offpolicy_naive": ("reinforce_with_baseline", None),
        "offpolicy_noclip": ("grpo_no_clip", None),
        "offpolicy_clip": ("grpo_clip", 0.2),
        "offpolicy_gspo": ("gspo", 3e-4),
    }


@pytest.mark.parametrize(
    "name,prompt",
    [("question_only", "question_only_boxed"), ("r1_zero", "r1_zero"), ("r1_zero_three_shot_gsm8k",) * 2],
)
def test_prompting_baselines_sample_as_the_handout_says(name, prompt):
    from alignment.prompts import stop_strings

    config = tomllib.loads((ROOT / "configs" / "cs336_2026" / f"prompting_{name}.toml").read_text())
    assert (config["model"], config["prompt"], config["temperature"], config["top_p"], config["max_tokens"]) == (
        "allenai/OLMo-2-0425-1B",
        prompt,
        1.0,
        1.0,
        512,
    )
    assert "stop" not in config  # the prompt's own: </answer> for the r1_zero prompts, none for question_only
    assert stop_strings(prompt) == (() if name == "question_only" else ("</answer>",))
