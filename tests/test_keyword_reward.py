"""Edge cases of keyword_inclusion_reward_fn's rule: whole words, case-insensitive, optional plural s/es."""

import pytest

from alignment.data.keywords import keyword_inclusion_reward_fn


def reward(response: str, keywords: list[str]) -> float:
    result = keyword_inclusion_reward_fn(response, keywords)
    assert result["reward"] == result["answer_reward"]
    return result["reward"]


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


def test_format_reward_is_one_for_any_non_empty_response():
    assert keyword_inclusion_reward_fn("The river.", ["apple"]) == {
        "format_reward": 1.0,
        "answer_reward": 0.0,
        "reward": 0.0,
    }
    assert keyword_inclusion_reward_fn("An apple.", ["apple"]) == {
        "format_reward": 1.0,
        "answer_reward": 1.0,
        "reward": 1.0,
    }


def test_empty_keyword_list_and_empty_response_earn_nothing():
    assert keyword_inclusion_reward_fn("Anything at all.", []) == {
        "format_reward": 1.0,
        "answer_reward": 0.0,
        "reward": 0.0,
    }
    for response in ("", "   \n"):
        assert keyword_inclusion_reward_fn(response, ["apple"]) == {
            "format_reward": 0.0,
            "answer_reward": 0.0,
            "reward": 0.0,
        }
