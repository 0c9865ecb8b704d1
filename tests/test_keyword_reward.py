"""The two keyword rules: the UW handouts' (keyword_inclusion_reward_fn: every keyword appears, case-insensitive) and
the stricter one's edge cases (keyword_word_reward_fn: whole words, case-insensitive, optional plural s/es); the word
lists: the handout's, shipped and named by the UW presets, a course checkout's folder, the stand-in read by default,
and run folders that named the stand-in at its old path resuming."""

import hashlib
import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.config.settings import read_run_settings, upgraded
from alignment.data.keywords import (
    DEFAULT_KEYWORDS,
    KEYWORD_REWARD_FNS,
    UW_KEYWORDS,
    keyword_inclusion_reward_fn,
    keyword_word_reward_fn,
    load_keywords,
)
from alignment.experiments.sweep import load_preset
from alignment.grpo.config import GRPOConfig
from alignment.grpo_run import train_grpo
from alignment.run.checkpoint import fingerprint
from alignment.tasks.building import run_tasks
from tests.test_grpo_loop import tiny_config

REPO = Path(__file__).resolve().parents[1]


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
    train, validation = run_tasks(config)
    row = {"prompt": "Use apple.", "keywords": ["apple"]}
    for response in ("a pineapple", "an apple", ""):
        assert train.reward_fn(response, row) == KEYWORD_REWARD_FNS[match](response, ["apple"])  # the rule's dict
    assert validation.reward_fn("a pineapple", row)["reward"] == (match == "substring")


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
    train, validation = run_tasks(config)
    assert {k for t in (train, validation) for row in t.truths for k in row["keywords"]} <= {
        "apple",
        "river",
        "lantern",
    }
    with pytest.raises(
        ValueError, match="--keywords-file .*: a folder, but neither cse599o_alignment/prompts/keywords"
    ):
        load_keywords(tmp_path)
    with pytest.raises(ValueError, match="--keywords-file .*missing.txt: no such file"):
        load_keywords(tmp_path / "missing.txt")


def test_the_handouts_list_is_shipped_whole():
    """data/keywords/uw_cse599o.txt is the course repo's cse599o_alignment/prompts/keywords.txt byte for byte (its
    SHA-256 as checked against uw-syfi/assignment3-rl when it was shipped)."""
    digest = hashlib.sha256(UW_KEYWORDS.read_bytes()).hexdigest()
    assert digest == "ba0b05018f3213bba3c14e41cc51eaae46215cc538efd1edbb08f348d10f8f3d"
    words = load_keywords(UW_KEYWORDS)
    assert len(words) == len(set(words)) == 6262
    assert DEFAULT_KEYWORDS.name == "stand_in.txt" and len(load_keywords(DEFAULT_KEYWORDS)) == 98


# The UW handout presets that draw keywords; a CPU twin whose recorded results used the stand-in keeps it
UW_PRESETS = [
    ("keyword_uw_handout.toml", "uw_cse599o"),
    ("keyword_transformer_lm.toml", "uw_cse599o"),
    *((f"experiments/uw_v2/{p.name}", "uw_cse599o") for p in sorted((REPO / "configs/experiments/uw_v2").glob("*"))),
    ("experiments/cpu/uw_v2_p8_strategies_cpu.toml", "uw_cse599o"),
    ("experiments/cpu/uw_v2_p6_kl_monitoring_cpu.toml", "stand_in"),
    ("experiments/cpu/uw_v2_p7_colocated_variants_cpu.toml", "stand_in"),
    ("experiments/cpu/uw_v2_p7_throughput_cpu.toml", "stand_in"),
    ("experiments/cpu/uw_v2_p9_weight_sync_cpu.toml", "stand_in"),
    ("keyword_demo.toml", "stand_in"),
]


@pytest.mark.parametrize("preset,words", UW_PRESETS, ids=[p for p, _ in UW_PRESETS])
def test_the_uw_presets_draw_the_handouts_words(preset, words, monkeypatch):
    monkeypatch.chdir(REPO)  # presets name their files from the repository root
    path = REPO / "configs" / preset
    runs = (
        [run.settings for run in load_preset(path).runs]
        if "experiments" in preset
        else [tomllib.loads(path.read_text())]
    )
    for settings in runs:
        assert settings["keywords_file"] == f"data/keywords/{words}.txt"
        config = GRPOConfig(**{k: v for k, v in settings.items() if k in GRPOConfig.__dataclass_fields__})
        train, _ = run_tasks(config)
        assert {k for row in train.truths for k in row["keywords"]} <= set(
            load_keywords(Path(settings["keywords_file"]))
        )


def test_no_uw_preset_is_left_without_its_words():
    """Every preset built on the UW keyword block is in UW_PRESETS, so none falls back to the stand-in unsaid."""
    listed = {p for p, _ in UW_PRESETS}
    for path in (REPO / "configs" / "experiments").rglob("*.toml"):
        if "keyword_uw_handout" in path.read_text():
            assert str(path.relative_to(REPO / "configs")) in listed, path


@pytest.mark.slow
def test_a_run_folder_naming_the_old_word_list_resumes(tiny_model_dir, tmp_path, monkeypatch):
    """The stand-in was data/keywords.txt: a run whose settings.json and checkpoint name that path resumes reading
    it at its new place (the checkpoint's settings read the same way, so they match the run folder's). Under -m
    slow (two GRPO steps, about 20 s on the loaded 2-core machine); its parts are the test below."""
    from scripts import train_grpo as train_grpo_script

    monkeypatch.chdir(REPO)  # the path was given from the repository root
    config = tiny_config(
        tiny_model_dir,
        tmp_path,
        task="keywords",
        keywords_file=Path("data/keywords/stand_in.txt"),
        n_train_prompts=8,
        n_eval_examples=2,
    )
    train_grpo(config)
    for file in (config.output_dir / "settings.json", config.output_dir / "checkpoint" / "state.json"):
        text = file.read_text()
        assert '"data/keywords/stand_in.txt"' in text
        file.write_text(text.replace('"data/keywords/stand_in.txt"', '"data/keywords.txt"'))  # as the old run wrote
    result = CliRunner().invoke(train_grpo_script.app, ["--resume", str(config.output_dir), "--n-grpo-steps", "2"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted({row["grpo_step"] for row in rows if "loss" in row}) == [1, 2]
    assert read_run_settings(config.output_dir, GRPOConfig)["keywords_file"] == Path("data/keywords/stand_in.txt")


def test_the_old_word_lists_path_reads_as_its_new_one_from_anywhere_in_a_checkout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for old, new in [
        (f"{REPO}/data/keywords.txt", f"{REPO}/data/keywords/stand_in.txt"),  # absolute, into a checkout
        ("../alignment/data/keywords.txt", "../alignment/data/keywords/stand_in.txt"),  # relative, from beside it
        ("data/keywords.txt", "data/keywords/stand_in.txt"),  # from the root, though not there: a moved file
    ]:
        (tmp_path / "run").mkdir(exist_ok=True)
        settings = GRPOConfig(output_dir=tmp_path / "run", task="keywords").to_json() | {"keywords_file": old}
        (tmp_path / "run" / "settings.json").write_text(json.dumps(settings))
        assert read_run_settings(tmp_path / "run", GRPOConfig)["keywords_file"] == Path(new)
    # the checkpoint's own copy of the settings reads the same way, so resuming finds no setting changed
    resumed = GRPOConfig(**read_run_settings(tmp_path / "run", GRPOConfig))
    made_with = upgraded(GRPOConfig, GRPOConfig(task="keywords", keywords_file=Path("data/keywords.txt")).to_json())
    assert {k: v for k, v in made_with.items() if k not in GRPOConfig.RESUMABLE} == fingerprint(resumed)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keywords.txt").write_text("lantern\n")  # a list of the user's own at that path stays
    assert read_run_settings(tmp_path / "run", GRPOConfig)["keywords_file"] == Path("data/keywords.txt")
