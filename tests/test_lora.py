"""LoRA (alignment/models/lora.py) on a tiny model: adapters only in the optimizer and the checkpoint, the KL reference
is the base model without a second copy, the forward tape replays peft's layers exactly, and a GRPO run through the
real command line resumes to the same end and leaves policy/ (merged, for eval_zero_shot) and policy/adapter/
(loaded by peft.PeftModel.from_pretrained)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from alignment.data.task import Task
from alignment.grpo.batch import collate
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.shared_prompt import shared_prompt_log_probs
from alignment.grpo_run import train_grpo
from alignment.logprobs import output_head
from alignment.models.loading import load_model_and_tokenizer
from alignment.models.lora import LoRASettings, merged_state_dict, reference_model, trainable_parameters
from alignment.models.policy_folder import load_policy_weights, save_policy
from alignment.rollout.forward_tape import ForwardTape, has_dropout
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from scripts import eval_zero_shot

runner = CliRunner()
LORA = LoRASettings(lora_rank=4, lora_alpha=8.0)


def lora_model(model_dir: Path, settings: LoRASettings = LORA) -> torch.nn.Module:
    torch.manual_seed(0)
    model, _ = load_model_and_tokenizer(str(model_dir), lora=settings)
    with torch.no_grad():  # B starts at 0 (the adapted model is the base one); give the adapters something to add
        for p in trainable_parameters(model):
            p.normal_(std=0.05)
    return model


def test_only_adapters_train_and_the_merged_weights_compute_the_same(tiny_model_dir):
    model = lora_model(tiny_model_dir)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names)
    # every linear projection of the decoder layers, not the head
    assert len(names) == 2 * 7 * model.config.num_hidden_layers and not any("lm_head" in n for n in names)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    merged = merged_state_dict(model)
    assert merged.keys() == plain.state_dict().keys()
    plain.load_state_dict(merged)
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(plain(ids).logits, model(ids).logits, atol=1e-5, rtol=1e-5)


def test_the_kl_reference_is_the_base_model_sharing_its_weights(tiny_model_dir):
    model = lora_model(tiny_model_dir)
    reference = reference_model(model)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(reference(ids).logits, base(ids).logits)
        assert (reference(ids).logits - model(ids).logits).abs().max() > 1e-3  # the policy's adapters are on
    frozen = {p.data_ptr() for p in model.parameters() if not p.requires_grad}
    assert frozen <= {p.data_ptr() for p in reference.parameters()}  # no second copy of the base weights


def test_the_forward_tape_replays_lora_layers_with_the_same_gradient(tiny_model_dir, tokenizer):
    model = lora_model(tiny_model_dir)
    assert not has_dropout(model) and has_dropout(lora_model(tiny_model_dir, replace(LORA, lora_dropout=0.1)))
    tape = ForwardTape(model, output_head(model))
    engine = HFRolloutEngine(model, tokenizer, progress=False)
    prompts = ["Write about a river.", "Name a lamp"]
    with tape.recording(engine):
        rollouts = engine.generate(prompts, 2, SamplingConfig(max_tokens=5, min_tokens=5, seed=0))
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    batch = collate(prompt_ids, rollouts, torch.ones(4), torch.ones(4), tokenizer.pad_token_id)
    slots = tape.row_slots(batch.input_ids, batch.response_mask)
    grads = []
    for use_tape in (False, True):
        model.zero_grad(set_to_none=True)
        out = shared_prompt_log_probs(
            model,
            batch.input_ids,
            batch.labels,
            batch.response_mask,
            tape=tape if use_tape else None,
            slots=slots if use_tape else None,
        )
        (out["log_probs"] * batch.response_mask).sum().backward()
        grads.append([p.grad.clone() for p in trainable_parameters(model)])
    for recomputed, replayed in zip(*grads):
        torch.testing.assert_close(replayed, recomputed, atol=1e-4, rtol=1e-3)


def test_the_checkpoint_holds_the_adapter_in_peft_format(tiny_model_dir, tokenizer, tmp_path):
    from peft import PeftModel

    model = lora_model(tiny_model_dir)
    save_policy(model, tokenizer, tmp_path / "adapter")
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert len(saved) == len(trainable_parameters(model))  # the adapter only, no base weight
    other = lora_model(tiny_model_dir, replace(LORA, lora_alpha=8.0))
    with torch.no_grad():
        for p in trainable_parameters(other):
            p.zero_()
    load_policy_weights(other, tmp_path / "adapter")
    assert all(torch.equal(a, b) for a, b in zip(trainable_parameters(model), trainable_parameters(other)))
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "adapter")
    ids = torch.randint(0, model.config.vocab_size, (1, 7))
    with torch.no_grad():
        torch.testing.assert_close(peft_model(ids).logits, model(ids).logits)
    with pytest.raises(ValueError, match="does not fit the policy's LoRA settings"):
        load_policy_weights(lora_model(tiny_model_dir, replace(LORA, lora_rank=2)), tmp_path / "adapter")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"lora_rank": -1}, "--lora-rank"),
        ({"lora_rank": 4, "lora_alpha": 0.0}, "--lora-alpha"),
        ({"lora_rank": 4, "lora_dropout": 1.0}, "--lora-dropout"),
        ({"lora_rank": 4, "lora_target_modules": []}, "--lora-target-modules"),
        ({"lora_rank": 4, "backend": "transformer_lm"}, "not available with --backend transformer_lm"),
    ],
)
def test_bad_lora_settings_are_refused_naming_the_flag(change, message):
    with pytest.raises(ValueError, match=message):
        validate(GRPOConfig(**change))


def rows(run: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("time_")} for row in lines]


def even_length(response: str, truth: str) -> dict[str, float]:
    """A reward a random tiny model earns about half the time, so that advantages (and updates) are not all 0."""
    return {"reward": float(len(response) % 2 == 0)}


@pytest.fixture(scope="module")
def lora_runs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """A 2-step LoRA GRPO run, and one stopped after step 1 and resumed (KL monitors on: the reference is the base)."""
    root = tmp_path_factory.mktemp("lora")
    task = Task(
        [f"Say something about {w}." for w in ("apples", "rivers", "stones", "clouds")],
        [""] * 4,
        "{question}",
        even_length,
    )
    config = GRPOConfig(
        model=str(tiny_model_dir),
        n_eval_examples=2,
        learning_rate=1e-2,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        loss_type="grpo_clip",
        eval_every=1,
        checkpoint_every=1,
        grader_workers=1,
        backend="hf",
        kl_reference=True,
        kl_prev=True,
        lora_rank=4,
        lora_alpha=8.0,
        n_grpo_steps=2,
        output_dir=root / "straight",
    )
    train_grpo(config, task, task)
    stopped = replace(config, output_dir=root / "stopped")
    train_grpo(replace(stopped, n_grpo_steps=1), task, task)
    train_grpo(stopped, task, task, resume=True)
    return {"straight": config.output_dir, "resumed": stopped.output_dir}


def test_a_lora_run_resumes_to_the_same_metrics_and_adapter(lora_runs):
    straight, resumed = lora_runs["straight"], lora_runs["resumed"]
    assert rows(resumed) == rows(straight)
    trained = [r for r in rows(straight) if "loss" in r]
    assert len(trained) == 2 and trained[0]["kl_ref_k3"] == 0  # before the first update, policy = base model
    assert trained[1]["grad_norm"] > 0 and trained[1]["kl_prev_k3"] > 0  # the adapters' update moved it
    a, b = (load_file(run / "checkpoint" / "policy" / "adapter_model.safetensors") for run in (straight, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    optimizer = load_file(straight / "checkpoint" / "optimizer.safetensors")
    assert len({key.split(".")[0] for key in optimizer if key != "rng.torch"}) == len(a)  # AdamW states: adapters only


def test_the_lora_run_leaves_a_merged_policy_and_its_peft_adapter(lora_runs, tiny_model_dir, tmp_path, tokenizer):
    from peft import PeftModel

    policy = lora_runs["straight"] / "policy"
    merged = AutoModelForCausalLM.from_pretrained(policy)
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), policy / "adapter")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    ids = torch.randint(0, merged.config.vocab_size, (1, 7))
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, adapted(ids).logits, atol=1e-5, rtol=1e-5)
        assert (merged(ids).logits - base(ids).logits).abs().max() > 1e-4  # training changed it
    data = tmp_path / "problems.jsonl"
    data.write_text(json.dumps({"question": "What is 1 + 1?", "answer": "#### 2"}) + "\n")
    out = tmp_path / "eval"
    result = runner.invoke(
        eval_zero_shot.app,
        [
            "--model",
            str(policy),
            "--dataset",
            str(data),
            "--backend",
            "hf",
            "--max-tokens",
            "4",
            "--prompt",
            "question_only",
            "--output-dir",
            str(out),
            "--grader-workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["num_examples"] == 1
