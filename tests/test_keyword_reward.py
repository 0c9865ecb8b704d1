"""The two keyword rules: the UW handouts' (keyword_inclusion_reward_fn: every keyword appears, case-insensitive) and
the stricter one's edge cases (keyword_word_reward_fn: whole words, case-insensitive, optional plural s/es); the word
list: the handout's file, a course checkout's folder, the shipped fallback."""

import pytest

from alignment.data.keywords import (
    DEFAULT_KEYWORDS,
    KEYWORD_REWARD_FNS,
    keyword_inclusion_reward_fn,
    keyword_word_reward_fn,
    load_keywords,
)
from alignment.grpo.config import GRPOConfig
from alignment.run.setup import keyword_run_tasks
from tests.conftest import SHARED_DATA


def reward(response: str, keywords: list[str]) -> float:
    result = keyword_word_reward_fn(response, keywords)
    assert result["reward"] == result["answer_reward"]
    return result["reward"]


def test_the_handouts_example_and_rule():
    """ "Write a sentence that includes the words: apple, red." -> "The red apple fell from the tree." earns 1."""
    assert keyword_inclusion_reward_fn("The red apple fell from the tree.", ["apple", "red"])["reward"] == 1
    assert keyword_inclusion_reward_fn("THE RED APPLE", ["apple", "Red"])["reward"] == 1  # case-insensitive
    assert keyword_inclusion_reward_fn("The red pear fell.", ["apple", "red"])["reward"] == 0  # every keyword


@pytest.mark.parametrize(
    "response,keyword",
    [("pineapple", "apple"), ("Applesauce", "apple"), ("riverside", "river"), ("crabapples", "apple"), ("Mice", "ice")],
)
def test_the_handouts_rule_finds_a_keyword_inside_other_words_where_the_word_rule_does_not(response, keyword):
    assert keyword_inclusion_reward_fn(response, [keyword])["reward"] == 1
    assert keyword_word_reward_fn(response, [keyword])["reward"] == 0


@pytest.mark.parametrize("match", ["substring", "word"])
def test_keyword_match_picks_the_rule_of_the_runs_tasks(match):
    config = GRPOConfig(task="keywords", keyword_match=match, n_train_prompts=4, n_eval_examples=2)
    train, validation = keyword_run_tasks(config, "{question}")
    assert train.reward_fn is validation.reward_fn is KEYWORD_REWARD_FNS[match]
    assert train.reward_fn("a pineapple", ["apple"])["reward"] == (match == "substring")


@pytest.mark.parametrize(
    "response",
    [
        "apple",
        "An apple.",
        "(apple)",
        '"apple"',
        "apple,river",
        "...apple!",
        "apple?",
        "Apple-pie",
        "the apple's core",
        "x\napple\n",
    ],
)
def test_punctuation_around_a_word_does_not_hide_it(response):
    assert reward(response, ["apple"]) == 1


@pytest.mark.parametrize(
    "response,keyword", [("APPLE", "apple"), ("aPpLe", "apple"), ("an apple", "APPLE"), ("Rivers", "river")]
)
def test_case_is_ignored_on_both_sides(response, keyword):
    assert reward(response, [keyword]) == 1


@pytest.mark.parametrize(
    "response,keyword",
    [
        ("pineapple", "apple"),
        ("applesauce", "apple"),
        ("apply", "apple"),
        ("riverside", "river"),
        ("apple_tree", "apple"),
        ("apple2", "apple"),
        ("crabapples", "apple"),
        ("app le", "apple"),
        ("", "apple"),
    ],
)
def test_a_keyword_inside_another_word_or_split_does_not_count(response, keyword):
    assert reward(response, [keyword]) == 0


@pytest.mark.parametrize(
    "response,keyword,expected",
    [
        ("apples", "apple", 1),
        ("boxes", "box", 1),
        ("churches", "church", 1),
        ("rivers.", "river", 1),
        ("mice", "mouse", 0),
        ("applesss", "apple", 0),
        ("boxed", "box", 0),
    ],
)
def test_plural_s_or_es_counts_and_other_endings_do_not(response, keyword, expected):
    assert reward(response, [keyword]) == expected


def test_every_keyword_is_needed_in_any_order():
    assert reward("The river ran past an apple tree.", ["apple", "river"]) == 1
    assert reward("The river ran past a pear tree.", ["apple", "river"]) == 0
    assert reward("Apples. Lanterns. Rivers.", ["river", "lantern", "apple"]) == 1
    assert reward("apple", ["apple", "apple"]) == 1


@pytest.mark.parametrize("rule", [keyword_inclusion_reward_fn, keyword_word_reward_fn])
def test_format_reward_is_one_for_any_non_empty_response(rule):
    assert rule("The river.", ["apple"]) == {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}
    assert rule("An apple.", ["apple"]) == {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}


@pytest.mark.parametrize("rule", [keyword_inclusion_reward_fn, keyword_word_reward_fn])
def test_empty_keyword_list_and_empty_response_earn_nothing(rule):
    assert rule("Anything at all.", []) == {"format_reward": 1.0, "answer_reward": 0.0, "reward": 0.0}
    for response in ("", "   \n"):
        assert rule(response, ["apple"]) == {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}


def test_the_word_list_is_the_handouts_file_or_a_course_checkouts_or_the_shipped_fallback(tmp_path):
    course = tmp_path / "assignment3-rl"
    (course / "cse599o_alignment" / "prompts").mkdir(parents=True)
    (course / "cse599o_alignment" / "prompts" / "keywords.txt").write_text("Apple\nriver\n\nlantern\n")
    assert load_keywords(course) == load_keywords(course / "cse599o_alignment" / "prompts" / "keywords.txt")
    assert load_keywords(course) == ["apple", "river", "lantern"]
    assert len(load_keywords(DEFAULT_KEYWORDS)) == 98
    config = GRPOConfig(task="keywords", keywords_file=course, keywords_per_prompt=1, n_train_prompts=8)
    train, validation = keyword_run_tasks(config, "{question}")
    assert {k for t in (train, validation) for ks in t.truths for k in ks} <= {"apple", "river", "lantern"}
    with pytest.raises(
        ValueError, match="--keywords-file .*: a folder, but neither cse599o_alignment/prompts/keywords"
    ):
        load_keywords(tmp_path)
    with pytest.raises(ValueError, match="--keywords-file .*missing.txt: no such file"):
        load_keywords(tmp_path / "missing.txt")


def test_the_handouts_list_loads_whole():
    path = SHARED_DATA / "keywords.txt"
    if not path.is_file():
        pytest.skip(f"the UW handout's word list is not at {path} (a fresh clone has no ../shared)")
    words = load_keywords(path)
    assert len(words) == len(set(words)) == 6262


def test_keyword_runs_saved_before_the_setting_resume_with_whole_words(tmp_path):
    import json

    from alignment.config.settings import read_run_settings

    settings = GRPOConfig(output_dir=tmp_path, task="keywords").to_json()
    del settings["keyword_match"]  # settings.json of a run started before --keyword-match existed
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    assert read_run_settings(tmp_path, GRPOConfig)["keyword_match"] == "word"
    assert GRPOConfig().keyword_match == "substring"  # new runs: the handouts' rule
