"""One setting per GPU path (--kernels, --packed-rows, --fused-adamw, beside --decode), declared once in the settings
every script that takes the path shares, saved with the run, and each reaching what it switches."""

from dataclasses import fields

import pytest
import torch

from alignment.config.settings import check_choices, read_run_settings, write_run_settings
from alignment.grpo.config import GRPOConfig
from alignment.kernels.support import kernel_choice, use_kernels
from alignment.logprobs import final_hidden_states, packs_rows
from alignment.models.packed_rows import packing_rows, use_packed_rows
from alignment.models.transformer_lm import TransformerConfig, TransformerLM
from alignment.ray.config import RayGRPOConfig
from alignment.run.generation import GenerationConfig
from alignment.run.precision import PolicyOptimizer
from alignment.run.setup import load_policy
from alignment.supervised.config import EIConfig, SFTConfig

GPU_PATHS = {"kernels": "auto", "packed_rows": True, "fused_adamw": True, "decode": "auto"}


@pytest.fixture
def process_settings():
    """--kernels and --packed-rows are the process's: put back after the test."""
    yield
    use_kernels("auto")
    use_packed_rows(True)


@pytest.mark.parametrize("config_cls", [GRPOConfig, RayGRPOConfig, SFTConfig, EIConfig])
def test_every_training_script_takes_each_gpu_paths_setting_saved_with_its_run(config_cls, tmp_path):
    defaults = {f.name: f.default for f in fields(config_cls) if f.name in GPU_PATHS}
    assert defaults == GPU_PATHS
    assert {"kernels", "packed_rows", "fused_adamw"} <= config_cls.RESUMABLE  # each computes the same numbers
    config = config_cls(kernels="torch", packed_rows=False, fused_adamw=False, output_dir=tmp_path)
    write_run_settings(config)
    saved = read_run_settings(tmp_path, config_cls)
    assert (saved["kernels"], saved["packed_rows"], saved["fused_adamw"]) == ("torch", False, False)
    with pytest.raises(ValueError, match="--kernels 'cuda' is not one of auto, torch, triton"):
        check_choices(config_cls(kernels="cuda"))


def test_generation_takes_the_kernels_setting():
    assert GenerationConfig().kernels == "auto" and GenerationConfig().decode == "auto"


def test_loading_the_policy_sets_the_processs_kernels_and_packing(process_settings):
    config = GRPOConfig(model="transformer_lm", backend="transformer_lm", kernels="torch", packed_rows=False)
    model = TransformerLM(TransformerConfig(vocab_size=64, d_model=32, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=64))
    ids, mask = torch.randint(0, 64, (3, 7), generator=torch.Generator().manual_seed(0)), torch.ones(3, 7).long()
    mask[0, :3] = 0
    hidden = {}
    for packed in (True, False):
        use_packed_rows(packed)
        assert packs_rows(model) is packed
        hidden[packed] = final_hidden_states(model, ids, mask, mask.bool())
    torch.testing.assert_close(hidden[True], hidden[False], rtol=1e-5, atol=1e-5)  # the same states either way
    use_packed_rows(True)
    with pytest.raises(Exception):  # no such checkpoint: the settings are applied before the model loads
        load_policy(config, "cpu", torch.float32)
    assert kernel_choice() == "torch" and not packing_rows()


@pytest.mark.parametrize("fused", [True, False])
def test_fused_adamw_is_a_setting(fused):
    model = torch.nn.Linear(4, 4)
    optimizer = PolicyOptimizer(model, "fp32", fused=fused, lr=1e-3)
    assert bool(optimizer.optimizer.defaults["fused"]) is fused
    model(torch.randn(2, 4)).sum().backward()
    before = model.weight.detach().clone()
    optimizer.step()
    assert not torch.equal(before, model.weight)
