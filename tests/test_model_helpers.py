"""tokenize_prompt_and_output, compute_entropy, label_log_probs_and_entropy and get_response_log_probs on SmolLM2's
tokenizer."""

import numpy as np
import pytest
import torch

from alignment.logprobs import compute_entropy, label_log_probs_and_entropy, log_probs_of_labels
from tests.adapters import run_compute_entropy, run_get_response_log_probs, run_tokenize_prompt_and_output

PROMPTS = ["What is 2 + 3?", "Name a colour.", "Solve x^2 = 4 for x > 0. Show your work."]
OUTPUTS = [" 5", " Blue, like the sky on a clear summer afternoon.", " x = 2"]


def test_tokenize_prompt_and_output_layout(tokenizer):
    batch = run_tokenize_prompt_and_output(PROMPTS, OUTPUTS, tokenizer)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["response_mask"]
    prompt_ids = [tokenizer(p)["input_ids"] for p in PROMPTS]
    output_ids = [tokenizer(o, add_special_tokens=False)["input_ids"] for o in OUTPUTS]
    longest = max(len(p) + len(o) for p, o in zip(prompt_ids, output_ids))
    assert ids.shape == labels.shape == mask.shape == (3, longest - 1)
    for i, (p, o) in enumerate(zip(prompt_ids, output_ids)):
        full = p + o + [tokenizer.pad_token_id] * (longest - len(p) - len(o))
        assert ids[i].tolist() == full[:-1]
        assert labels[i].tolist() == full[1:]
        # the mask marks exactly the output tokens among the labels
        expected_mask = [False] * (len(p) - 1) + [True] * len(o) + [False] * (longest - len(p) - len(o))
        assert mask[i].tolist() == expected_mask
        assert tokenizer.decode(labels[i][mask[i]]) == OUTPUTS[i]


def test_tokenize_rejects_mismatched_lengths(tokenizer):
    with pytest.raises(ValueError, match="2 prompts but 1 outputs"):
        run_tokenize_prompt_and_output(PROMPTS[:2], OUTPUTS[:1], tokenizer)


def test_entropy_matches_numpy_and_is_stable():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 50) * 3
    z = logits.double().numpy()
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(run_compute_entropy(logits).numpy(), -(p * np.log(p)).sum(-1), atol=1e-5)
    huge = torch.tensor([[1e4, 1e4, -1e4], [5e3, 0.0, 0.0]])
    out = run_compute_entropy(huge)
    assert torch.isfinite(out).all()
    assert out[0].item() == pytest.approx(np.log(2), abs=1e-5)
    assert out[1].item() == pytest.approx(0.0, abs=1e-5)
    masked_vocab = torch.tensor([[0.0, 0.0, float("-inf")]])
    assert run_compute_entropy(masked_vocab).item() == pytest.approx(np.log(2), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_log_probs_and_entropy_match_separate_passes(dtype):
    torch.manual_seed(0)
    logits = (torch.randn(6, 300) * 4).to(dtype)
    logits[0, :3] = torch.tensor([1e4, 1e4, -1e4]).to(dtype)  # huge logits: no overflow, no cancellation
    logits[1, 5:] = float("-inf")  # a masked vocabulary: p = 0 adds nothing, not NaN
    labels = torch.tensor([0, 2, 7, 299, 150, 42])
    upstream = torch.randn(6)
    fused_in = logits.clone().requires_grad_()
    log_probs, entropy = label_log_probs_and_entropy(fused_in, labels)
    assert log_probs.dtype == entropy.dtype == torch.float32 and not entropy.requires_grad
    exact_in = logits.double().requires_grad_()
    exact = torch.log_softmax(exact_in, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    # row 0 comes out closer to the float64 value than log_probs_of_labels' logsumexp (off by 3e-4 there)
    torch.testing.assert_close(log_probs.double(), exact, rtol=0, atol=1e-5)
    torch.testing.assert_close(log_probs_of_labels(logits, labels)[1:], log_probs[1:], rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, compute_entropy(logits.float()), rtol=0, atol=1e-5)
    assert entropy[0].item() == pytest.approx(np.log(2), abs=1e-5)
    (log_probs * upstream).sum().backward()
    (exact * upstream.double()).sum().backward()
    assert fused_in.grad.dtype == dtype and torch.isfinite(fused_in.grad).all()
    torch.testing.assert_close(
        fused_in.grad.double(), exact_in.grad, rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-2
    )


def test_fused_log_probs_gradcheck():
    logits = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    labels = torch.tensor([0, 6, 3])
    assert torch.autograd.gradcheck(lambda z: label_log_probs_and_entropy(z, labels)[0], (logits,))


def test_response_log_probs_match_log_softmax(tiny_model, tokenizer):
    batch = run_tokenize_prompt_and_output(PROMPTS, OUTPUTS, tokenizer)
    out = run_get_response_log_probs(tiny_model, batch["input_ids"], batch["labels"], True)
    with torch.no_grad():
        logits = tiny_model(batch["input_ids"]).logits.double()
    log_softmax = torch.log_softmax(logits, dim=-1)
    expected = log_softmax.gather(-1, batch["labels"].unsqueeze(-1)).squeeze(-1)
    np.testing.assert_allclose(out["log_probs"].detach().numpy(), expected.numpy(), atol=1e-5)
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    np.testing.assert_allclose(out["token_entropy"].numpy(), entropy.numpy(), atol=1e-4)
    assert out["log_probs"].requires_grad  # the policy's log-probs feed the loss
    no_entropy = run_get_response_log_probs(tiny_model, batch["input_ids"], batch["labels"], False)
    assert set(no_entropy) == {"log_probs"}


def test_right_padding_does_not_change_log_probs(tiny_model, tokenizer):
    batch = run_tokenize_prompt_and_output(PROMPTS, OUTPUTS, tokenizer)
    padded = run_get_response_log_probs(tiny_model, batch["input_ids"], batch["labels"], False)["log_probs"]
    for i in range(len(PROMPTS)):
        alone = run_tokenize_prompt_and_output(PROMPTS[i : i + 1], OUTPUTS[i : i + 1], tokenizer)
        single = run_get_response_log_probs(tiny_model, alone["input_ids"], alone["labels"], False)["log_probs"]
        n = single.shape[1]
        np.testing.assert_allclose(padded[i, :n].detach().numpy(), single[0].detach().numpy(), atol=1e-5)


def test_response_only_head_matches_full_scoring_on_response_tokens(tiny_model, tokenizer):
    batch = run_tokenize_prompt_and_output(PROMPTS, OUTPUTS, tokenizer)
    mask = batch["response_mask"]
    full = run_get_response_log_probs(tiny_model, batch["input_ids"], batch["labels"], True)
    from alignment.logprobs import get_response_log_probs

    part = get_response_log_probs(tiny_model, batch["input_ids"], batch["labels"], True, response_mask=mask)
    for key in ("log_probs", "token_entropy"):
        # float32 sums over 49k terms in another order: entropies of ~10.8 agree to 5e-6 relative
        np.testing.assert_allclose(
            part[key][mask].detach().numpy(), full[key][mask].detach().numpy(), rtol=1e-5, atol=1e-5
        )
        assert (part[key][~mask] == 0).all()
    part["log_probs"].sum().backward()  # gradients flow through the gathered positions
    assert tiny_model.get_output_embeddings().weight.grad is not None
    tiny_model.zero_grad()
