"""The keyword-inclusion task: write text that uses every given word; reward 1 iff it does.

Two matching rules (`--keyword-match`):
- substring (the UW handouts' rule, `keyword_inclusion_reward_fn`): each keyword appears in the response,
  case-insensitively, anywhere: "Pineapples" counts for "apple", and so does "grapple".
- word (stricter, `keyword_word_reward_fn`): each keyword appears as a whole word, case-insensitively, optionally
  followed by a plural `s` or `es` ("River", "rivers" and "river's" count for "river"); a keyword inside another
  word does not ("pineapple" is not "apple"). Keywords are letters only, so they are never read as regex syntax.
A response the word rule rewards, the substring rule rewards too.

The word lists (`--keywords-file`), shipped in data/keywords/: `uw_cse599o.txt`, the UW handout's 6,262 nouns from
TinyStories (the course repo's `cse599o_alignment/prompts/keywords.txt`; a checkout's folder may be given for it too),
which the UW presets name; and `stand_in.txt`, the project's own 98 words, read when none is given (so the keyword
demo and runs started before the UW list was shipped keep their words).
"""

import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from alignment.data.task import Task

# {words} is "word" for one keyword (the UW handout's single-keyword prompts) and "words" for several
TEMPLATES = (
    "Write a short story that includes the {words}: {keywords}.",
    "Write two sentences that use the {words} {keywords}.",
    "Describe a walk through town, mentioning {keywords}.",
    "Write a short poem containing the {words}: {keywords}.",
)
KEYWORD_LISTS = Path(__file__).resolve().parents[2] / "data" / "keywords"
DEFAULT_KEYWORDS = KEYWORD_LISTS / "stand_in.txt"  # the project's 98 words
UW_KEYWORDS = KEYWORD_LISTS / "uw_cse599o.txt"  # the UW handout's 6,262
# Where the UW course repo keeps its word list, for --keywords-file given a checkout's folder
COURSE_KEYWORDS = ("cse599o_alignment/prompts/keywords.txt", "prompts/keywords.txt")


def _scores(response: str, keywords: Sequence[str], found: bool) -> dict[str, float]:
    reward = float(bool(keywords) and found)
    return {"format_reward": float(bool(response.strip())), "answer_reward": reward, "reward": reward}


def keyword_inclusion_reward_fn(response: str, keywords: Sequence[str]) -> dict[str, float]:
    """The UW handouts' rule: {"format_reward": 1 for a non-empty response, "answer_reward" = "reward" = 1 iff every
    keyword appears in the response, case-insensitively (as a substring)}."""
    text = response.casefold()
    return _scores(response, keywords, all(k.casefold() in text for k in keywords))


def keyword_word_reward_fn(response: str, keywords: Sequence[str]) -> dict[str, float]:
    """The stricter rule: as keyword_inclusion_reward_fn, but each keyword must appear as a whole word (plural s/es
    allowed)."""
    found = all(re.search(rf"\b{re.escape(k)}(?:e?s)?\b", response, flags=re.IGNORECASE) for k in keywords)
    return _scores(response, keywords, found)


KeywordMatch = Literal["substring", "word"]
KeywordRewardFn = Callable[[str, Sequence[str]], dict[str, float]]
KEYWORD_REWARD_FNS: dict[str, KeywordRewardFn] = {
    "substring": keyword_inclusion_reward_fn,
    "word": keyword_word_reward_fn,
}


def keyword_instruction(template: str, keywords: Sequence[str]) -> str:
    """One of TEMPLATES filled with these keywords, in the singular for one."""
    return template.format(words="word" if len(keywords) == 1 else "words", keywords=", ".join(keywords))


def load_keywords(path: Path = DEFAULT_KEYWORDS) -> list[str]:
    """One keyword per line; blank lines skipped; a non-alphabetic entry is an error naming its line. A folder is
    read as a checkout of the UW course repo: its COURSE_KEYWORDS file."""
    path = Path(path)
    if path.is_dir():
        found = next((path / name for name in COURSE_KEYWORDS if (path / name).is_file()), None)
        if found is None:
            raise ValueError(
                f"--keywords-file {path}: a folder, but neither {' nor '.join(COURSE_KEYWORDS)} is in it (give the "
                "word list's file, or the UW course repo's folder)"
            )
        path = found
    if not path.is_file():
        raise ValueError(f"--keywords-file {path}: no such file")
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
    template: str,
    words: Sequence[str],
    n_train: int,
    n_validation: int,
    keywords_per_prompt: int,
    seed: int,
    reward_fn: KeywordRewardFn = keyword_inclusion_reward_fn,
) -> tuple[Task, Task]:
    """Training and held-out tasks graded by `reward_fn`; held-out prompts use keywords never seen in training."""
    shuffled = list(words)
    random.Random(seed).shuffle(shuffled)
    held_out = max(keywords_per_prompt, len(shuffled) // 5)
    train_words, validation_words = shuffled[held_out:], shuffled[:held_out]
    train = keyword_prompts(train_words, n_train, keywords_per_prompt, seed)
    validation = keyword_prompts(validation_words, n_validation, keywords_per_prompt, seed + 1)
    return (
        Task([q for q, _ in train], [k for _, k in train], template, reward_fn),
        Task([q for q, _ in validation], [k for _, k in validation], template, reward_fn),
    )
