"""The learner's forward replayed from the sampler's recording must give what recomputing it gives."""

import copy
import itertools
import math
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

import alignment.grpo.shared_prompt as shared_prompt
from alignment.grpo.batch import collate
from alignment.grpo.config import GRPOConfig
from alignment.grpo.learner import rollout_forward_tape
from alignment.grpo_run import train_grpo
from alignment.logprobs import output_head
from alignment.models.transformer_lm import TransformerLM, config_from_llama, from_llama_state_dict
from alignment.rollout.forward_tape import ForwardTape, has_dropout
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_engine import TransformerLMRolloutEngine
from alignment.run.setup import build_engine, load_policy
from tests.test_grpo_loop import TASK, grpo_parts, tiny_config

# the last holds the padding token (<|im_end|>, also the embedding's padding_idx), which gets no gradient
PROMPTS = ["Name a river.", "What is two plus two? Answer briefly, please.", "Hi there<|im_end|> and more"]
# about 6% of a random tiny model's next-token mass: rows end at different steps, and some mid-batch
EOS = list(range(1000, 4000))


ARCHITECTURES, KINDS = ("llama", "qwen2"), ("transformers", "transformer_lm", "transformer_lm_untied")


def policy_cases(*axes: dict, default=lambda architecture, kind, *names: True) -> list:
    """Parameters (tiny_model's architecture, the policy's kind, a value of each of `axes`, a dict id -> value) for
    `tiny_model` and `policy` indirect, with the ids the fixtures' own parameters gave. Under -m slow: the cases
    `default` leaves out (it takes the architecture, the kind and the axes' ids), and the repeats: a TransformerLM holds
    the tiny Llama's weights whatever tiny_model's architecture, so its Qwen2 cases repeat its Llama ones."""
    cases = []
    for architecture, kind in itertools.product(ARCHITECTURES, KINDS):
        for names in itertools.product(*axes):
            kept = default(architecture, kind, *names) and (architecture == "llama" or kind == "transformers")
            values = [axis[name] for axis, name in zip(axes, names)]
            ids = "-".join([architecture, kind, *names])
            cases.append(pytest.param(architecture, kind, *values, id=ids, marks=() if kept else pytest.mark.slow))
    return cases


@pytest.fixture
def policy(request, tiny_model, tiny_model_dir):
    """A tiny transformers model (Llama or Qwen2; tied embeddings), or a tiny Llama's weights in our own
    TransformerLM, with the LM head tied to the embedding or a copy of it."""
    if request.param == "transformers":
        return copy.deepcopy(tiny_model)
    llama = LlamaForCausalLM.from_pretrained(tiny_model_dir)
    config = replace(config_from_llama(llama.config), tie_embeddings=request.param == "transformer_lm")
    state = {k: v.clone() for k, v in llama.state_dict().items()}
    return from_llama_state_dict(config, state)


def engine_for(policy, tokenizer, one_group_per_batch: bool):
    budget = 1 if one_group_per_batch else None  # 1 byte: every prompt's group in a batch of its own
    if isinstance(policy, TransformerLM):
        return TransformerLMRolloutEngine(policy, tokenizer, budget, progress=False, eos_ids=EOS)
    engine = HFRolloutEngine(policy, tokenizer, budget, progress=False)
    engine.eos_ids = torch.tensor(EOS)
    return engine


def recorded(policy, tokenizer, group_size: int, one_group_per_batch: bool = False):
    """A tape of one rollout batch, and that batch as training rows."""
    engine, tape = engine_for(policy, tokenizer, one_group_per_batch), ForwardTape(policy, output_head(policy))
    policy.eval()
    with tape.recording(engine):
        rollouts = engine.generate(
            PROMPTS, group_size, SamplingConfig(temperature=1.0, max_tokens=10, min_tokens=1, seed=0)
        )
    assert engine.tape is None  # recording only inside the context
    n = len(rollouts)
    prompt_ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    return tape, collate(prompt_ids, rollouts, torch.zeros(n), torch.zeros(n), tokenizer.pad_token_id)


def scored(model, batch, tape=None):
    model.train().zero_grad(set_to_none=True)
    slots = None if tape is None else tape.row_slots(batch.input_ids, batch.response_mask)
    out = shared_prompt.shared_prompt_log_probs(
        model, batch.input_ids, batch.labels, batch.response_mask, return_token_entropy=True, tape=tape, slots=slots
    )
    weights = torch.linspace(-1, 1, batch.labels.numel()).view_as(batch.labels)  # every token weighed differently
    (out["log_probs"] * weights).sum().backward()
    return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


# by default the Llama in each kind, every layout in one batch and the packed layout in a batch per group as well, and
# the Qwen2 transformers model packed either way; the other layouts and groupings under -m slow
@pytest.mark.parametrize(
    "tiny_model,policy,one_group_per_batch,layout",
    policy_cases(
        {"one_batch": False, "batch_per_group": True},
        {"packed": "packed", "cached": "cached", "full_rows": "full_rows"},
        default=lambda architecture, kind, grouping, layout: (
            layout == "packed" or (architecture == "llama" and grouping == "one_batch")
        ),
    ),
    indirect=["tiny_model", "policy"],
)
def test_replayed_forward_gives_recomputed_log_probs_and_gradients(
    policy, tokenizer, layout, one_group_per_batch, monkeypatch
):
    monkeypatch.setattr(shared_prompt, "packing_pays", lambda *args: layout == "packed")
    if layout == "full_rows":
        monkeypatch.setattr(shared_prompt, "can_share_prompts", lambda *args: False)
    tape, batch = recorded(policy, tokenizer, 3, one_group_per_batch)
    lengths = batch.response_mask.sum(dim=1)
    assert lengths.min() < lengths.max()  # rows left the batch at different steps

    replayed, replayed_grads = scored(policy, batch, tape)
    recomputed, grads = scored(policy, batch)
    mask = batch.response_mask
    assert torch.allclose(replayed["log_probs"][mask], recomputed["log_probs"][mask], atol=1e-5)
    assert torch.allclose(replayed["token_entropy"][mask], recomputed["token_entropy"][mask], atol=1e-5)
    assert replayed_grads.keys() == grads.keys()
    for name, grad in grads.items():
        assert (replayed_grads[name] - grad).norm() <= 1e-4 * grad.norm() + 1e-6, name


@pytest.mark.parametrize("tiny_model,policy", policy_cases(), indirect=True)
def test_gradients_accumulate_over_microbatches_as_recomputed(policy, tokenizer):
    """The replayed weight gradients are added into .grad in place: two microbatches sum as autograd sums them."""
    tape, batch = recorded(policy, tokenizer, 3)
    slots = tape.row_slots(batch.input_ids, batch.response_mask)
    halves = (torch.arange(0, 4), torch.arange(4, 9))  # a group split across the two: either way is exact

    def accumulated(replay: bool) -> dict[str, torch.Tensor]:
        policy.train().zero_grad(set_to_none=True)
        for rows in halves:
            part = batch.select(rows)
            part_slots = slots[rows][:, : part.input_ids.shape[1]] if replay else None
            out = shared_prompt.shared_prompt_log_probs(
                policy, part.input_ids, part.labels, part.response_mask, tape=tape if replay else None, slots=part_slots
            )
            (out["log_probs"] * torch.linspace(-1, 1, part.labels.numel()).view_as(part.labels)).sum().backward()
        return {name: p.grad.clone() for name, p in policy.named_parameters()}

    replayed, recomputed = accumulated(True), accumulated(False)
    for name, grad in recomputed.items():
        assert (replayed[name] - grad).norm() <= 1e-4 * grad.norm() + 1e-6, name


@pytest.mark.parametrize("tiny_model,policy", policy_cases(), indirect=True)
def test_replay_reads_the_recording(policy, tokenizer):
    """With every recorded output zeroed, the logits are zero: each token's log-prob is -log(vocab)."""
    tape, batch = recorded(policy, tokenizer, 2)
    for store in tape.stores.values():
        store.zero_()
    out, _ = scored(policy, batch, tape)
    vocab = output_head(policy).out_features
    expected = torch.full_like(out["log_probs"][batch.response_mask], -torch.log(torch.tensor(float(vocab))))
    assert torch.allclose(out["log_probs"][batch.response_mask], expected)


def test_replay_refuses_changed_weights_and_other_rows(tiny_model, tokenizer):
    model = copy.deepcopy(tiny_model)
    tape, batch = recorded(model, tokenizer, 2)
    with pytest.raises(ValueError, match="has 5 rows, the tape recorded 6"):
        tape.row_slots(batch.input_ids[:5], batch.response_mask[:5])
    shifted = [torch.nn.functional.pad(t, (1, 0)) for t in (batch.input_ids, batch.response_mask)]  # prompts 1 longer
    with pytest.raises(ValueError, match="not those the tape recorded"):
        tape.row_slots(*shifted)
    edited = batch.input_ids.clone()
    edited[0, 0] += 1  # a prompt token other than the one the sampler fed
    with pytest.raises(ValueError, match="not those the sampler fed"):
        tape.row_slots(edited, batch.response_mask)
    slots = tape.row_slots(batch.input_ids, batch.response_mask)
    with torch.no_grad():
        next(model.parameters()).add_(1e-3)  # as an optimizer step does, in place
    with pytest.raises(RuntimeError, match="policy changed since its rollout was recorded"):
        scored(model, batch, tape)
    with pytest.raises(RuntimeError, match="nothing was recorded"):
        with ForwardTape(model, output_head(model)).replaying(slots):
            pass


def test_tape_only_where_replay_is_exact(tiny_model, tokenizer):
    model = copy.deepcopy(tiny_model)
    engine = HFRolloutEngine(model, tokenizer, progress=False)
    base = GRPOConfig(
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=8,
        reuse_rollout_forward="auto",
    )
    assert rollout_forward_tape(base, model, engine, 20) is not None
    off_policy = replace(base, train_batch_size=2)
    elsewhere = HFRolloutEngine(copy.deepcopy(tiny_model), tokenizer, progress=False)  # a copy of the policy
    huge = replace(base, rollout_batch_size=2**20, train_batch_size=2**20, sampling_max_tokens=2**20)
    for config, eng, needs in [
        (off_policy, engine, "one optimizer step per rollout batch"),
        (replace(base, gradient_checkpointing=True), engine, "no --gradient-checkpointing"),
        (base, elsewhere, "samples the policy itself"),
        (base, None, "samples the policy itself"),
        (huge, engine, "GiB for the tape, at most a quarter of memory"),
    ]:
        assert rollout_forward_tape(config, model, eng, 20) is None  # auto: quietly off
        with pytest.raises(ValueError, match=f"--reuse-rollout-forward on needs .*{needs}"):
            rollout_forward_tape(replace(config, reuse_rollout_forward="on"), model, eng, 20)
    assert rollout_forward_tape(replace(base, reuse_rollout_forward="off"), model, engine, 20) is None
    assert not has_dropout(model)
    model.config.attention_dropout = 0.1
    assert has_dropout(model) and rollout_forward_tape(base, model, engine, 20) is None


def test_rollouts_changed_after_sampling_are_recomputed(tiny_model_dir, tmp_path):
    """The trainer replays only the rollouts the sampler recorded; edited ones train on a recomputed forward."""
    config = tiny_config(tiny_model_dir, tmp_path, loss_type="grpo_clip", reuse_rollout_forward="on")
    policy, tokenizer = load_policy(config, "cpu", torch.float32)
    sampler, learner = grpo_parts(config, policy, tokenizer, build_engine(config, policy, tokenizer, "cpu", "cpu"))
    questions = [0, 1]
    rollouts = sampler.generate(questions, learner.step)
    assert learner.make_batch(questions, rollouts, sampler.grade(questions, rollouts)).slots is not None
    rollouts[0] = replace(rollouts[0], token_ids=rollouts[0].token_ids[:1], logprobs=rollouts[0].logprobs[:1])
    rollouts[1] = replace(rollouts[1], token_ids=[rollouts[1].token_ids[0] + 1, *rollouts[1].token_ids[1:]])
    batch = learner.make_batch(questions, rollouts, sampler.grade(questions, rollouts))
    assert batch.slots is None  # the second row's first token is not the one sampled
    [row] = learner.update(batch)
    assert math.isfinite(row["loss"]) and row["grad_norm"] > 0


def test_grpo_steps_on_the_tape_match_recomputing(tiny_model_dir, tmp_path):
    """Two GRPO steps (grpo_clip, on-policy) make the same updates whether the learner replays or recomputes."""
    initial = load_file(tiny_model_dir / "model.safetensors")
    states, rows = {}, {}
    for reuse in ("on", "off"):
        config = tiny_config(
            tiny_model_dir,
            tmp_path / reuse,
            n_grpo_steps=2,
            loss_type="grpo_clip",
            reuse_rollout_forward=reuse,
            kl_prev=True,
        )
        rows[reuse] = train_grpo(config, TASK, TASK)
        states[reuse] = load_file(config.output_dir / "policy" / "model.safetensors")
    for a, b in zip(rows["on"], rows["off"]):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-5) and a["grad_norm"] == pytest.approx(
            b["grad_norm"], rel=1e-4
        )
        assert a["token_entropy"] == pytest.approx(b["token_entropy"], rel=1e-6)
        assert a["kl_prev_k3"] == pytest.approx(b["kl_prev_k3"], rel=1e-3, abs=1e-9)
    for name, off in states["off"].items():
        # Adam turns rounding in a near-zero gradient entry into up to a learning rate's step, so compare the
        # updates: the same to a hundred-thousandth on average, and nowhere off by a hundredth of the lr (1e-3)
        update, difference = (off - initial[name]).abs(), (states["on"][name] - off).abs()
        assert difference.mean() <= 1e-5 * update.mean() and difference.max() <= 1e-5, name
