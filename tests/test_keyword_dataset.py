"""The keyword dataset builder (filtering, split, determinism, overwrite) and its loader's errors."""

import json

import pytest
from typer.testing import CliRunner

from alignment.data.keyword_dataset import (
    TRAIN_FILE,
    VALIDATION_FILE,
    build_keyword_dataset,
    dataset_prompts,
    load_keyword_dataset,
    write_keyword_dataset,
)
from alignment.data.keywords import TEMPLATES, keyword_inclusion_reward_fn
from alignment.rollout.interface import Rollout, SamplingConfig

WORDS = ["apple", "river", "lantern", "compass", "garden", "bridge", "mirror", "candle"]
SAMPLING = SamplingConfig(max_tokens=8, stop=(), seed=0)


class EchoEngine:
    """Deterministic responses: for prompt i, sample 0 says nothing useful, sample 1 repeats the prompt
    (so it uses every keyword) unless i is a multiple of 3, sample 2 repeats only its first half."""

    def generate(self, prompts, n, sampling):
        rollouts = []
        for i, prompt in enumerate(prompts):
            texts = ["Sure, here you go.", prompt if i % 3 else "No.", prompt[: len(prompt) // 2]][:n]
            rollouts += [Rollout(i, text, [1], [0.0], "stop") for text in texts]
        return rollouts

    def load_policy_weights(self, state_dict):
        pass


def build(seed=0, prompts_per_count=10, counts=(1, 2)):
    return build_keyword_dataset(
        EchoEngine(), "<user>{question}</user>", WORDS, counts, prompts_per_count, 3, SAMPLING, seed
    )


def test_prompts_cover_one_and_several_keywords_without_repeats():
    pairs = dataset_prompts(WORDS, [1, 3], 12, seed=4)
    assert [len(k) for _, k in pairs] == [1] * 12 + [3] * 12
    assert len({(q, frozenset(k)) for q, k in pairs}) == 24
    for question, keywords in pairs:
        words = "word" if len(keywords) == 1 else "words"  # one keyword is asked for in the singular
        assert question in {t.format(words=words, keywords=", ".join(keywords)) for t in TEMPLATES}
    # only 4 templates x 2 words exist with one keyword from two words: asking for more gives all 8
    assert len(dataset_prompts(["apple", "river"], [1], 50, seed=0)) == 8
    with pytest.raises(ValueError, match=r"keywords per prompt must be in \[1, 8\]"):
        dataset_prompts(WORDS, [9], 3, seed=0)


def test_only_rewarded_answers_are_kept_and_split_80_20():
    train, validation = build()
    pairs = dataset_prompts(WORDS, [1, 2], 10, seed=0)
    expected = {pairs[i][0] for i in range(len(pairs)) if i % 3}  # prompts whose echo sample was produced
    records = train + validation
    assert {r["prompt"] for r in records} == expected and len(records) == len(expected) == 13
    assert (len(train), len(validation)) == (10, 3)  # round(13 * 0.2) = 3
    for r in records:
        assert keyword_inclusion_reward_fn(r["answer"], r["keywords"])["reward"] == 1
        assert r["answer"] == f"<user>{r['prompt']}</user>"  # the first rewarded sample: the echo, wrapped as sampled
        assert set(r) == {"prompt", "answer", "keywords"}


@pytest.mark.parametrize("kept,validation", [(5, 1), (10, 2), (1, 0)])
def test_split_sizes(kept, validation):
    class Exact(EchoEngine):  # every prompt echoed: all are kept
        def generate(self, prompts, n, sampling):
            return [Rollout(i, p, [1], [0.0], "stop") for i, p in enumerate(prompts) for _ in range(n)]

    train, val = build_keyword_dataset(Exact(), "{question}", WORDS, [1], kept, 1, SAMPLING, seed=0)
    assert (len(train), len(val)) == (kept - validation, validation)


def test_same_seed_gives_byte_identical_files_and_another_seed_does_not(tmp_path):
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        write_keyword_dataset(tmp_path / name, *build(seed))
    for file in (TRAIN_FILE, VALIDATION_FILE):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
    assert (tmp_path / "a" / TRAIN_FILE).read_bytes() != (tmp_path / "c" / TRAIN_FILE).read_bytes()


def test_existing_files_are_replaced_only_with_overwrite(tmp_path):
    train, validation = build()
    write_keyword_dataset(tmp_path, train, validation)
    before = (tmp_path / TRAIN_FILE).read_bytes()
    with pytest.raises(FileExistsError, match="train.jsonl, validation.jsonl; pass overwrite"):
        write_keyword_dataset(tmp_path, validation, train)
    assert (tmp_path / TRAIN_FILE).read_bytes() == before
    write_keyword_dataset(tmp_path, validation, train, overwrite=True)
    assert (tmp_path / TRAIN_FILE).read_bytes() != before


def test_loader_gives_tasks(tmp_path):
    train, validation = build()
    write_keyword_dataset(tmp_path, train, validation)
    train_task, validation_task = load_keyword_dataset(tmp_path, template="<s>{question}")
    assert train_task.questions == [r["prompt"] for r in train] and train_task.truths == [r["keywords"] for r in train]
    assert (
        validation_task.questions == [r["prompt"] for r in validation] and validation_task.template == "<s>{question}"
    )
    assert train_task.reward_fn("An apple by the river.", ["apple", "river"])["reward"] == 1


GOOD = {"prompt": "Use apple.", "answer": "An apple.", "keywords": ["apple"]}


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"prompt": "Use apple.", ', "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "prompt"}), "field 'prompt' must be a non-empty string"),
        (json.dumps(GOOD | {"answer": 7}), "field 'answer' must be a non-empty string"),
        (json.dumps(GOOD | {"keywords": "apple"}), "field 'keywords' must be a non-empty list"),
        (json.dumps(GOOD | {"keywords": []}), "field 'keywords' must be a non-empty list"),
        (json.dumps(GOOD | {"keywords": ["apple pie"]}), "field 'keywords' must be a non-empty list of words"),
        (
            json.dumps(GOOD | {"answer": "A pear."}),  # (a pineapple would do: the handout's rule, substrings)
            r"field 'answer' does not contain every keyword of \['apple'\]",
        ),
    ],
)
def test_loader_names_file_line_and_field_of_a_bad_record(tmp_path, line, message):
    (tmp_path / TRAIN_FILE).write_text(json.dumps(GOOD) + "\n\n" + line + "\n")
    (tmp_path / VALIDATION_FILE).write_text(json.dumps(GOOD) + "\n")
    with pytest.raises(ValueError, match=f"train.jsonl:3: {message}"):
        load_keyword_dataset(tmp_path)


def test_loader_refuses_missing_or_empty_files_and_a_template_without_question(tmp_path):
    (tmp_path / TRAIN_FILE).write_text(json.dumps(GOOD) + "\n")
    with pytest.raises(FileNotFoundError, match="validation.jsonl: missing"):
        load_keyword_dataset(tmp_path)
    (tmp_path / VALIDATION_FILE).write_text("\n")
    with pytest.raises(ValueError, match="validation.jsonl: no records"):
        load_keyword_dataset(tmp_path)
    with pytest.raises(ValueError, match="must contain"):
        load_keyword_dataset(tmp_path, template="no placeholder")


@pytest.mark.slow  # the builder script end to end, 3 s; a built dataset trains in tests/test_transformer_lm_policy.py
def test_script_end_to_end_with_a_tiny_model(tiny_model_dir, tmp_path):
    from scripts import build_keyword_dataset as script

    def invoke(out, *extra):
        args = [
            "--model",
            tiny_model_dir,
            "--backend",
            "hf",
            "--keyword-counts",
            1,
            "--keyword-counts",
            2,
            "--prompts-per-count",
            3,
            "--samples-per-prompt",
            2,
            "--max-tokens",
            6,
            "--output-dir",
            out,
            *extra,
        ]
        return CliRunner().invoke(script.app, [str(a) for a in args])

    first, second = invoke(tmp_path / "a"), invoke(tmp_path / "b")
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    summary = json.loads(first.output[first.output.index("{") :])
    assert summary["prompts"] == 6 and summary["kept"] == summary["train"] + summary["validation"] <= 6
    for file in (TRAIN_FILE, VALIDATION_FILE):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes()
        for line in (tmp_path / "a" / file).read_text().splitlines():  # a random model rarely earns reward
            record = json.loads(line)
            assert keyword_inclusion_reward_fn(record["answer"], record["keywords"])["reward"] == 1
    settings = json.loads((tmp_path / "a" / "build_settings.json").read_text())
    assert settings["keyword_counts"] == [1, 2] and "{question}" in settings["template"]
    again = invoke(tmp_path / "a")
    assert again.exit_code != 0 and "--overwrite" in again.output
    bad = invoke(tmp_path / "c", "--keyword-counts", 6263)  # one more than the default list (the UW handout's) has
    assert bad.exit_code != 0 and "--keyword-counts" in bad.output and not (tmp_path / "c").exists()
