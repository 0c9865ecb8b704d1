"""Rows packed without padding (alignment/models/packed_rows.py) against the padded batch: the same log-probs,
entropies and gradients in float64 for transformers' Llama, Qwen2 and Qwen3 and for our TransformerLM, right- and
left-padded, with gradient checkpointing; and calls without packed rows unchanged."""

import copy

import pytest
import torch
import torch.nn.functional as F

import alignment.models.packed_rows as packed_rows
import alignment.models.transformer_lm as transformer_lm
from alignment.logprobs import get_response_log_probs, packs_rows
from alignment.models.packed_rows import NAME, Segments, pack_rows, segment_attention, use_packed_attention
from alignment.models.transformer_lm import TransformerConfig, TransformerLM
from tests.conftest import tiny_config

VOCAB = 97


def test_pack_rows_keeps_each_rows_run_with_positions_from_zero():
    ids = torch.arange(12).view(3, 4)
    keep = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [0, 1, 1, 1]], dtype=torch.bool)
    packed = pack_rows(ids, keep)
    assert packed.ids.tolist() == [[0, 1, 2, 9, 10, 11]]
    assert packed.positions.tolist() == [[0, 1, 2, 0, 1, 2]]
    assert packed.segments.bounds == (0, 3, 6) and packed.segments.cu_seqlens.dtype == torch.int32
    assert packed.at.tolist() == [[0, 1, 2, -1], [-1, -1, -1, -1], [-1, 3, 4, 5]]
    assert pack_rows(ids, torch.zeros_like(keep)) is None  # nothing to run
    assert pack_rows(ids, torch.tensor([[1, 0, 1, 0]] * 3, dtype=torch.bool)) is None  # a row with a hole


def test_segment_attention_is_causal_attention_within_each_row():
    torch.manual_seed(0)
    q = torch.randn(1, 4, 9, 8, dtype=torch.float64)
    k, v = torch.randn(1, 2, 9, 8, dtype=torch.float64), torch.randn(1, 2, 9, 8, dtype=torch.float64)
    segments = Segments((0, 4, 9), torch.tensor([0, 4, 9], dtype=torch.int32))
    row = torch.tensor([0] * 4 + [1] * 5)
    mask = (row[:, None] == row[None, :]) & torch.ones(9, 9, dtype=torch.bool).tril()
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=True)
    torch.testing.assert_close(segment_attention(q, k, v, segments, 0.3), expected, rtol=0, atol=1e-12)


def batch(left_padded: bool) -> dict[str, torch.Tensor]:
    """Three rows of different lengths (one of them whole) and their response masks, padded on one side."""
    torch.manual_seed(1)
    lengths, prompts, seq = [14, 9, 6], [5, 3, 2], 14
    ids = torch.zeros(3, seq, dtype=torch.long)
    real = torch.zeros(3, seq, dtype=torch.bool)
    response = torch.zeros(3, seq, dtype=torch.bool)
    for i, (n, p) in enumerate(zip(lengths, prompts)):
        at = slice(seq - n, seq) if left_padded else slice(0, n)
        ids[i, at] = torch.randint(1, VOCAB, (n,))
        real[i, at] = True
        start = at.start
        response[i, start + p - 1 : start + n - 1] = True  # positions predicting the response tokens
    labels = torch.roll(ids, -1, dims=1)
    return {"input_ids": ids, "labels": labels, "response_mask": response, "attention_mask": real}


def padded_reference(model, b: dict[str, torch.Tensor], left_padded: bool) -> tuple[torch.Tensor, ...]:
    """Log-probs and entropies of the response positions from the padded batch's whole logits.

    Left-padded, each row's positions count from its first real token, as packed rows' do and as our TransformerLM
    counts them by default: transformers computes rotary angles in float32, so positions shifted by the padding
    would round them otherwise (by about 1e-8 here)."""
    if not left_padded:
        out = model(b["input_ids"])
    elif isinstance(model, TransformerLM):
        out = model(b["input_ids"], attention_mask=b["attention_mask"])
    else:
        positions = (b["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
        out = model(b["input_ids"], attention_mask=b["attention_mask"], position_ids=positions)
    logits = out if isinstance(out, torch.Tensor) else out.logits
    log_softmax = torch.log_softmax(logits, dim=-1)
    log_probs = log_softmax.gather(-1, b["labels"][..., None]).squeeze(-1)[b["response_mask"]]
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)[b["response_mask"]]
    return log_probs, entropy.detach()


def models() -> list[tuple[str, torch.nn.Module]]:
    from transformers import LlamaForCausalLM, Olmo2ForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM

    torch.manual_seed(2)
    out = []
    kinds = (("llama", LlamaForCausalLM), ("qwen2", Qwen2ForCausalLM), ("qwen3", Qwen3ForCausalLM))
    for kind, cls in (*kinds, ("olmo2", Olmo2ForCausalLM)):
        model = cls(tiny_config(kind, VOCAB, 0)).double()
        assert use_packed_attention(model) and model.config._attn_implementation == NAME
        out.append((kind, model))
    lm = TransformerLM(TransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64))
    return out + [("transformer_lm", lm.double())]


@pytest.mark.parametrize("left_padded", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["", "checkpointed"])
def test_packed_rows_give_the_padded_log_probs_entropy_and_gradients_in_float64(
    left_padded, checkpointing, monkeypatch
):
    packed_calls = []

    def counted(*args, **kwargs):
        packed_calls.append(1)
        return segment_attention(*args, **kwargs)

    monkeypatch.setattr(packed_rows, "segment_attention", counted)
    monkeypatch.setattr(transformer_lm, "segment_attention", counted)
    b = batch(left_padded)
    upstream = torch.randn(int(b["response_mask"].sum()), dtype=torch.float64)
    for kind, model in models():
        if checkpointing and kind == "transformer_lm":
            continue  # our TransformerLM has no gradient checkpointing
        model.train()
        if checkpointing:
            model.gradient_checkpointing_enable()
        expected, expected_entropy = padded_reference(model, b, left_padded)
        (expected * upstream).sum().backward()
        reference = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad()
        packed_calls.clear()
        out = get_response_log_probs(
            model,
            b["input_ids"],
            b["labels"],
            return_token_entropy=True,
            attention_mask=b["attention_mask"] if left_padded else None,
            response_mask=b["response_mask"],
        )
        assert packed_calls, kind  # the rows did run packed
        assert out["log_probs"].dtype == torch.float64
        torch.testing.assert_close(out["log_probs"][b["response_mask"]], expected, rtol=0, atol=1e-9, msg=kind)
        torch.testing.assert_close(out["token_entropy"][b["response_mask"]], expected_entropy, rtol=0, atol=1e-9)
        assert (out["log_probs"][~b["response_mask"]] == 0).all()
        (out["log_probs"][b["response_mask"]] * upstream).sum().backward()
        for name, p in model.named_parameters():
            torch.testing.assert_close(p.grad, reference[name], rtol=0, atol=1e-9, msg=f"{kind} {name}")


def test_every_position_scored_without_a_response_mask_packs_whole_rows():
    _, model = models()[1]
    b = batch(left_padded=False)
    out = get_response_log_probs(model, b["input_ids"], b["labels"], return_token_entropy=True)
    log_softmax = torch.log_softmax(model(b["input_ids"]).logits, dim=-1)
    torch.testing.assert_close(
        out["log_probs"], log_softmax.gather(-1, b["labels"][..., None]).squeeze(-1), rtol=0, atol=1e-9
    )


def test_calls_without_packed_rows_compute_as_sdpa(tiny_model):
    plain, switched = copy.deepcopy(tiny_model), copy.deepcopy(tiny_model)
    assert use_packed_attention(switched) and packs_rows(switched) and not packs_rows(plain)
    ids = torch.randint(0, 1000, (2, 7))
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7])  # left padding: a prepared mask reaches attention
    torch.testing.assert_close(switched(ids, attention_mask=mask).logits, plain(ids, attention_mask=mask).logits)


def test_sliding_windows_and_other_attention_are_not_switched():
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    windowed = Qwen2ForCausalLM(tiny_config("qwen2", VOCAB, 0, use_sliding_window=True, sliding_window=4))
    eager = LlamaForCausalLM(tiny_config("llama", VOCAB, 0, attn_implementation="eager"))
    assert not use_packed_attention(windowed) and not use_packed_attention(eager)
    assert not packs_rows(windowed) and not packs_rows(eager)


def test_padding_a_response_mask_marks_is_not_scored():
    """A response mask that also marks padding scores the real positions alone: padding holds 0, as everywhere
    outside the mask, on the packed path and the padded one (the forward tape's) alike."""
    b = batch(left_padded=True)
    sloppy = b["response_mask"] | ~b["attention_mask"]  # every padding position marked too
    _, model = models()[0]
    common = dict(return_token_entropy=True, attention_mask=b["attention_mask"])
    exact = get_response_log_probs(model, b["input_ids"], b["labels"], response_mask=b["response_mask"], **common)
    out = get_response_log_probs(model, b["input_ids"], b["labels"], response_mask=sloppy, **common)
    for key in ("log_probs", "token_entropy"):
        torch.testing.assert_close(out[key], exact[key], rtol=0, atol=0)
    assert (out["log_probs"][~b["attention_mask"]] == 0).all()
