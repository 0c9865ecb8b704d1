"""The teacher of on-policy distillation (--teacher, alignment/distillation.py): a frozen model that scores the
student's sampled tokens, as the KL reference is scored (alignment/grpo/scoring.py).

It scores the student's token ids as they are, so it must read them as the student does: a teacher whose tokenizer
maps any token to another id is refused before training, from the two tokenizers' files alone (no weights load).
The vocabularies must match, not the embedding sizes: a model may pad its embedding past its tokenizer (Qwen2.5's
151,936 rows for 151,665 tokens), and only the sampled tokens' log-probs are read.
"""

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from alignment.models.loading import load_model_and_tokenizer, load_tokenizer, resolve_model
from alignment.utils.hub import SourceUnavailable


def _tokenizer(flag: str, name_or_path: str) -> PreTrainedTokenizerBase:
    try:
        resolve_model(name_or_path)
        return load_tokenizer(name_or_path)
    except (SourceUnavailable, OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{flag} {name_or_path}: cannot read its tokenizer ({reason})") from None


def vocabulary_difference(student: PreTrainedTokenizerBase, teacher: PreTrainedTokenizerBase) -> str | None:
    """None when both map every token to the same id (added tokens included); else what differs, in words."""
    ours, theirs = student.get_vocab(), teacher.get_vocab()
    if ours == theirs:
        return None
    if len(ours) != len(theirs):
        return f"vocabularies of {len(ours)} and {len(theirs)} tokens"
    token = next(t for t in sorted(ours) if ours[t] != theirs.get(t))
    where = f"id {theirs[token]}" if token in theirs else "absent"
    return f"token {token!r} is id {ours[token]} for the student, {where} for the teacher"


def check_teacher_tokenizer(student: str, teacher: str) -> None:
    """ValueError naming both when the teacher's tokenizer differs from the student's (or either cannot be read).
    Reads tokenizer files only."""
    difference = vocabulary_difference(_tokenizer("--model", student), _tokenizer("--teacher", teacher))
    if difference is not None:
        raise ValueError(
            f"--teacher {teacher} has another tokenizer than --model {student} ({difference}): the teacher scores "
            "the student's token ids, so both must share one vocabulary"
        )


def load_teacher(name_or_path: str, device: str | torch.device, dtype: torch.dtype) -> PreTrainedModel:
    """The teacher on `device` in `dtype` (the dtype the policy computes in: a frozen model needs no float32 master),
    frozen and in eval mode. Under torchrun each process holds it whole: it only scores, without gradient."""
    model, _ = load_model_and_tokenizer(name_or_path, device, dtype)
    return model.eval().requires_grad_(False)
