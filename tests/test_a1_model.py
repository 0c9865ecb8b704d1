"""A student's CS336 A1 TransformerLM in our TransformerLM (UW problems 5 and 16): on the same weights the loaded
model's logits equal those of the A1 architecture as the course defines it, computed here in float64 from the
handout's equations (interleaved RoPE pairs, RMSNorm with eps 1e-5, SwiGLU, causal softmax attention, untied head);
the loader names every bad or missing key; A1's BPE tokenizer files load and encode as A1 encodes. With a local
checkout of stanford-cs336/assignment1-basics ($CS336_A1_REPO), A1's own model and tokenizer tests run on our code
through tests/a1_adapters.py, and our tokenizer is compared with tiktoken on A1's GPT-2 fixtures."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import regex
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from alignment.models.a1_checkpoint import A1Shape, a1_names, from_a1_state_dict, read_a1_weights
from alignment.models.bpe_tokenizer import bpe_tokenizer, bytes_to_unicode, load_bpe_tokenizer, read_bpe_files
from alignment.models.lm_checkpoint import load_transformer_lm
from alignment.models.transformer_lm import TransformerLM
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.lm_engine import TransformerLMRolloutEngine

SHAPE = A1Shape(vocab_size=300, context_length=16, d_model=32, num_layers=2, num_heads=4, d_ff=48, rope_theta=10000.0)
A1_REPO_ENV = "CS336_A1_REPO"
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def a1_weights(shape: A1Shape = SHAPE, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights in A1's naming and (out, in) layout; norms near 1 but not 1, so that their gains matter."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for key, (_, size) in a1_names(shape).items():
        if len(size) == 1:
            weights[key] = 1 + 0.2 * torch.randn(size, generator=generator)
        else:
            weights[key] = torch.randn(size, generator=generator) / size[-1] ** 0.5 * (3 if "embed" in key else 1)
    return weights


def rms_norm(x: torch.Tensor, gain: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * gain


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """A1's RoPE: channels (2k, 2k+1) of each head turned by position * theta^(-2k/d) (x: batch, heads, seq, d)."""
    d = x.shape[-1]
    angle = positions[:, None].double() * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (seq, d/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * angle.cos() - odd * angle.sin()
    out[..., 1::2] = even * angle.sin() + odd * angle.cos()
    return out


def a1_logits_float64(weights: dict[str, torch.Tensor], shape: A1Shape, ids: torch.Tensor) -> torch.Tensor:
    """The A1 TransformerLM, written from the handout's equations, in float64."""
    w = {k: v.double() for k, v in weights.items()}
    batch, seq = ids.shape
    heads, d_k = shape.num_heads, shape.d_model // shape.num_heads
    positions = torch.arange(seq)
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    x = w["token_embeddings.weight"][ids]
    for i in range(shape.num_layers):
        p = f"layers.{i}."
        h = rms_norm(x, w[p + "ln1.weight"])
        q, k, v = (
            (h @ w[p + f"attn.{name}_proj.weight"].T).view(batch, seq, heads, d_k).transpose(1, 2) for name in "qkv"
        )
        q, k = rope(q, positions, shape.rope_theta), rope(k, positions, shape.rope_theta)
        scores = (q @ k.transpose(-1, -2) / d_k**0.5).masked_fill(~causal, float("-inf"))
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, shape.d_model)
        x = x + attended @ w[p + "attn.output_proj.weight"].T
        h = rms_norm(x, w[p + "ln2.weight"])
        gate, up = h @ w[p + "ffn.w1.weight"].T, h @ w[p + "ffn.w3.weight"].T
        x = x + (gate * torch.sigmoid(gate) * up) @ w[p + "ffn.w2.weight"].T
    return rms_norm(x, w["ln_final.weight"]) @ w["lm_head.weight"].T


IDS = torch.randint(0, SHAPE.vocab_size, (2, SHAPE.context_length), generator=torch.Generator().manual_seed(7))


def test_logits_equal_the_a1_architecture_in_float64():
    weights = a1_weights()
    model = from_a1_state_dict(weights, SHAPE).double()
    with torch.no_grad():
        ours = model(IDS)
    reference = a1_logits_float64(weights, SHAPE, IDS)
    assert reference.abs().max() > 1  # logits large enough for the comparison to mean something
    # our RoPE and RMSNorm compute in float32 inside a float64 model: agreement to float32 rounding
    assert (ours - reference).abs().max() < 1e-5
    assert model.config.context_length == 16 and not model.config.tie_embeddings
    # in float32, as training runs it
    with torch.no_grad():
        assert (from_a1_state_dict(weights, SHAPE)(IDS).double() - reference).abs().max() < 1e-4


def test_rope_pairing_is_what_the_row_reorder_fixes():
    """Copying q_proj and k_proj rows as they are (our half-split pairs against A1's adjacent ones) changes the
    logits: the loader's reorder is needed, and it is what makes them equal."""
    weights = a1_weights()
    model = from_a1_state_dict(weights, SHAPE)
    for i in range(SHAPE.num_layers):  # undo the reorder: rows as A1 stores them
        model.blocks[i].attn.q.weight.data = weights[f"layers.{i}.attn.q_proj.weight"].clone()
        model.blocks[i].attn.k.weight.data = weights[f"layers.{i}.attn.k_proj.weight"].clone()
    with torch.no_grad():
        assert (model.double()(IDS) - a1_logits_float64(weights, SHAPE, IDS)).abs().max() > 0.1


def test_weights_stored_in_out_load_the_same():
    """A student's Linear may keep W transposed, (in, out): the non-square ffn.w1 and lm_head show it."""
    weights = a1_weights()
    transposed = {k: (v.T if v.dim() == 2 and k != "token_embeddings.weight" else v) for k, v in weights.items()}
    with torch.no_grad():
        assert torch.equal(from_a1_state_dict(transposed, SHAPE)(IDS), from_a1_state_dict(weights, SHAPE)(IDS))
    mixed = dict(weights, **{"lm_head.weight": weights["lm_head.weight"].T})
    with pytest.raises(ValueError, match=r"mix \(out, in\) and \(in, out\).*layers.0.ffn.w1.weight.*lm_head.weight"):
        from_a1_state_dict(mixed, SHAPE)


def test_bad_and_missing_keys_are_named():
    weights = a1_weights()
    missing = {k: v for k, v in weights.items() if k != "layers.1.ffn.w2.weight"}
    with pytest.raises(ValueError, match=r"missing tensor layers\.1\.ffn\.w2\.weight"):
        from_a1_state_dict(missing, SHAPE)
    with pytest.raises(ValueError, match=r"unexpected tensor layers\.2\.ln1\.weight"):
        from_a1_state_dict(weights | {"layers.2.ln1.weight": torch.ones(32)}, SHAPE)
    with pytest.raises(ValueError, match=r"tensor layers\.0\.attn\.q_proj\.weight has shape \(32, 16\)"):
        from_a1_state_dict(weights | {"layers.0.attn.q_proj.weight": torch.ones(32, 16)}, SHAPE)
    renamed = {k.replace("ffn.w1", "ffn.gate"): v for k, v in weights.items()}  # a student's own naming
    with pytest.raises(ValueError, match=r"missing tensor layers\.0\.ffn\.w1\.weight \(and 1 more\)"):
        from_a1_state_dict(renamed, SHAPE)


class NotATensor:
    pass


def test_weight_files_read_without_running_code(tmp_path):
    weights = a1_weights()
    save_file(weights, tmp_path / "model.safetensors")
    assert read_a1_weights(tmp_path / "model.safetensors").keys() == weights.keys()
    # torch.compile's prefix, inside a training checkpoint dict (A1's run_save_checkpoint is free-form)
    compiled = {"_orig_mod." + k: v for k, v in weights.items()}
    torch.save({"model": compiled, "optimizer": {"state": {}}, "iteration": 3}, tmp_path / "checkpoint.pt")
    loaded = read_a1_weights(tmp_path / "checkpoint.pt")
    assert loaded.keys() == weights.keys() and all(torch.equal(loaded[k], weights[k]) for k in weights)
    torch.save({"model": weights, "extra": NotATensor()}, tmp_path / "pickled.pt")
    with pytest.raises(ValueError, match="weights_only=True"):
        read_a1_weights(tmp_path / "pickled.pt")
    with pytest.raises(FileNotFoundError, match="no such weights file"):
        read_a1_weights(tmp_path / "absent.pt")


def test_shape_from_json_and_uws_theta(tmp_path):
    path = tmp_path / "model_config.json"
    uw = {"vocab_size": 50257, "context_length": 256, "d_model": 512, "num_layers": 4, "num_heads": 16}
    path.write_text(json.dumps(uw | {"d_ff": 1344, "theta": 10000}))  # UW's starter's constants
    assert A1Shape.from_json(path) == A1Shape(50257, 256, 512, 4, 16, 1344, 10000.0)
    path.write_text(json.dumps(uw))
    with pytest.raises(ValueError, match="missing d_ff"):
        A1Shape.from_json(path)
    path.write_text(json.dumps(uw | {"d_ff": -1}))
    with pytest.raises(ValueError, match="d_ff must be a positive number"):
        A1Shape.from_json(path)


# ---- the tokenizer ---------------------------------------------------------------------------------------------

MERGES = [(b"t", b"h"), (b"th", b"e"), (b" ", b"c"), (b" c", b"a"), (b" ca", b"t"), (b"e", b"r"), (b" ", b"th")]


def tiny_vocab() -> dict[int, bytes]:
    """A1's layout: the special token, the 256 bytes, then one token per merge in order."""
    vocab = {0: b"<|endoftext|>"} | {1 + b: bytes([b]) for b in range(256)}
    for a, b in MERGES:
        vocab[len(vocab)] = a + b
    return vocab


def reference_encode(text: str, vocab: dict[int, bytes], merges, special: str = "<|endoftext|>") -> list[int]:
    """Byte-level BPE as the A1 handout describes it: special tokens split out, GPT-2 pre-tokens, then within each
    pre-token the pair of lowest merge rank merged until none applies."""
    ids = {token: i for i, token in vocab.items()}
    rank = {pair: r for r, pair in enumerate(merges)}
    out: list[int] = []
    for i, part in enumerate(text.split(special)):
        if i:
            out.append(ids[special.encode()])
        for pre in regex.findall(GPT2_PATTERN, part):
            pieces = [bytes([b]) for b in pre.encode()]
            while len(pieces) > 1:
                pair = min(zip(pieces, pieces[1:]), key=lambda p: rank.get(p, len(rank)))
                if pair not in rank:
                    break
                j = next(j for j in range(len(pieces) - 1) if (pieces[j], pieces[j + 1]) == pair)
                pieces[j : j + 2] = [pieces[j] + pieces[j + 1]]
            out += [ids[p] for p in pieces]
    return out


TEXTS = ["the cat", "Other cats gather there.", "the<|endoftext|> the cater", "  the\n\ncat  ", "ünï cöde 🙂", ""]


@pytest.mark.parametrize("direction", ["token_to_id", "id_to_token"])
def test_tokenizer_files_encode_as_a1_does(tmp_path, direction):
    vocab, alphabet = tiny_vocab(), bytes_to_unicode()
    written = {"".join(alphabet[b] for b in token): i for i, token in vocab.items()}
    if direction == "id_to_token":  # some students write the inverse mapping
        written = {str(i): t for t, i in written.items()}
    (tmp_path / "vocab.json").write_text(json.dumps(written, ensure_ascii=False))
    merges_text = "#version: 0.2\n" + "".join(
        " ".join("".join(alphabet[b] for b in side) for side in pair) + "\n" for pair in MERGES
    )
    (tmp_path / "merges.txt").write_text(merges_text)
    assert read_bpe_files(tmp_path / "vocab.json", tmp_path / "merges.txt") == (vocab, MERGES)
    tokenizer = load_bpe_tokenizer(tmp_path / "vocab.json", tmp_path / "merges.txt")
    for text in TEXTS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert ids == reference_encode(text, vocab, MERGES), text
        assert tokenizer.decode(ids) == text
    assert tokenizer.encode(" cat", add_special_tokens=False) == [261]  # one merged token: 1 + 256 bytes + merge 5
    assert (tokenizer.eos_token, tokenizer.eos_token_id, tokenizer.pad_token_id) == ("<|endoftext|>", 0, 0)


def test_tokenizer_errors_are_named(tmp_path):
    vocab = tiny_vocab()
    with pytest.raises(ValueError, match="lacks 1 of the 256 single bytes"):
        bpe_tokenizer({i: t for i, t in vocab.items() if t != b"z"}, MERGES)
    with pytest.raises(ValueError, match="merge 'x' \\+ 'y'"):
        bpe_tokenizer(vocab, [*MERGES, (b"x", b"y")])
    (tmp_path / "vocab.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        read_bpe_files(tmp_path / "vocab.json", tmp_path / "merges.txt")


# ---- the import script and the engine --------------------------------------------------------------------------


def write_a1_files(folder: Path, shape: A1Shape = SHAPE) -> dict[str, torch.Tensor]:
    folder.mkdir(parents=True, exist_ok=True)
    weights = a1_weights(shape)
    torch.save(weights, folder / "model.pt")
    alphabet = bytes_to_unicode()
    vocab = {"".join(alphabet[b] for b in t): i for i, t in tiny_vocab().items()}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "merges.txt").write_text(
        "".join(f"{''.join(alphabet[b] for b in a)} {''.join(alphabet[b] for b in b_)}\n" for a, b_ in MERGES)
    )
    fields = ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff", "rope_theta")
    (folder / "model_config.json").write_text(json.dumps({f: getattr(shape, f) for f in fields}))
    return weights


def test_import_script_writes_a_folder_our_backend_loads(tmp_path):
    from scripts import import_a1_model

    weights = write_a1_files(tmp_path / "a1")
    a1 = tmp_path / "a1"
    out = tmp_path / "ours"
    flags = ["--weights", a1 / "model.pt", "--vocab", a1 / "vocab.json", "--merges", a1 / "merges.txt"]
    shape = ["--vocab-size", 300, "--context-length", 16, "--d-model", 32, "--num-layers", 2, "--num-heads", 4]
    result = CliRunner().invoke(
        import_a1_model.app, [str(f) for f in flags + shape + ["--d-ff", 48, "--output-dir", out]]
    )
    assert result.exit_code == 0, result.output
    model, tokenizer = load_transformer_lm(out)
    reference = a1_logits_float64(weights, SHAPE, IDS)
    with torch.no_grad():
        assert (model(IDS).double() - reference).abs().max() < 1e-4
    assert tokenizer.encode(" cat", add_special_tokens=False) == [261]
    # an A1 folder loads as it is, and the shape flags can come from its model_config.json
    direct, _ = load_transformer_lm(a1)
    assert all(torch.equal(a, b) for a, b in zip(direct.state_dict().values(), model.state_dict().values()))
    again = CliRunner().invoke(
        import_a1_model.app,
        [str(f) for f in flags + ["--shape-json", a1 / "model_config.json", "--output-dir", out]],
    )
    assert again.exit_code == 2 and "--overwrite" in again.output
    bad = CliRunner().invoke(import_a1_model.app, [str(f) for f in flags + shape + ["--output-dir", tmp_path / "x"]])
    assert bad.exit_code == 2 and "missing --d-ff" in bad.output


def test_generation_keeps_to_the_context_length(tmp_path):
    write_a1_files(tmp_path / "a1")
    model, tokenizer = load_transformer_lm(tmp_path / "a1")
    engine = TransformerLMRolloutEngine(model, tokenizer, progress=False)
    rollouts = engine.generate(["the cat"], 2, SamplingConfig(max_tokens=8, seed=0))
    assert len(rollouts) == 2 and all(len(r.token_ids) <= 8 for r in rollouts)
    with pytest.raises(ValueError, match="exceeds the model's context length, 16"):
        engine.generate(["the cat"], 2, SamplingConfig(max_tokens=15, seed=0))


# ---- A1's own tests, from a local checkout ---------------------------------------------------------------------


@pytest.fixture
def a1_repo() -> Path:
    repo = Path(os.environ.get(A1_REPO_ENV, ""))
    if not os.environ.get(A1_REPO_ENV) or not (repo / "tests" / "_snapshots" / "test_rope.npz").is_file():
        pytest.skip(f"set ${A1_REPO_ENV} to a checkout of stanford-cs336/assignment1-basics to run its own tests")
    return repo


def test_a1s_own_model_and_tokenizer_tests_on_our_code(a1_repo, tmp_path):
    """A1's test_model.py against its snapshots, through tests/a1_adapters.py; the weights fixture model.pt is not in
    every copy of the repo (a large file), and the tests that need it run only where it is. Its tokenizer round
    trips likewise (the tests against tiktoken download GPT-2's files: the next test compares offline)."""
    tests = tmp_path / "tests"
    shutil.copytree(a1_repo / "tests", tests, ignore=shutil.ignore_patterns("adapters.py", "__pycache__"))
    shutil.copy(Path(__file__).resolve().parent / "a1_adapters.py", tests / "adapters.py")
    has_weights = (tests / "fixtures" / "ts_tests" / "model.pt").is_file()
    model_tests = "" if has_weights else " and (test_rope or scaled_dot_product or silu)"
    selection = f"(test_model and not linear and not embedding{model_tests}) or roundtrip or overlapping"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_model.py"]
    command += ["tests/test_tokenizer.py", "-k", selection]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = int(regex.search(r"(\d+) passed", result.stdout)[1])
    assert passed >= (20 if has_weights else 15), result.stdout[-2000:]


def test_our_tokenizer_matches_tiktoken_on_a1s_gpt2_files(a1_repo):
    import tiktoken

    fixtures = a1_repo / "tests" / "fixtures"
    tokenizer = load_bpe_tokenizer(fixtures / "gpt2_vocab.json", fixtures / "gpt2_merges.txt")
    vocab, _ = read_bpe_files(fixtures / "gpt2_vocab.json", fixtures / "gpt2_merges.txt")
    ranks = {token: i for i, token in vocab.items() if token != b"<|endoftext|>"}
    reference = tiktoken.Encoding(
        "a1_gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}
    )
    texts = [(fixtures / name).read_text() for name in ("address.txt", "german.txt", "tinystories_sample.txt")]
    for text in [*texts, "Héllò hôw <|endoftext|><|endoftext|> are ü? 🙃", "it's we'll THEY'RE  \n\n x"]:
        assert tokenizer.encode(text, add_special_tokens=False) == reference.encode(text, allowed_special="all")


def test_a1_folder_shape_matches_our_model():
    model = from_a1_state_dict(a1_weights(), SHAPE)
    assert isinstance(model, TransformerLM)
    assert sum(p.numel() for p in model.parameters()) == sum(w.numel() for w in a1_weights().values())
