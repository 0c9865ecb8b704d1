"""Packed SFT blocks and their batch iterator, against token streams built independently."""

import json

import torch

from alignment.data.packed_sft import ALPACA_TEMPLATE
from tests.adapters import get_packed_sft_dataset, run_iterate_batches

RECORDS = [{"prompt": f"Say {w} twice.", "response": f"{w} {w}"} for w in ("red", "green", "blue", "tea", "sky")]


def write(tmp_path):
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return path


def stream(tokenizer, records):
    """The expected token stream: each record's Alpaca text, tokenized with special tokens, then EOS."""
    tokens = []
    for r in records:
        text = ALPACA_TEMPLATE.format(instruction=r["prompt"], response=r["response"])
        tokens += tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    return tokens


def test_blocks_are_consecutive_windows_with_shifted_labels(tokenizer, tmp_path):
    expected = stream(tokenizer, RECORDS)
    dataset = get_packed_sft_dataset(tokenizer, write(tmp_path), seq_length=16, shuffle=False)
    assert len(dataset) == (len(expected) - 1) // 16
    for i in range(len(dataset)):
        item = dataset[i]
        assert item["input_ids"].shape == item["labels"].shape == (16,)
        assert item["input_ids"].tolist() == expected[16 * i : 16 * i + 16]
        assert item["labels"].tolist() == expected[16 * i + 1 : 16 * i + 17]
    assert expected.count(tokenizer.eos_token_id) >= len(RECORDS)


def test_shuffle_permutes_whole_documents(tokenizer, tmp_path):
    shuffled = get_packed_sft_dataset(tokenizer, write(tmp_path), seq_length=8, shuffle=True)
    stream_seen = torch.cat([shuffled[i]["input_ids"] for i in range(len(shuffled))]).tolist()
    documents = [stream(tokenizer, [r]) for r in RECORDS]
    # the packed prefix is some order of the documents: match them greedily
    position, order = 0, []
    while position < len(stream_seen):
        match = next(
            i
            for i, d in enumerate(documents)
            if i not in order and stream_seen[position : position + len(d)] == d[: len(stream_seen) - position]
        )
        order.append(match)
        position += len(documents[match])
    assert len(set(order)) == len(order)  # each document once, whole
    assert order != list(range(len(order)))  # seeded shuffle of five documents moves something


def test_iterate_batches_is_one_epoch(tokenizer, tmp_path):
    dataset = get_packed_sft_dataset(tokenizer, write(tmp_path), seq_length=8, shuffle=False)
    n = len(dataset)
    batches = list(run_iterate_batches(dataset, batch_size=4, shuffle=True))
    assert [len(b["input_ids"]) for b in batches] == [4] * (n // 4) + ([n % 4] if n % 4 else [])
    seen = sorted(tuple(row.tolist()) for b in batches for row in b["input_ids"])
    assert seen == sorted(tuple(dataset[i]["input_ids"].tolist()) for i in range(n))
    ordered = list(run_iterate_batches(dataset, batch_size=4, shuffle=False))
    assert torch.equal(ordered[0]["input_ids"], torch.stack([dataset[i]["input_ids"] for i in range(4)]))
