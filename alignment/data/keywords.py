"""The keyword-inclusion task: write text that uses every given word; reward 1 iff it does.

Matching rule: each keyword must appear as a whole word, case-insensitively, optionally followed by a plural
`s` or `es` ("River", "rivers" and "river's" count for "river"); a keyword inside another word does not
("pineapple" is not "apple"). Keywords are letters only, so they are never read as regex syntax.
"""

import random
import re
from collections.abc import Sequence
from pathlib import Path

from alignment.data.task import Task

# {words} is "word" for one keyword (the UW handout's single-keyword prompts) and "words" for several
TEMPLATES = (
    "Write a short story that includes the {words}: {keywords}.",
    "Write two sentences that use the {words} {keywords}.",
    "Describe a walk through town, mentioning {keywords}.",
    "Write a short poem containing the {words}: {keywords}.",
)
DEFAULT_KEYWORDS = Path(__file__).resolve().parents[2] / "data" / "keywords.txt"


def keyword_inclusion_reward_fn(response: str, keywords: Sequence[str]) -> dict[str, float]:
    """{"format_reward": 1 for a non-empty response, "answer_reward" = "reward" = 1 iff all keywords appear}."""
    found = all(re.search(rf"\b{re.escape(k)}(?:e?s)?\b", response, flags=re.IGNORECASE) for k in keywords)
    reward = float(bool(keywords) and found)
    return {"format_reward": float(bool(response.strip())), "answer_reward": reward, "reward": reward}


def keyword_instruction(template: str, keywords: Sequence[str]) -> str:
    """One of TEMPLATES filled with these keywords, in the singular for one."""
    return template.format(words="word" if len(keywords) == 1 else "words", keywords=", ".join(keywords))


def load_keywords(path: Path = DEFAULT_KEYWORDS) -> list[str]:
    """One keyword per line; blank lines skipped; a non-alphabetic entry is an error naming its line."""
    words = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        word = line.strip()
        if word and not word.isalpha():
            raise ValueError(f"{path}:{number}: keyword {word!r} must be letters only")
        if word:
            words.append(word.lower())
    if not words:
        raise ValueError(f"{path}: no keywords")
    return words


def keyword_prompts(
    words: Sequence[str], count: int, keywords_per_prompt: int, seed: int
) -> list[tuple[str, list[str]]]:
    """`count` (instruction, keywords) pairs drawn without repeats of a keyword within a prompt."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        chosen = rng.sample(list(words), keywords_per_prompt)
        pairs.append((keyword_instruction(rng.choice(TEMPLATES), chosen), chosen))
    return pairs


def keyword_tasks(
    template: str, words: Sequence[str], n_train: int, n_validation: int, keywords_per_prompt: int, seed: int
) -> tuple[Task, Task]:
    """Training and held-out tasks; held-out prompts use keywords never seen in training."""
    shuffled = list(words)
    random.Random(seed).shuffle(shuffled)
    held_out = max(keywords_per_prompt, len(shuffled) // 5)
    train_words, validation_words = shuffled[held_out:], shuffled[:held_out]
    train = keyword_prompts(train_words, n_train, keywords_per_prompt, seed)
    validation = keyword_prompts(validation_words, n_validation, keywords_per_prompt, seed + 1)
    return (
        Task([q for q, _ in train], [k for _, k in train], template, keyword_inclusion_reward_fn),
        Task([q for q, _ in validation], [k for _, k in validation], template, keyword_inclusion_reward_fn),
    )
