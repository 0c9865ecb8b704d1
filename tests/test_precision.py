"""--precision: the default per device, a bad value named, bf16's rounded-away updates against bf16-mixed's float32
master, fp16-mixed's loss scaler (an overflowing step skipped, its state and the master through a checkpoint), runs
saved with --dtype; slow: a resumed fp16-mixed run, the sharded learner's MixedPrecisionPolicy, a float16 vLLM
engine."""

import json
import math
from dataclasses import replace

import pytest
import torch
from transformers import LlamaForCausalLM

from alignment.config.settings import typed_values
from alignment.data.sft_examples import SFTExample
from alignment.data.task import Task
from alignment.grpo.config import GRPOConfig
from alignment.grpo.config import validate as validate_grpo
from alignment.grpo.learner import GRPOLearner
from alignment.grpo.sampler import rollout_sampling
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.run.checkpoint import load_checkpoint, save_checkpoint
from alignment.run.precision import default_precision, resolve_precision
from alignment.run.setup import model_dtype
from alignment.supervised.config import EIConfig, SFTConfig
from alignment.supervised.config import validate as validate_sft
from alignment.supervised.trainer import SFTTrainer
from tests.conftest import tiny_config

EXAMPLES = [
    SFTExample("Q: What is 2 + 3?\nA:", " 2 + 3 = 5. The answer is 5."),
    SFTExample("Q: Name a fruit.\nA:", " An apple is a fruit."),
]


def tiny_policy(tokenizer, dtype: torch.dtype) -> LlamaForCausalLM:
    """The same random 2-layer Llama every call (weights of about 0.02, as transformers initializes them)."""
    torch.manual_seed(0)
    return LlamaForCausalLM(tiny_config("llama", len(tokenizer), tokenizer.pad_token_id)).to(dtype)


def sft_settings(tmp_path, precision: str, learning_rate: float = 1e-5) -> SFTConfig:
    return SFTConfig(
        precision=precision,  # type: ignore[arg-type]
        learning_rate=learning_rate,
        batch_size=2,
        gradient_accumulation_steps=1,
        max_seq_length=64,
        output_dir=tmp_path / "run",
    )


def changed(before: dict[str, torch.Tensor], policy: torch.nn.Module) -> float:
    """The fraction of the policy's weights that differ from `before`."""
    moved = sum(int((p != before[name]).sum()) for name, p in policy.named_parameters())
    return moved / sum(p.numel() for p in policy.parameters())


def test_the_default_is_fp32_on_the_cpu_and_bf16_mixed_on_a_gpu():
    assert default_precision("cpu") == "fp32"
    assert default_precision("cuda:0") == default_precision(torch.device("cuda", 1)) == "bf16-mixed"
    assert resolve_precision(None, "cuda:1") == "bf16-mixed" and resolve_precision("bf16", "cuda:0") == "bf16"
    config = GRPOConfig()
    assert config.precision is None  # chosen by the policy's device
    assert model_dtype(config, "cpu") == torch.float32 and model_dtype(config, "cuda:0") == torch.bfloat16
    assert model_dtype(replace(config, precision="fp16-mixed"), "cpu") == torch.float16
    assert model_dtype(replace(config, precision="bf16"), "cpu") == torch.bfloat16


def test_a_bad_precision_is_refused_naming_the_flag():
    message = "--precision 'bf8' is not one of fp32, bf16, bf16-mixed, fp16-mixed"
    with pytest.raises(ValueError, match=message):
        validate_grpo(GRPOConfig(precision="bf8"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        validate_sft(SFTConfig(precision="bf8"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        resolve_precision("bf8", "cpu")


def test_an_lr_1e5_step_is_rounded_away_in_bf16_and_kept_by_bf16_mixeds_master(tokenizer, tmp_path):
    """AdamW's first step moves every weight by about lr = 1e-5; bfloat16 keeps 8 significant bits, so a weight of
    0.02 moves only by 2^-8 x 0.02 ~ 8e-5 at a time and an update under half of that rounds to nothing."""
    fractions = {}
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("bf16-mixed", torch.bfloat16)):
        policy = tiny_policy(tokenizer, dtype)
        trainer = SFTTrainer(policy, tokenizer, sft_settings(tmp_path, precision))
        start = {name: p.detach().clone() for name, p in policy.named_parameters()}
        masters = [p.detach().clone() for p in trainer.optimizer.params]  # what AdamW updates
        steps = []
        for _ in range(1 if precision == "fp32" else 2):
            trainer.step(EXAMPLES)
            steps.append(changed(start, policy))
        fractions[precision] = steps
        optimized = trainer.optimizer.params
        moved = sum(int((a != b).sum()) for a, b in zip(optimized, masters)) / sum(p.numel() for p in optimized)
        if precision == "bf16-mixed":
            assert all(p.dtype == torch.float32 for p in optimized) and moved > 0.99  # the master took every update
            assert {s["exp_avg"].dtype for s in trainer.optimizer.state.values()} == {torch.float32}
            for p, master in trainer.optimizer.pairs():  # the policy computes with the master, rounded
                assert p.dtype == torch.bfloat16 and torch.equal(p, master.to(torch.bfloat16))
        else:
            assert moved == steps[-1]  # AdamW updates the policy's own weights
    assert fractions["fp32"][0] > 0.99
    assert max(fractions["bf16"]) < 0.5  # most of every update is lost
    assert fractions["bf16-mixed"][0] < 0.5  # the master moved, its bfloat16 copy not yet ...
    # ... but the master accumulates updates too small for bfloat16, which a bf16 policy loses at every step
    assert fractions["bf16-mixed"][1] > fractions["bf16"][1] + 0.1


TASK = Task(["What is 1 + 1?", "Name a fruit."], ["2", "apple"], "Q: {question}\nA:", lambda r, t: {"reward": 0.0})


def test_fp16_mixed_skips_a_step_whose_scaled_gradient_overflows(tokenizer):
    policy = tiny_policy(tokenizer, torch.float16)
    config = GRPOConfig(
        precision="fp16-mixed",
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        kl_reference=False,
        learning_rate=1e-3,
    )
    learner = GRPOLearner(config, policy, tokenizer, TASK)
    prompts = [TASK.template.format(question=q) for q in TASK.questions]
    rollouts = HFRolloutEngine(policy, tokenizer, progress=False).generate(prompts, 2, rollout_sampling(config, 0))
    scores = [{"reward": float(i % 2)} for i in range(4)]  # advantages of both signs: a gradient
    batch = learner.make_batch([0, 1], rollouts, scores)
    scaler = learner.optimizer.scaler
    scaler.load_state_dict(scaler.state_dict() | {"scale": 2.0**60})  # past float16's 65504 at the head
    before = [p.detach().clone() for p in policy.parameters()]
    masters = [p.detach().clone() for p in learner.optimizer.params]
    row = learner.optimizer_step(batch)  # an overflow is not a divergence: no Diverged
    assert math.isfinite(row["loss"]) and not math.isfinite(row["grad_norm"])
    assert row["skipped_step"] == 1.0 and row["loss_scale"] == 2.0**59  # halved
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(masters, learner.optimizer.params))
    scaler.load_state_dict(scaler.state_dict() | {"scale": 2.0**10})
    row = learner.optimizer_step(batch)
    assert "skipped_step" not in row and math.isfinite(row["grad_norm"]) and row["loss_scale"] == 2.0**10
    assert not all(torch.equal(a, b) for a, b in zip(masters, learner.optimizer.params))


def test_the_master_weights_and_the_loss_scaler_survive_a_checkpoint(tokenizer, tmp_path):
    config = sft_settings(tmp_path, "fp16-mixed", learning_rate=1e-4)
    trainer = SFTTrainer(tiny_policy(tokenizer, torch.float16), tokenizer, config)
    scaler = trainer.optimizer.scaler
    scaler.load_state_dict(scaler.state_dict() | {"scale": 2.0**60})
    assert trainer.step(EXAMPLES)["skipped_step"] == 1.0
    scaler.load_state_dict(scaler.state_dict() | {"scale": 2.0**12})
    assert "skipped_step" not in trainer.step(EXAMPLES)
    assert scaler.state_dict()["_growth_tracker"] == 1  # a clean step, counted towards growing the scale
    # the master holds what float16 cannot: it is not its float16 copy
    assert any(not torch.equal(m, p.float()) for p, m in trainer.optimizer.pairs())
    save_checkpoint(config.output_dir, config, trainer.policy, tokenizer, trainer.optimizer, {"step": 2})

    resumed = SFTTrainer(tiny_policy(tokenizer, torch.float16), tokenizer, config)
    load_checkpoint(config.output_dir, config, resumed.policy, resumed.optimizer)
    assert resumed.optimizer.scaler.state_dict() == scaler.state_dict()
    for (p, m), (q, n) in zip(trainer.optimizer.pairs(), resumed.optimizer.pairs()):
        assert torch.equal(m, n) and torch.equal(p, q)
    for a, b in zip(trainer.optimizer.state.values(), resumed.optimizer.state.values()):
        assert all(torch.equal(a[k], b[k]) for k in ("exp_avg", "exp_avg_sq", "step"))
    trainer.step(EXAMPLES), resumed.step(EXAMPLES)  # and they go on alike
    assert all(torch.equal(m, n) for (_, m), (_, n) in zip(trainer.optimizer.pairs(), resumed.optimizer.pairs()))


def test_runs_saved_with_a_dtype_resume_with_its_precision(tmp_path):
    settings = tmp_path / "settings.json"
    for config_cls in (GRPOConfig, SFTConfig, EIConfig):
        for dtype, precision in (("bfloat16", "bf16"), ("float32", "fp32"), (None, None)):  # None: the device's
            assert typed_values(config_cls, {"dtype": dtype}, settings) == {"precision": precision}
    with pytest.raises(ValueError, match=r"settings.json: dtype 'float16' is not one of .*\(now precision\)"):
        typed_values(GRPOConfig, {"dtype": "float16"}, settings)  # no precision keeps float16 AdamW states


def test_tf32_is_a_setting_on_by_default_that_loading_applies_and_earlier_runs_resume_without(tiny_model_dir):
    from alignment.config.settings import as_saved
    from alignment.run.setup import load_policy

    assert GRPOConfig().tf32 and SFTConfig().tf32 and EIConfig().tf32
    for config_cls in (GRPOConfig, SFTConfig, EIConfig):  # a run saved before the setting computed in full float32
        assert as_saved(config_cls, {})["tf32"] is False and as_saved(config_cls, {"tf32": True})["tf32"] is True
    was = torch.backends.cuda.matmul.allow_tf32
    try:
        for tf32 in (True, False):
            load_policy(replace(GRPOConfig(), tf32=tf32, model=str(tiny_model_dir)), "cpu", torch.float32)
            assert torch.backends.cuda.matmul.allow_tf32 is tf32  # CUDA's switch; the CPU's matmuls are untouched
    finally:
        torch.backends.cuda.matmul.allow_tf32 = was


def test_a_checkpoint_without_a_master_starts_it_from_its_weights(tokenizer, tmp_path):
    """An earlier version's bf16 checkpoint (AdamW over the bfloat16 policy) resumed in bf16-mixed."""
    config = sft_settings(tmp_path, "bf16-mixed")
    old = tiny_policy(tokenizer, torch.bfloat16)
    optimizer = torch.optim.AdamW(old.parameters(), lr=1e-2)
    ids = torch.randint(0, 100, (2, 5))
    old(ids, labels=ids).loss.backward()
    optimizer.step()
    save_checkpoint(config.output_dir, config, old, tokenizer, optimizer, {"step": 1})
    trainer = SFTTrainer(tiny_policy(tokenizer, torch.bfloat16), tokenizer, config)
    load_checkpoint(config.output_dir, config, trainer.policy, trainer.optimizer)
    for (p, master), saved in zip(trainer.optimizer.pairs(), old.parameters()):
        assert torch.equal(p, saved) and torch.equal(master, saved.float())
    for mine, theirs in zip(trainer.optimizer.state.values(), optimizer.state.values()):
        assert mine["exp_avg"].dtype == torch.float32 and torch.equal(mine["exp_avg"], theirs["exp_avg"].float())


@pytest.mark.slow
def test_an_fp16_mixed_grpo_run_resumes_as_if_uninterrupted(tiny_model_dir, tmp_path):
    """The master weights, AdamW's states and the loss scaler go through a real run's checkpoint: a run killed in
    step 3 and resumed logs what an uninterrupted one logs, and ends with the same float16 policy."""
    from safetensors.torch import load_file

    from alignment.grpo_run import train_grpo
    from tests.test_grpo_loop import TASK as LOOP_TASK
    from tests.test_grpo_loop import CrashOnStep
    from tests.test_grpo_loop import tiny_config as loop_config

    straight = loop_config(
        tiny_model_dir, tmp_path / "a", n_grpo_steps=3, loss_type="grpo_clip", precision="fp16-mixed"
    )
    expected = train_grpo(straight, LOOP_TASK, LOOP_TASK)
    assert all(row["loss_scale"] == 2.0**16 for row in expected)
    interrupted = replace(straight, output_dir=tmp_path / "b" / "run")
    crashing = Task(LOOP_TASK.questions, LOOP_TASK.truths, LOOP_TASK.template, CrashOnStep())
    with pytest.raises(KeyboardInterrupt):
        train_grpo(interrupted, crashing, crashing)
    resumed = train_grpo(interrupted, LOOP_TASK, LOOP_TASK, resume=True)

    def strip(rows):
        return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in rows]

    assert strip(resumed) == strip([row for row in expected if row["grpo_step"] == 3])
    a = load_file(straight.output_dir / "policy" / "model.safetensors")
    b = load_file(interrupted.output_dir / "policy" / "model.safetensors")
    assert all(t.dtype == torch.float16 and torch.equal(t, b[k]) for k, t in a.items())


@pytest.mark.slow
def test_a_sharded_bf16_mixed_learner_keeps_float32_shards_and_updates_as_one_process(tiny_model_dir, tmp_path):
    """FSDP2's MixedPrecisionPolicy (float32 shards gathered in bfloat16) against the unsharded float32 master beside a
    bfloat16 policy: the same bfloat16 forward, the same float32 weights after a step at lr 1e-3."""
    import sys

    from safetensors.torch import load_file

    from tests.test_sharding import TORCHRUN, run

    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    plain = run([sys.executable, "-m", "tests.sharded_worker", "mixed", str(tiny_model_dir), str(one)])
    assert plain.returncode == 0, plain.stderr[-3000:]
    sharded = run([*TORCHRUN, "2", "-m", "tests.sharded_worker", "mixed", str(tiny_model_dir), str(two)])
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    assert json.loads((one / "bf16_mixed.json").read_text()) == {
        "kept": ["torch.bfloat16"],
        "computed": ["torch.bfloat16"],
    }
    assert json.loads((two / "bf16_mixed.json").read_text()) == {
        "kept": ["torch.float32"],
        "computed": ["torch.bfloat16"],
    }
    a, b = load_file(one / "bf16_mixed.safetensors"), load_file(two / "bf16_mixed.safetensors")
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert a.keys() == b.keys() and all(t.dtype == torch.float32 for t in [*a.values(), *b.values()])
    step = torch.cat([(a[k] - initial[k].to(torch.bfloat16).float()).abs().flatten() for k in a])  # from the master
    apart = torch.cat([(a[k] - b[k]).abs().flatten() for k in a])
    # two AdamW steps of up to 2e-3; bfloat16 gradients differ in their last bits between the two ways of computing
    # them (one process packs shared prompts, the sharded learner does not), which AdamW's normalization turns into
    # whole-step differences where a gradient is near 0 (measured: median 1.5e-6, 99th percentile 6.8e-5)
    assert step.mean() > 1e-3
    assert apart.mean() < 0.01 * step.mean() and (apart > 2e-4).float().mean() < 0.01


@pytest.mark.slow
def test_fp16_mixed_samples_with_a_float16_vllm_engine_that_gets_the_policys_weights(tokenizer, tmp_path):
    """vLLM's CPU build runs float16: the engine of an fp16-mixed run is built in float16 and each weight sync hands it
    the policy's float16 copy, so its log-probs stay those of the policy it samples for."""
    torch.manual_seed(0)
    model_dir = tmp_path / "tiny-llama-head-64"  # vLLM's CPU attention has no float16 kernel for head_dim 16
    shape = dict(hidden_size=128, intermediate_size=256, num_attention_heads=2, num_key_value_heads=1)
    LlamaForCausalLM(tiny_config("llama", len(tokenizer), tokenizer.pad_token_id, **shape)).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    from alignment.grpo.batch import collate
    from alignment.grpo.scoring import score
    from alignment.models.policy_folder import push_weights
    from alignment.run.setup import build_engine, load_policy

    config = GRPOConfig(
        model=str(model_dir),
        backend="vllm",
        precision="fp16-mixed",
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=1,
        sampling_max_tokens=12,
        learning_rate=1e-2,
        output_dir=tmp_path / "run",
    )
    policy, tokenizer = load_policy(config, "cpu", model_dtype(config, "cpu"))
    engine = build_engine(config, policy, tokenizer, "cpu", "cpu")
    assert engine.dtype == torch.float16 and engine.llm.llm_engine.model_config.dtype == torch.float16
    learner = GRPOLearner(config, policy, tokenizer, TASK)
    prompts = [TASK.template.format(question=q) for q in TASK.questions]

    def gap() -> float:
        rollouts = engine.generate(prompts, 2, rollout_sampling(config, 0))
        ones = torch.ones(len(rollouts))
        batch = collate(learner.prompt_ids, rollouts, ones, ones, tokenizer.pad_token_id)
        return (score(policy, batch, 4) - batch.rollout_log_probs)[batch.response_mask].abs().max().item()

    rollouts = engine.generate(prompts, 2, rollout_sampling(config, 0))
    before = gap()
    learner.update(learner.make_batch([0, 1], rollouts, [{"reward": float(i % 2)} for i in range(4)]))
    stale = gap()  # the engine still holds the weights before the step
    push_weights(engine, policy)
    assert max(before, gap()) < 0.05 < stale


def test_fp16_mixed_is_refused_for_a_sharded_learner():
    """Each process's loss scaler would see only its own shards' overflow (and skip steps the others take)."""
    from alignment.ray.config import RayGRPOConfig, validate_ray
    from alignment.run.setup import check_sharded

    with pytest.raises(ValueError, match="--precision fp16-mixed under torchrun: .* use --precision bf16-mixed"):
        check_sharded(GRPOConfig(precision="fp16-mixed", backend="hf"))
    check_sharded(GRPOConfig(precision="bf16-mixed", backend="hf"))  # FSDP2's MixedPrecisionPolicy
    ray = RayGRPOConfig(strategy="disaggregated-one-behind", learner_processes=2, precision="fp16-mixed")
    with pytest.raises(ValueError, match="--learner-processes 2 with --precision fp16-mixed"):
        validate_ray(ray)
    validate_ray(replace(ray, precision="bf16-mixed"))
