"""Checkpoints without pickle: exact round trips of policy, optimizer and RNGs; damaged, edited or old-format
checkpoints refused naming the file; the trained policy as a standard model folder every loader reads."""

import json
import random
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForCausalLM

from alignment.grpo.config import GRPOConfig
from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.models.loading import load_model_and_tokenizer
from alignment.models.policy_folder import load_policy_weights, save_policy
from alignment.run.checkpoint import complete_step, export_policy, load_checkpoint, save_checkpoint


def trained_pair(model_dir, seed: int = 0):
    """A tiny policy and its AdamW after one step on a random batch."""
    torch.manual_seed(seed)
    policy, tokenizer = load_model_and_tokenizer(str(model_dir))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2, betas=(0.9, 0.95))
    ids = torch.randint(0, 100, (2, 5))
    policy(ids, labels=ids).loss.backward()
    optimizer.step()
    return policy, tokenizer, optimizer


@pytest.fixture
def saved(tiny_model_dir, tmp_path):
    config = GRPOConfig(model=str(tiny_model_dir), output_dir=tmp_path / "run")
    policy, tokenizer, optimizer = trained_pair(tiny_model_dir)
    torch.manual_seed(123)
    random.seed(7)
    save_checkpoint(config.output_dir, config, policy, tokenizer, optimizer, {"step": 3, "order_position": 12})
    return config, policy, tokenizer, optimizer


def test_round_trip_restores_policy_optimizer_and_rngs_exactly(saved, tiny_model_dir):
    config, policy, _, optimizer = saved
    expected_draws = (torch.rand(3), random.random())
    fresh_policy, _ = load_model_and_tokenizer(str(tiny_model_dir))
    fresh_optimizer = torch.optim.AdamW(fresh_policy.parameters(), lr=1e-2, betas=(0.9, 0.95))
    state = load_checkpoint(config.output_dir, config, fresh_policy, fresh_optimizer)
    assert state == {"step": 3, "order_position": 12}
    for (name, a), b in zip(policy.state_dict().items(), fresh_policy.state_dict().values()):
        assert torch.equal(a, b), name
    for a, b in zip(optimizer.state_dict()["state"].values(), fresh_optimizer.state_dict()["state"].values()):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    draws = (torch.rand(3), random.random())
    assert torch.equal(draws[0], expected_draws[0]) and draws[1] == expected_draws[1]
    files = {p.name for p in (config.output_dir / "checkpoint").rglob("*") if p.is_file()}
    assert {"model.safetensors", "optimizer.safetensors", "state.json", "config.json", "COMPLETE"} <= files
    assert not any(name.endswith((".pt", ".bin", ".pkl")) for name in files)  # nothing is unpickled on load


@pytest.mark.parametrize("damaged", ["optimizer.safetensors", "policy/model.safetensors"])
def test_a_truncated_tensor_file_is_refused_naming_it(saved, damaged):
    config, policy, _, optimizer = saved
    path = config.output_dir / "checkpoint" / damaged
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ValueError, match=f"{path} is damaged: .* bytes where .* were written"):
        load_checkpoint(config.output_dir, config, policy, optimizer)


def test_an_edited_state_file_or_other_settings_are_refused(saved):
    config, policy, _, optimizer = saved
    with pytest.raises(
        ValueError,
        match=r"another configuration \(learning_rate: checkpoint 1e-05 vs now 0.1\).*settings.json was edited",
    ):
        load_checkpoint(config.output_dir, replace(config, learning_rate=0.1), policy, optimizer)
    state = config.output_dir / "checkpoint" / "state.json"
    state.write_text(state.read_text()[:-20])
    with pytest.raises(ValueError, match=f"{state} is not valid JSON"):
        load_checkpoint(config.output_dir, config, policy, optimizer)


def test_an_old_pickle_checkpoint_is_refused_with_a_message(tmp_path, tiny_model_dir):
    config = GRPOConfig(output_dir=tmp_path)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "state.pt").write_bytes(b"\x80\x04pickled")
    (tmp_path / "checkpoint" / "COMPLETE").write_text("4")
    policy, _, optimizer = trained_pair(tiny_model_dir)
    with pytest.raises(ValueError, match="older version of alignment as a pickle \\(state.pt\\).*start the run again"):
        load_checkpoint(tmp_path, config, policy, optimizer)


def test_a_save_killed_between_its_renames_leaves_a_usable_checkpoint(saved):
    config, policy, tokenizer, optimizer = saved
    folder = config.output_dir
    (folder / "checkpoint").rename(folder / "checkpoint.old")  # killed after moving the old one aside
    assert complete_step(folder) == 3 and (folder / "checkpoint" / "state.json").is_file()
    save_checkpoint(folder, config, policy, tokenizer, optimizer, {"step": 4})
    (folder / "checkpoint").rename(folder / "checkpoint.partial")  # killed after staging the new one whole
    assert complete_step(folder) == 4


def test_the_exported_policy_loads_as_a_standard_model_folder(saved):
    config, policy, _, _ = saved
    folder = export_policy(config.output_dir)
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(loaded(ids).logits, policy(ids).logits)
    assert (folder / "tokenizer_config.json").is_file()


def test_a_transformer_lm_policy_is_saved_as_a_llama_folder(tiny_model_dir, tokenizer, tmp_path):
    ours, _ = load_transformer_lm(tiny_model_dir)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.01 * torch.randn_like(p))
    folder = save_policy(ours, tokenizer, tmp_path / "policy")
    ids = torch.tensor([[5, 6, 7, 8]])
    hf = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert torch.allclose(hf(ids).logits, ours(ids), atol=1e-4)
    again, _ = load_transformer_lm(folder)
    assert torch.equal(again(ids), ours(ids))
    fresh, _ = load_transformer_lm(tiny_model_dir)
    load_policy_weights(fresh, folder)  # resume path: into a live model
    assert torch.equal(fresh(ids), ours(ids))


def test_weights_of_another_architecture_are_refused(saved, tmp_path, tokenizer):
    config, policy, _, _ = saved
    from transformers import LlamaConfig, LlamaForCausalLM

    other = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=False,
        )
    )
    folder = save_policy(other, tokenizer, tmp_path / "other")
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 1
    with pytest.raises(ValueError, match=f"{folder}: weights do not fit the policy .*shape"):
        load_policy_weights(policy, folder)


def test_a_checkpoint_of_another_process_kind_is_refused_naming_the_count(saved):
    config, policy, _, optimizer = saved
    state = config.output_dir / "checkpoint" / "state.json"
    written = json.loads(state.read_text())
    assert written["processes"] is None  # one unsharded process
    state.write_text(json.dumps(written | {"processes": 2}))
    with pytest.raises(
        ValueError,
        match="written by a learner sharded over 2 processes, and this is one unsharded "
        r"process; resume it under torchrun \(any --nproc-per-node\)",
    ):
        load_checkpoint(config.output_dir, config, policy, optimizer)
