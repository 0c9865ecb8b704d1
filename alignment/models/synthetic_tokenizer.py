"""A word-level tokenizer over any vocabulary size, for random-weight models of real shapes (benches, GPU checks).

Its words are `t3`, `t4`, ... `t{vocab_size - 1}` (the token of that id), whitespace-separated, after three special
tokens: `<unk>` (0), `<eos>` (1, also the EOS) and `<pad>` (2). Nothing is downloaded.
"""

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIALS = ("<unk>", "<eos>", "<pad>")  # bracketed: an added token like "t1" would also match inside "t17"


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """The tokenizer of `vocab_size` ids described above."""
    if vocab_size <= len(SPECIALS):
        raise ValueError(f"vocab_size must be > {len(SPECIALS)}, got {vocab_size}")
    vocab = {name: i for i, name in enumerate(SPECIALS)} | {f"t{i}": i for i in range(len(SPECIALS), vocab_size)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>", pad_token="<pad>")
