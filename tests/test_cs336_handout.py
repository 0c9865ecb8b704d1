"""CS336 A5 checked line by line where a value is printed in the handout: §8's length-normalization example and the
validation size the handout asks of every comparison."""

from pathlib import Path

import pytest
import torch

from alignment.experiments.sweep import load_preset, script_settings
from alignment.masked import masked_mean, masked_normalize

PRESETS = Path(__file__).resolve().parents[1] / "configs" / "experiments"
CS336_PRESETS = sorted(PRESETS.glob("grpo_*.toml")) + [
    PRESETS / "sft_tuning.toml",
    PRESETS / "sft_dataset_size.toml",
    PRESETS / "expert_iteration.toml",
]


def test_length_normalization_example_prints_what_the_handout_prints():
    """§8's example, with the course repository's keyword normalize_constant (the PDF's snippet says
    constant_normalizer, which the repository's adapters do not take)."""
    ratio = torch.ones((2, 7), requires_grad=True)
    advs = torch.full((2, 7), 2.0)
    masks = torch.tensor([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    mean = masked_mean(ratio * advs, masks, dim=1)
    normalized = masked_normalize(ratio * advs, masks, dim=1, normalize_constant=7)
    assert mean.tolist() == [2.0, 2.0] and normalized.tolist() == pytest.approx([1.1429, 2.0], abs=1e-4)
    mean.mean().backward()
    assert torch.allclose(ratio.grad, torch.tensor([[0.25] * 4 + [0.0] * 3, [0.1429] * 7]), atol=1e-4)
    ratio.grad = None
    normalized.mean().backward()
    assert torch.allclose(ratio.grad, torch.tensor([[0.1429] * 4 + [0.0] * 3, [0.1429] * 7]), atol=1e-4)


@pytest.mark.parametrize("path", CS336_PRESETS, ids=lambda p: p.stem)
def test_every_comparison_validates_on_at_least_1024_questions(path):
    """§7's tip: "evaluate on at least 1024 validation examples to compare hyperparameters", which the SFT dataset
    sizes and the expert-iteration settings compare as well."""
    preset = load_preset(path)
    config_cls, _ = script_settings(preset.script)
    for run in preset.runs:
        assert config_cls(**run.settings).n_eval_examples >= 1024, run.label
