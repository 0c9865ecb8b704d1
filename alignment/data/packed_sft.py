"""Packed instruction-tuning data (CS336 A5 supplement): documents concatenated into fixed-length token blocks.

Each prompt/response record is rendered with the Alpaca template (prompts/alpaca_sft.prompt), tokenized with
the tokenizer's usual special tokens, and ended with EOS; the documents are concatenated (in file order, or
shuffled) and cut into blocks of `seq_length` tokens. Block i holds tokens [i*L, (i+1)*L) as input_ids and
[i*L + 1, (i+1)*L + 1) as labels; the tail too short for a full block is dropped.
"""

import os
import random
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerBase

from alignment.data.math_datasets import read_jsonl
from alignment.data.sft_examples import to_sft_example
from alignment.prompts import PROMPTS_DIR

ALPACA_TEMPLATE = (PROMPTS_DIR / "alpaca_sft.prompt").read_text()


def alpaca_text(instruction: str, response: str) -> str:
    return ALPACA_TEMPLATE.replace("{instruction}", instruction).replace("{response}", response)


class PackedSFTDataset(Dataset):
    """Fixed-length language-modeling blocks over one token stream: items {"input_ids", "labels"}, each
    (seq_length,)."""

    def __init__(self, tokens: Sequence[int], seq_length: int) -> None:
        if seq_length < 1:
            raise ValueError(f"seq_length must be >= 1, got {seq_length}")
        self.tokens = torch.tensor(tokens, dtype=torch.long)
        self.seq_length = seq_length

    def __len__(self) -> int:
        return max(0, (len(self.tokens) - 1) // self.seq_length)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"block {i} of {len(self)}")
        start = i * self.seq_length
        return {
            "input_ids": self.tokens[start : start + self.seq_length],
            "labels": self.tokens[start + 1 : start + self.seq_length + 1],
        }


def document_tokens(tokenizer: PreTrainedTokenizerBase, instruction: str, response: str) -> list[int]:
    """One record's tokens: the tokenizer's special prefix (e.g. BOS), the Alpaca text, then EOS."""
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token to end documents with")
    return tokenizer(alpaca_text(instruction, response))["input_ids"] + [tokenizer.eos_token_id]


def get_packed_sft_dataset(
    tokenizer: PreTrainedTokenizerBase, dataset_path: str | os.PathLike, seq_length: int, shuffle: bool, seed: int = 0
) -> PackedSFTDataset:
    """A jsonl of {"prompt", "response"} records, packed; `shuffle` permutes the documents (seeded) first."""
    records = [to_sft_example(record, where) for where, record in read_jsonl(Path(dataset_path))]
    documents = [document_tokens(tokenizer, r.prompt, r.response) for r in records]
    if shuffle:
        random.Random(seed).shuffle(documents)
    return PackedSFTDataset([token for doc in documents for token in doc], seq_length)


def iterate_batches(dataset: Dataset, batch_size: int, shuffle: bool) -> DataLoader:
    """Iterating it once is one epoch of batches {"input_ids", "labels"}: (batch, seq_length) each; the last may be
    smaller."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)
