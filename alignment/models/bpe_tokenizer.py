"""A byte-level BPE tokenizer as CS336 A1 (UW HW1) trains it, as a transformers tokenizer every engine here takes.

A1's tokenizer is a vocabulary {id: bytes} and a list of merges (bytes, bytes) in the order they were learned; text
is split on special tokens first, then into pre-tokens by GPT-2's pattern (contractions, letters, digits, other
symbols, each with one leading space, and runs of whitespace), and each pre-token's bytes are merged by rank. On disk
(`vocab.json`, `merges.txt`) tokens are written in GPT-2's byte-to-unicode alphabet, one printable character per
byte, as the A1 test fixtures do: `vocab.json` maps token -> id (students' files that map id -> token are read too),
`merges.txt` holds one merge "a b" a line (GPT-2's `#version` header and lines of another form are skipped).

The result is a `PreTrainedTokenizerFast` over the `tokenizers` library's BPE with the same split and merge rules,
its special tokens (`<|endoftext|>` by default) kept whole, the first of them its EOS and pad token.
"""

import json
from collections.abc import Sequence
from pathlib import Path

from transformers import PreTrainedTokenizerFast

DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>",)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the other 68 for characters from U+0100."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_TO_CHAR = bytes_to_unicode()
_CHAR_TO_BYTE = {c: b for b, c in _BYTE_TO_CHAR.items()}


def to_unicode(token: bytes) -> str:
    return "".join(_BYTE_TO_CHAR[b] for b in token)


def from_unicode(token: str, where: str) -> bytes:
    try:
        return bytes(_CHAR_TO_BYTE[c] for c in token)
    except KeyError as err:
        raise ValueError(f"{where}: {token!r} has a character outside GPT-2's byte alphabet ({err})") from None


def read_bpe_files(vocab_path: Path, merges_path: Path) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """A1's vocabulary {id: bytes} and merges [(bytes, bytes)] from vocab.json and merges.txt (GPT-2 alphabet)."""
    try:
        raw = json.loads(Path(vocab_path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{vocab_path}: not a readable JSON vocabulary ({err})") from None
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"{vocab_path}: expected a JSON object of tokens and ids")
    if all(isinstance(v, int) for v in raw.values()):  # {token: id}, as A1's fixtures
        pairs = [(i, t) for t, i in raw.items()]
    elif all(k.isdigit() and isinstance(v, str) for k, v in raw.items()):  # {id: token}
        pairs = [(int(i), t) for i, t in raw.items()]
    else:
        raise ValueError(f"{vocab_path}: expected {{token: id}} or {{id: token}}")
    vocab = {i: from_unicode(t, str(vocab_path)) for i, t in pairs}
    merges = []
    for number, line in enumerate(Path(merges_path).read_text().splitlines(), start=1):
        parts = line.rstrip().split(" ")
        if len(parts) == 2 and all(parts) and not line.startswith("#version"):
            merges.append((from_unicode(parts[0], f"{merges_path}:{number}"), from_unicode(parts[1], "")))
    return vocab, merges


def bpe_tokenizer(
    vocab: dict[int, bytes],
    merges: Sequence[tuple[bytes, bytes]],
    special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS,
) -> PreTrainedTokenizerFast:
    """The transformers tokenizer of an A1 vocabulary and merges; special tokens missing from the vocabulary are
    appended to it (as A1's tests do)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    ids = {to_unicode(token): i for i, token in vocab.items()}
    if len(ids) != len(vocab):
        raise ValueError("the vocabulary holds the same token under two ids")
    for special in special_tokens:
        if to_unicode(special.encode()) not in ids:
            ids[to_unicode(special.encode())] = max(ids.values(), default=-1) + 1
    missing = sorted({_BYTE_TO_CHAR[b] for b in range(256)} - ids.keys())
    if missing:
        raise ValueError(f"the vocabulary lacks {len(missing)} of the 256 single bytes (e.g. {missing[0]!r})")
    pairs = [(to_unicode(a), to_unicode(b)) for a, b in merges]
    unknown = next(((a, b) for a, b in pairs if a + b not in ids or a not in ids or b not in ids), None)
    if unknown is not None:
        raise ValueError(f"merge {unknown[0]!r} + {unknown[1]!r}: a token or its result is not in the vocabulary")
    tokenizer = Tokenizer(models.BPE(vocab=ids, merges=pairs, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special_tokens])
    first = special_tokens[0] if special_tokens else None
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=first, pad_token=first)


def load_bpe_tokenizer(
    vocab_path: Path, merges_path: Path, special_tokens: Sequence[str] = DEFAULT_SPECIAL_TOKENS
) -> PreTrainedTokenizerFast:
    """`bpe_tokenizer` of the vocab.json and merges.txt an A1 tokenizer was saved as."""
    vocab, merges = read_bpe_files(vocab_path, merges_path)
    return bpe_tokenizer(vocab, merges, special_tokens)
