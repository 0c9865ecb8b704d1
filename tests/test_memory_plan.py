"""The memory planner on Qwen2.5-Math-1.5B's shape, with every number derived by hand here from the shape; the
`--plan-memory` command, which reads only a config.json; and the plan's training phase against the peak of live
tensors in a CPU optimizer step of the GRPO learner, in each precision, with and without checkpointing."""

import json
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

import alignment.models.chunked_head as chunked_head
from alignment.grpo.synthetic import (
    planned_training_bytes,
    random_policy,
    synthetic_learner,
    synthetic_rows,
    synthetic_workload,
)
from alignment.run.memory_plan import (
    WORKSPACE_BYTES,
    GiB,
    Machine,
    ModelShape,
    Workload,
    activation_bytes,
    plan,
    remedies,
    report,
)
from alignment.run.precision import PRECISIONS
from tests.conftest import tiny_config
from tests.live_memory import LiveTensorBytes

QWEN_MATH_15B = ModelShape(
    hidden=1536,
    layers=28,
    heads=12,
    kv_heads=2,
    head_dim=128,
    intermediate=8960,
    vocab=151936,
    tied_embeddings=True,
    qkv_bias=True,
)
# The handout's microbatch: 2 sequences, a 512-token prompt (assumed) + 1,024 response tokens, bfloat16
HANDOUT = Workload(
    precision="bf16",
    micro_batch=2,
    prompt_tokens=512,
    response_tokens=1024,
    rollout_batch=256,
    group_size=8,
    gradient_checkpointing=False,
    kl_reference=False,
    rollout="vllm",
)

# By hand. Per layer: q (1536x1536 + 1536 bias), k and v (1536x256 + 256 each), o (1536x1536), gate/up/down
# (3 x 1536x8960), two norms (2 x 1536); the tied embedding 151936x1536 once; the final norm 1536.
LAYER = (1536 * 1536 + 1536) + 2 * (1536 * 256 + 256) + 1536 * 1536 + 3 * 1536 * 8960 + 2 * 1536
ROOT = 151936 * 1536 + 1536
PARAMS = 28 * LAYER + ROOT
WEIGHTS = 2 * PARAMS  # bf16; gradients the same; AdamW two states of the same
# Saved per token per layer: 2 norms x (fp32 input 4*1536 + bf16 normalized input and output 2 x 2*1536 + an fp32
# reciprocal RMS); q, attention output and o_proj input 3 x 2*1536, k and v 2 x 2*256, SDPA's fp32 log-sum-exp for 12
# heads; gate, up, silu(gate) and their product 4 x 2*8960
SAVED = 2 * (4 * 1536 + 2 * 2 * 1536 + 4) + 3 * 2 * 1536 + 2 * 2 * 256 + 4 * 12 + 4 * 2 * 8960
TOKENS = 2 * (512 + 1024)
FINAL_NORM = TOKENS * ((4 + 2) * 1536 + 4)  # its fp32 input, bf16 normalized input and reciprocal RMS
ROTARY = TOKENS * 2 * 128 * 2  # the cos and sin tables
# The head, a chunk of 384 response tokens at a time (the most whose float32 logits fit 256 MiB, in 64s): forward
# 10 bytes a word (bf16 logits, their fp32 copy and its exp), backward 6 (bf16 logits, then fp32 probabilities, then
# the bf16 gradient) beside the head's new bf16 weight gradient; and 2,048 response tokens' gathered hidden states,
# their gradient and 3 floats each
WORDS = 384 * 151936
HEAD = max(10 * WORDS, 6 * WORDS + 2 * 151936 * 1536) + 2048 * (2 * 2 * 1536 + 12)
WORKSPACES = 256 * 2**20
ACTIVATIONS = TOKENS * 28 * SAVED + FINAL_NORM + ROTARY + HEAD + WORKSPACES
# checkpointed: every layer's bf16 input and the larger of the head's moment and one layer's backward (its
# activations, its MLP's two widest gradients, the tied head's gradient waiting for the embedding's), or, larger still
# here, the backward's end: the embedding's dense gradient, the head's and their sum
LAYER_BACKWARD = TOKENS * (SAVED + 2 * 2 * 8960) + ROTARY + 2 * 151936 * 1536
HELD_CHECKPOINTED = TOKENS * 28 * 2 * 1536 + max(FINAL_NORM + ROTARY + HEAD, LAYER_BACKWARD)
ACTIVATIONS_CHECKPOINTED = max(HELD_CHECKPOINTED, 3 * 2 * 151936 * 1536) + WORKSPACES
VLLM_NEEDS = WEIGHTS + 2 * GiB + 8 * 1536 * (2 * 28 * 256 * 2)  # weights, overhead, KV cache of one group of 8


def test_hand_derived_sizes():
    assert PARAMS == 1_543_714_304  # Qwen2.5-Math-1.5B's published 1.54B
    assert QWEN_MATH_15B.parameters() == PARAMS
    assert QWEN_MATH_15B.saved_bytes_per_token_per_layer(2) == SAVED == 106_552
    assert HEAD == 6 * WORDS + 2 * 151936 * 1536 + 2048 * (2 * 2 * 1536 + 12)  # the backward's is the larger
    assert ACTIVATIONS_CHECKPOINTED == 3 * 2 * 151936 * 1536 + WORKSPACES
    assert activation_bytes(QWEN_MATH_15B, HANDOUT) == ACTIVATIONS
    assert activation_bytes(QWEN_MATH_15B, replace(HANDOUT, gradient_checkpointing=True)) == ACTIVATIONS_CHECKPOINTED
    assert QWEN_MATH_15B.kv_cache_bytes_per_token(2) == 28_672


def test_shape_from_a_qwen2_config(tmp_path):
    from transformers import Qwen2Config

    config = Qwen2Config(
        hidden_size=1536,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
        tie_word_embeddings=True,
    )
    assert ModelShape.from_config(config) == QWEN_MATH_15B


@pytest.mark.parametrize("gib,share", [(24, 0.59), (40, 0.75), (80, 0.87), (141, 0.93)])
def test_one_gpu_shared_with_vllm(gib, share):
    """vLLM gets what the resident policy (weights + AdamW states) leaves; training runs while vLLM sleeps."""
    usable = gib * GiB - 1 * GiB  # less the CUDA context
    resident = WEIGHTS + 2 * WEIGHTS
    assert int(100 * (usable - resident) / (gib * GiB)) / 100 == share  # the hand computation of the share
    for checkpointing, activations in ((False, ACTIVATIONS), (True, ACTIVATIONS_CHECKPOINTED)):
        result = plan(QWEN_MATH_15B, replace(HANDOUT, gradient_checkpointing=checkpointing), Machine(1, gib))
        assert result.vllm_share == share
        generating = resident + int(share * gib * GiB)
        training = resident + WEIGHTS + activations + GiB // 2  # + gradients, + vLLM asleep
        (gpu,) = result.devices
        assert gpu.peak == max(generating, training)
        assert gpu.fits == (max(generating, training) <= usable and int(share * gib * GiB) >= VLLM_NEEDS)
    # 21.6 GiB of training does not fit the 19 GiB a 20 GiB GPU leaves; checkpointing (13.6 GiB) does
    assert not plan(QWEN_MATH_15B, HANDOUT, Machine(1, 20)).fits
    assert plan(QWEN_MATH_15B, replace(HANDOUT, gradient_checkpointing=True), Machine(1, 20)).fits
    assert plan(QWEN_MATH_15B, HANDOUT, Machine(1, 40)).fits


@pytest.mark.parametrize("gib", [24, 40, 80, 141])
def test_two_gpus_keep_the_handouts_split(gib):
    result = plan(QWEN_MATH_15B, HANDOUT, Machine(2, gib))
    learner, engine = result.devices
    assert result.vllm_share == 0.85  # the handouts' gpu_memory_utilization, on vLLM's own GPU
    assert learner.peak == 4 * WEIGHTS + ACTIVATIONS  # weights, gradients, two AdamW states, activations
    assert engine.peak == int(0.85 * gib * GiB)
    assert learner.fits == (4 * WEIGHTS + ACTIVATIONS <= gib * GiB - GiB)
    assert engine.fits == (0.85 * gib * GiB >= VLLM_NEEDS)
    assert [learner.fits, engine.fits] == [True, True]  # the learner's 21.1 GiB fits even 24 GiB's 23


def test_kl_reference_costs_a_copy_and_shrinks_vllms_share():
    with_ref = plan(QWEN_MATH_15B, replace(HANDOUT, kl_reference=True), Machine(1, 80))
    assert with_ref.vllm_share == int(100 * (79 * GiB - 4 * WEIGHTS) / (80 * GiB)) / 100 == 0.84
    assert with_ref.devices[0].parts["reference"] == WEIGHTS


def test_kl_to_the_previous_step_costs_a_copy_of_what_trains():
    with_prev = plan(QWEN_MATH_15B, replace(HANDOUT, previous_copy=True), Machine(1, 80))
    assert with_prev.devices[0].parts["previous step's copy"] == WEIGHTS and with_prev.vllm_share == 0.84
    lora = replace(HANDOUT, previous_copy=True, trainable_fraction=0.01)  # the adapters only: the base is shared
    assert plan(QWEN_MATH_15B, lora, Machine(1, 80)).devices[0].parts["previous step's copy"] < WEIGHTS / 50
    assert "--no-kl-prev-step" in remedies(QWEN_MATH_15B, replace(HANDOUT, previous_copy=True), Machine(1, 40))


def test_hf_rollouts_alternate_kv_cache_and_training():
    work = replace(HANDOUT, rollout="hf")
    kv = 256 * 1536 * 28_672  # every rollout of the batch at full length
    (gpu,) = plan(QWEN_MATH_15B, work, Machine(1, 80)).devices
    assert gpu.parts["hf KV cache"] == kv
    assert gpu.peak == 3 * WEIGHTS + max(kv, WEIGHTS + ACTIVATIONS)


def test_an_explicit_share_too_small_for_vllm_is_refused():
    result = plan(
        QWEN_MATH_15B, replace(HANDOUT, gradient_checkpointing=True, gpu_memory_utilization=0.1), Machine(1, 40)
    )
    assert not result.fits and any(
        "below what it needs" in note for note in result.notes
    )  # 4 GiB < 5.2 GiB for weights + KV + overhead


def test_remedies_name_the_flags_that_make_it_fit():
    assert remedies(QWEN_MATH_15B, HANDOUT, Machine(1, 20)) == [
        "--gradient-checkpointing",
        "a microbatch of 1 sequence (--gradient-accumulation-steps = --train-batch-size)",
    ]
    # with two GPUs, sharding fits too: 2.5 x WEIGHTS (half of weights, gradients, AdamW states and reference)
    # + ACTIVATIONS + the gathered root and layers = 17.9 GiB of 21 (test_sharded_learner_divides_its_state)
    assert remedies(QWEN_MATH_15B, replace(HANDOUT, kl_reference=True), Machine(2, 22)) == [
        "--gradient-checkpointing",
        "a microbatch of 1 sequence (--gradient-accumulation-steps = --train-batch-size)",
        "a learner sharded over all 2 GPUs (torchrun --nproc-per-node 2, rollouts by hf)",
    ]
    # 16 GiB with a reference copy: nothing alone fits, checkpointing and dropping the copy together do
    assert remedies(QWEN_MATH_15B, replace(HANDOUT, kl_reference=True), Machine(1, 16)) == [
        "--gradient-checkpointing + --no-kl-reference"
    ]
    assert remedies(QWEN_MATH_15B, HANDOUT, Machine(1, 8)) == []
    _, text = report(QWEN_MATH_15B, HANDOUT, Machine(1, 8))
    assert text.endswith("a larger GPU is needed")


@pytest.mark.parametrize("text", ["24", "x24", "0x80", "2xbig", "1x-3"])
def test_bad_machine_is_named(text):
    with pytest.raises(ValueError, match=f"--plan-memory '{text}': expected GPUSxGIB"):
        Machine.parse(text)


@pytest.fixture
def qwen_config_dir(tmp_path):
    """A folder holding nothing but Qwen2.5-Math-1.5B's config.json: no weights, no tokenizer."""
    folder = tmp_path / "Qwen2.5-Math-1.5B"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen2ForCausalLM"],
                "model_type": "qwen2",
                "hidden_size": 1536,
                "intermediate_size": 8960,
                "num_hidden_layers": 28,
                "num_attention_heads": 12,
                "num_key_value_heads": 2,
                "vocab_size": 151936,
                "tie_word_embeddings": True,
                "max_position_embeddings": 4096,
                "torch_dtype": "bfloat16",
            }
        )
    )
    return folder


def test_plan_memory_command_exits_0_when_it_fits_and_1_with_the_remedy(qwen_config_dir, tmp_path):
    from scripts import train_grpo

    base = ["--model", str(qwen_config_dir), "--output-dir", str(tmp_path / "never-written"), "--precision", "bf16"]
    fits = CliRunner().invoke(train_grpo.app, base + ["--plan-memory", "2x80"])
    assert fits.exit_code == 0, fits.output
    assert "cuda:0: peak 21.1 of 79.0 GiB usable (fits)" in fits.output and "cuda:1: peak 68.0" in fits.output
    tight = CliRunner().invoke(train_grpo.app, base + ["--plan-memory", "1x20"])
    assert tight.exit_code == 1
    assert "does not fit; it would with --gradient-checkpointing or a microbatch of 1 sequence" in tight.output
    assert (
        CliRunner().invoke(train_grpo.app, base + ["--plan-memory", "1x20", "--gradient-checkpointing"]).exit_code == 0
    )
    assert not (tmp_path / "never-written").exists()  # planning writes nothing
    bad = CliRunner().invoke(train_grpo.app, base + ["--plan-memory", "lots"])
    assert bad.exit_code == 2 and "--plan-memory 'lots'" in bad.output


def test_a_gpu_run_that_cannot_fit_is_refused_before_any_model_loads(qwen_config_dir, tokenizer, tmp_path, monkeypatch):
    """A 20 GiB GPU, as torch would report it, for a run whose model folder has a config and a tokenizer but no
    weights: the plan must stop the run first, naming the flags, since loading would fail otherwise."""
    from types import SimpleNamespace

    from alignment.grpo.config import GRPOConfig
    from alignment.grpo_run import train_grpo

    tokenizer.save_pretrained(qwen_config_dir)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=20 * GiB))
    data = tmp_path / "questions.jsonl"
    data.write_text(
        "".join(json.dumps({"question": f"What is {n} + 1?", "answer": f"#### {n + 1}"}) + "\n" for n in range(40))
    )
    config = GRPOConfig(
        model=str(qwen_config_dir),
        dataset=str(data),
        policy_device="cuda:0",
        n_eval_examples=4,
        output_dir=tmp_path / "run",
        precision="bf16",
    )
    with pytest.raises(ValueError, match=r"does not fit; it would with --gradient-checkpointing or a microbatch of 1"):
        train_grpo(config)


def test_lora_counts_adapter_gradients_and_states_only():
    # rank 16 on every projection: 16 x (in + out) each; q, o: 1536 + 1536; k, v: 1536 + 256; gate, up, down: 1536 +
    # 8960
    adapters = 28 * 16 * (2 * 3072 + 2 * 1792 + 3 * 10496)
    assert QWEN_MATH_15B.lora_parameters(16, ["all-linear"]) == adapters == 18_464_768
    assert QWEN_MATH_15B.lora_parameters(16, ["q_proj", "v_proj"]) == 28 * 16 * (3072 + 1792)
    lora = replace(HANDOUT, trainable_fraction=adapters / PARAMS)
    (gpu,) = plan(QWEN_MATH_15B, lora, Machine(1, 20)).devices
    assert gpu.parts["gradients"] == 2 * adapters and gpu.parts["optimizer"] == 4 * adapters
    # the 20 GiB GPU that full fine-tuning overflows without checkpointing holds LoRA with room to spare
    assert plan(QWEN_MATH_15B, lora, Machine(1, 20)).fits and not plan(QWEN_MATH_15B, HANDOUT, Machine(1, 20)).fits


def test_plan_memory_with_lora_and_a_reference_keeps_no_copy(qwen_config_dir, tmp_path):
    from scripts import train_grpo

    result = CliRunner().invoke(
        train_grpo.app,
        [
            *("--model", str(qwen_config_dir), "--plan-memory", "1x24", "--precision", "bf16"),
            *("--lora-rank", "16", "--kl-reference"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "gradients                 0.03 GiB" in result.output and "    reference " not in result.output


# Sharded over N processes (one GPU each): weights, gradients, AdamW states and reference divided by N. Held whole
# per process while training: the root (151936 x 1536 tied embedding + final norm) and its gradient, two layers'
# weights and one layer's gradient; while sampling, the whole model and the KV cache of this rank's prompts.
GATHERED = 2 * (2 * ROOT + 3 * LAYER)


@pytest.mark.parametrize("processes", [2, 4])
def test_sharded_learner_divides_its_state(processes):
    shard = WEIGHTS // processes  # PARAMS is a multiple of 4: every rank's shard is as large
    kv = (256 // 8 // processes) * 8 * 1536 * 28_672  # this rank's prompts x 8 rollouts, at full length
    for kl_reference in (False, True):
        work = replace(HANDOUT, rollout="hf", processes=processes, kl_reference=kl_reference)
        (gpu,) = plan(QWEN_MATH_15B, work, Machine(processes, 24)).devices
        reference = shard if kl_reference else 0
        assert gpu.parts == {
            "weights": shard,
            "master weights": 0,  # bf16 keeps none
            "gradients": shard,
            "optimizer": 2 * shard,
            "reference": reference,
            "activations": ACTIVATIONS,
            "gathered to train": GATHERED,
            "gathered to sample": WEIGHTS,
            "hf KV cache": kv,
        }
        resident = 3 * shard + reference
        assert gpu.peak == max(resident + WEIGHTS + kv, resident + shard + ACTIVATIONS + GATHERED)
        assert gpu.name == f"each of {processes} GPUs"
    assert GATHERED / GiB == pytest.approx(1.13, abs=0.01)
    # 21.1 GiB on one 20 GiB GPU does not fit; a quarter of the state each on four (training 13.6 GiB) does
    assert not plan(QWEN_MATH_15B, replace(HANDOUT, rollout="hf"), Machine(1, 20)).fits
    assert plan(QWEN_MATH_15B, replace(HANDOUT, rollout="hf", processes=4), Machine(4, 20)).fits


def test_sharding_needs_a_gpu_per_process():
    with pytest.raises(ValueError, match="sharded over 4 processes needs 4 GPUs, one each; the machine has 2"):
        plan(QWEN_MATH_15B, replace(HANDOUT, rollout="hf", processes=4), Machine(2, 80))


def test_plan_processes_flag(qwen_config_dir):
    from scripts import train_grpo

    base = ["--model", str(qwen_config_dir), "--plan-memory", "2x20", "--precision", "bf16"]
    one = CliRunner().invoke(train_grpo.app, base)  # vLLM on its own GPU: the learner alone overflows the other
    assert one.exit_code == 1 and "learner sharded over all 2 GPUs (torchrun --nproc-per-node 2" in one.output
    two = CliRunner().invoke(train_grpo.app, base + ["--plan-processes", "2"])
    assert two.exit_code == 0, two.output
    peak = 2 * WEIGHTS + ACTIVATIONS + GATHERED  # training: weights, gradients, AdamW states halved
    assert "learner sharded over 2 processes" in two.output
    assert f"each of 2 GPUs: peak {peak / GiB:.1f} of 19.0 GiB usable (fits)" in two.output
    for flags, message in (
        (["--plan-processes", "3"], "--plan-processes 3: a learner sharded over 3 processes needs 3 GPUs"),
        (["--plan-processes", "2", "--lora-rank", "16"], "--lora-rank > 0 under torchrun"),
        (["--plan-processes", "0"], "--plan-processes must be >= 1"),
    ):
        refused = CliRunner().invoke(train_grpo.app, base + flags)
        assert refused.exit_code == 2 and message in " ".join(refused.output.split()), refused.output


def test_a_gpu_run_under_torchrun_plans_for_its_processes(qwen_config_dir, tokenizer, monkeypatch, capsys):
    from types import SimpleNamespace

    from alignment.grpo.config import GRPOConfig
    from alignment.run.setup import check_gpu_memory

    tokenizer.save_pretrained(qwen_config_dir)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(total_memory=20 * GiB))
    config = GRPOConfig(model=str(qwen_config_dir), backend="hf", precision="bf16")
    assert check_gpu_memory(config, None, "cuda:0", "cuda:0", processes=2) is None  # fits: no vLLM share
    assert "each of 2 GPUs" in capsys.readouterr().out
    with pytest.raises(ValueError, match="does not fit; it would with --gradient-checkpointing"):
        check_gpu_memory(config, None, "cuda:0", "cuda:0")  # the same run in one process, on one of those GPUs


def test_the_handouts_models_plan_offline_from_their_published_shapes(monkeypatch):
    from transformers import Qwen3Config

    from alignment.run.memory_plan import PUBLISHED_SHAPES, model_shape

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    qwen3 = model_shape("Qwen/Qwen3-0.6B")
    # by hand: q 1024x2048 (16 heads of 128), k and v 1024x1024 (8 heads), o 2048x1024, gate/up/down 3 x 1024x3072,
    # two norms; the tied embedding 151936x1024 once and the final norm: Qwen3-0.6B's published 0.6B (0.44B without
    # the embedding)
    layer = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 3 * 1024 * 3072 + 2 * 1024
    assert qwen3.parameters() == 28 * layer + 151936 * 1024 + 1024 == 596_042_752
    assert model_shape("Qwen/Qwen2.5-Math-1.5B") == QWEN_MATH_15B
    # the table says what transformers reads from Qwen3-0.6B's config.json (head_dim 128, not hidden / heads)
    published = Qwen3Config(
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        tie_word_embeddings=True,
        attention_bias=False,
    )
    assert ModelShape.from_config(published) == PUBLISHED_SHAPES["Qwen/Qwen3-0.6B"] == qwen3


@pytest.fixture
def tiny_qwen3_dir(tmp_path):
    """A tiny random Qwen3 (head size 32, not hidden / heads = 16), saved as its config.json only."""
    config = tiny_config("qwen3", 1000, head_dim=32)
    config.save_pretrained(tmp_path / "tiny-qwen3")
    return tmp_path / "tiny-qwen3"


def test_a_qwen3_folder_plans_with_its_own_head_size(tiny_qwen3_dir):
    from alignment.run.memory_plan import model_shape
    from scripts import train_grpo

    shape = model_shape(str(tiny_qwen3_dir))
    assert (shape.head_dim, shape.q_dim, shape.kv_dim, shape.qkv_bias) == (32, 128, 64, False)
    layer = 64 * 128 + 2 * 64 * 64 + 128 * 64 + 3 * 64 * 128 + 2 * 64
    assert shape.parameters() == 2 * layer + 1000 * 64 + 64
    result = CliRunner().invoke(train_grpo.app, ["--model", str(tiny_qwen3_dir), "--plan-memory", "1x24"])
    assert result.exit_code == 0, result.output
    assert "policy 0.00B parameters" in result.output


def test_the_starter_preset_plans_offline_and_an_unreadable_model_is_one_line(monkeypatch, tmp_path):
    from scripts import train_grpo

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    starter = CliRunner().invoke(
        train_grpo.app, ["--config", "configs/grpo_handout_starter.toml", "--plan-memory", "1x80"]
    )
    assert starter.exit_code == 0 and "(fits)" in starter.output, starter.output
    pku = CliRunner().invoke(train_grpo.app, ["--config", "configs/pku/grpo.toml", "--plan-memory", "2x80"])
    assert pku.exit_code == 0 and "policy 0.60B parameters" in pku.output, pku.output
    missing = CliRunner().invoke(train_grpo.app, ["--model", str(tmp_path / "nothing"), "--plan-memory", "1x80"])
    assert missing.exit_code == 2
    assert "nothing' cannot be loaded: no such folder" in missing.output and "give --model" in missing.output
    assert "Traceback" not in missing.output


def test_ignore_memory_plan_starts_with_a_warning(capsys):
    from alignment.grpo.config import GRPOConfig
    from alignment.run.setup import check_memory_plan

    machine = Machine(1, 20)
    with pytest.raises(ValueError, match="does not fit; .* \\(--ignore-memory-plan starts it anyway\\)"):
        check_memory_plan(GRPOConfig(), QWEN_MATH_15B, HANDOUT, machine)
    with pytest.warns(UserWarning, match="does not fit.*starting anyway"):
        check_memory_plan(GRPOConfig(ignore_memory_plan=True), QWEN_MATH_15B, HANDOUT, machine)
    assert "cuda:0: peak" in capsys.readouterr().out  # the plan is printed either way


# Each --precision on the handout's microbatch, the learner on a GPU of its own. Bytes a parameter of the weights, the
# float32 master copy, the gradients and AdamW's two states: bf16 2, 0, 2, 2 x 2; bf16-mixed and fp16-mixed 2, 4, 4,
# 2 x 4 (a bfloat16 / float16 compute copy, float32 everything else); fp32 4, 0, 4, 2 x 4. Activations, KV cache and
# vLLM's weights are in the compute dtype: float32's saved activations per token per layer, by hand as SAVED above
# with 4-byte tensors and keys and values copied to all 12 query heads (CUDA's float32 attention), its head 8 bytes a
# word forward and 4 backward beside a float32 weight gradient. fp16-mixed's loss scale multiplies the upstream
# gradient alone, so its head holds what bf16-mixed's does.
SAVED_FP32 = 2 * (4 * 1536 + 2 * 4 * 1536 + 4) + 3 * 4 * 1536 + 2 * 4 * 1536 + 4 * 12 + 4 * 4 * 8960
HEAD_FP32 = max(8 * WORDS, 4 * WORDS + 4 * 151936 * 1536) + 2048 * (2 * 4 * 1536 + 12)
ACTIVATIONS_FP32 = TOKENS * 28 * SAVED_FP32 + TOKENS * (8 * 1536 + 4) + 2 * ROTARY + HEAD_FP32 + WORKSPACES


@pytest.mark.parametrize(
    "precision,per_parameter,activations,compute",
    [
        ("bf16", (2, 0, 2, 4), ACTIVATIONS, 2),
        ("bf16-mixed", (2, 4, 4, 8), ACTIVATIONS, 2),
        ("fp16-mixed", (2, 4, 4, 8), ACTIVATIONS, 2),
        ("fp32", (4, 0, 4, 8), ACTIVATIONS_FP32, 4),
    ],
)
def test_each_precision_plans_its_bytes_per_parameter(precision, per_parameter, activations, compute):
    weights, master, gradients, optimizer = (PARAMS * b for b in per_parameter)
    learner, engine = plan(QWEN_MATH_15B, replace(HANDOUT, precision=precision), Machine(2, 80)).devices
    assert learner.parts == {
        "weights": weights,
        "master weights": master,
        "gradients": gradients,
        "optimizer": optimizer,
        "reference": 0,
        "activations": activations,
    }
    assert learner.peak == weights + master + gradients + optimizer + activations
    assert engine.parts["(vLLM needs at least)"] == compute * PARAMS + 2 * GiB + 8 * 1536 * (2 * 28 * 256 * compute)
    # on one GPU vLLM gets what the resident weights, master copy and AdamW states leave
    resident = weights + master + optimizer
    (gpu,) = plan(QWEN_MATH_15B, replace(HANDOUT, precision=precision), Machine(1, 80)).devices
    share = int(100 * (79 * GiB - resident) / (80 * GiB)) / 100
    assert gpu.parts["vLLM awake"] == int(share * 80 * GiB)
    assert gpu.peak == max(resident + int(share * 80 * GiB), resident + gradients + activations + GiB // 2)


def test_a_sharded_mixed_precision_keeps_float32_shards_as_its_master():
    """bf16-mixed over 2 processes: the float32 shards are the master (no second copy), gradients and AdamW states
    float32, the reference bfloat16; gathered weights in bfloat16, the gathered layer's gradient reduced in float32."""
    work = replace(HANDOUT, precision="bf16-mixed", rollout="hf", processes=2, kl_reference=True)
    (gpu,) = plan(QWEN_MATH_15B, work, Machine(2, 80)).devices
    half = PARAMS // 2
    gathered = 2 * (ROOT + 2 * LAYER) + 4 * (ROOT + LAYER)
    kv = (256 // 8 // 2) * 8 * 1536 * 28_672
    assert gpu.parts == {
        "weights": 4 * half,
        "master weights": 0,
        "gradients": 4 * half,
        "optimizer": 8 * half,
        "reference": 2 * half,
        "activations": ACTIVATIONS,
        "gathered to train": gathered,
        "gathered to sample": WEIGHTS,
        "hf KV cache": kv,
    }
    resident = (4 + 8 + 2) * half
    assert gpu.peak == max(resident + WEIGHTS + kv, resident + 4 * half + ACTIVATIONS + gathered)


def test_lora_in_a_mixed_precision_keeps_a_master_of_the_adapters_only():
    adapters = QWEN_MATH_15B.lora_parameters(16, ["all-linear"])
    work = replace(HANDOUT, precision="bf16-mixed", trainable_fraction=adapters / PARAMS)
    learner, _ = plan(QWEN_MATH_15B, work, Machine(2, 80)).devices
    assert learner.parts["weights"] == WEIGHTS  # the frozen base in bfloat16
    assert (learner.parts["master weights"], learner.parts["gradients"]) == (4 * adapters, 4 * adapters)
    assert learner.parts["optimizer"] == 8 * adapters


def test_the_plan_defaults_to_bf16_mixed_and_names_bf16_as_a_remedy(qwen_config_dir):
    from scripts import train_grpo

    # bf16-mixed's learner: 18 bytes a parameter (25.9 GiB) and the activations (9.6 GiB) on vLLM's neighbour
    two = CliRunner().invoke(train_grpo.app, ["--model", str(qwen_config_dir), "--plan-memory", "2x80"])
    assert two.exit_code == 0, two.output
    assert "precision bf16-mixed" in two.output
    assert f"cuda:0: peak {(18 * PARAMS + ACTIVATIONS) / GiB:.1f} of 79.0 GiB usable (fits)" in two.output
    assert "master weights            5.75 GiB" in two.output  # 4 bytes a parameter
    one = CliRunner().invoke(train_grpo.app, ["--model", str(qwen_config_dir), "--plan-memory", "1x20"])
    assert one.exit_code == 1
    # 14 bytes a parameter stay resident in bf16-mixed (20.1 GiB of 19): bfloat16 states with either saving fit
    assert (
        "it would with --gradient-checkpointing + --precision bf16 (no float32 master copy) or a microbatch of 1 "
        "sequence (--gradient-accumulation-steps = --train-batch-size) + --precision bf16"
        in " ".join(one.output.split())
    )
    fp32 = CliRunner().invoke(
        train_grpo.app, ["--model", str(qwen_config_dir), "--plan-memory", "1x40", "--precision", "fp32"]
    )
    assert fp32.exit_code == 1 and "--precision bf16-mixed (bfloat16 compute)" in fp32.output


# A small Qwen2 of the handouts' proportions (the layers' activations far above the vocabulary's tensors): 4 layers, 4
# query heads over 2 key/value heads
SMALL = dict(
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=512,
    vocab_size=2000,
    tie_word_embeddings=True,
    max_position_embeddings=512,
)


# By default fp32 with checkpointing and bf16-mixed without: both ways of checkpointing, and bf16 weights inside the
# mixed case (each case takes seconds); the other cases under -m slow, fp16-mixed among them (float16 matmuls are slow
# on a CPU, 20 s a case here; fp16-mixed plans what bf16-mixed does)
MEASURED_BY_DEFAULT = {("fp32", True), ("bf16-mixed", False)}


@pytest.mark.parametrize(
    "precision,checkpointing",
    [
        pytest.param(
            precision,
            checkpointing,
            id=f"{precision}-{'checkpointed' if checkpointing else ''}",
            marks=() if (precision, checkpointing) in MEASURED_BY_DEFAULT else pytest.mark.slow,
        )
        for precision in PRECISIONS
        for checkpointing in (False, True)
    ],
)
def test_the_plan_holds_a_cpu_steps_peak_of_live_tensors_within_10_percent(precision, checkpointing, monkeypatch):
    """Two optimizer steps of two microbatches of 2 x (64 + 128) tokens, the head in chunks of 128 tokens: the peak
    bytes of live tensors (what torch.cuda.max_memory_allocated counts on a GPU), against the plan less its
    allowance for GPU kernels' workspaces. Float32's plan counts keys and values copied to every query head, as a
    GPU's float32 attention does and the CPU's does not (1.6% of this step's peak)."""
    monkeypatch.setattr(chunked_head, "CHUNK_BYTES", 2**20)  # 128 tokens of 2,000 float32 logits
    torch.manual_seed(0)
    policy = random_policy(SMALL, precision, "cpu", checkpointing)
    learner = synthetic_learner(policy, precision, 4, 2)
    rows = synthetic_rows(4, 64, 128, SMALL["vocab_size"])
    held = [*policy.parameters(), *(m for m in learner.optimizer.masters if m is not None)]
    tracker = LiveTensorBytes()
    tracker.known(held)
    with tracker:
        for _ in range(2):
            learner.optimizer_step(rows)
    measured = tracker.peak + sum(t.numel() * t.element_size() for t in held)
    planned = planned_training_bytes(SMALL, synthetic_workload(precision, 2, 2, 64, 128, checkpointing))
    # what the accounting leaves out is a few hundred KiB of small tensors (bias gradients, masks, indices), which
    # the workspace allowance covers
    assert planned >= measured and 0.98 * measured <= planned - WORKSPACE_BYTES <= 1.1 * measured
