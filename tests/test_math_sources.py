"""MATH and GSM8K as they are shipped: every short name and layout, loaded by `datasets` from local copies of the
real repos (tests/hub_copies.py), the choice of training and validation splits, held-out slices and the overlap
check."""

import json
import re
from pathlib import Path

import huggingface_hub
import pytest

from alignment.data.math_datasets import (
    MIRROR_ENV,
    dataset_splits,
    evaluation_split,
    load_math_examples,
    spread_subset,
)
from alignment.data.sft_examples import sft_rows
from alignment.data.splits import evaluation_examples, run_data
from alignment.grpo_run import train_grpo
from alignment.prompts import load_prompt
from alignment.tasks.building import evaluation_task
from scripts.eval_zero_shot import EvalConfig
from tests.conftest import GSM8K
from tests.hub_copies import (
    MATH500_IDS,
    N_GSM8K_TEST,
    N_GSM8K_TRAIN,
    N_TEST,
    N_TRAIN,
    TEST_IDS,
    TRAIN_IDS,
    math_problem,
    write_course_math,
)
from tests.test_grpo_loop import tiny_config


def answers(ids) -> list[str]:
    return [math_problem(i)["answer"] for i in ids]


@pytest.mark.parametrize(
    "name,split,expected",
    [
        ("math", "train", TRAIN_IDS),
        ("math", None, TEST_IDS),  # evaluation split: MATH's test problems
        ("math500", None, MATH500_IDS),
        (
            "hendrycks_math",
            "train",
            TRAIN_IDS,
        ),  # seven per-subject configs read one after another, each ordered as ours
        ("hendrycks_math", "test", TEST_IDS),
    ],
)
def test_short_names_read_the_real_layouts(hub_mirror, name, split, expected):
    examples = load_math_examples(name, split=split)
    assert sorted(e.answer for e in examples) == sorted(answers(expected))
    # the answer of a solution-only record is the last \boxed{} or \fbox{} with nested braces intact
    assert examples[0].answer.startswith("\\frac{") and examples[0].answer.count("{") == 2
    assert all(
        e.question.startswith("Problem ") and "Level" in str(e.meta.get("level")) or name == "math500" for e in examples
    )


def test_competition_math_is_one_split_of_everything(hub_mirror):
    examples = load_math_examples("competition_math")
    assert sorted(e.answer for e in examples) == sorted(answers(TRAIN_IDS + TEST_IDS))


def test_gsm8k_is_the_shipped_copy_and_needs_no_hub(monkeypatch):
    """`gsm8k` reads data/gsm8k/ as the course repositories ship it, with the hub switched off and no mirror."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv(MIRROR_ENV, raising=False)
    train, test = load_math_examples("gsm8k", split="train"), load_math_examples("gsm8k")
    assert (len(train), len(test)) == (7473, 1319)
    assert test == load_math_examples(str(GSM8K / "test.jsonl"))
    assert train == load_math_examples(str(GSM8K / "train.jsonl"))
    assert (dataset_splits("gsm8k"), evaluation_split("gsm8k")) == (["test", "train"], "test")
    assert [r for _, r in sft_rows("gsm8k", "train")[:3]] == [json.loads(line) for line in GSM8K_TRAIN_HEAD]
    data = run_data("gsm8k", "train", None, n_validation=64)
    assert data.notes[0] == "training on 7473 questions of gsm8k [train]; validating on 64 of gsm8k [test]"
    with pytest.raises(ValueError, match=r"has no split 'validation' \(its files: test.jsonl, train.jsonl\)"):
        load_math_examples("gsm8k", split="validation")


GSM8K_TRAIN_HEAD = (GSM8K / "train.jsonl").read_text().splitlines()[:3]


def test_the_hub_gsm8k_by_its_id_reads_the_main_config_only(hub_mirror):
    """openai/gsm8k, a local copy laid out as the hub repo is, read through `datasets`: the `main` config that the
    short name once read, not main and socratic one after the other."""
    train, test = load_math_examples("openai/gsm8k", split="train"), load_math_examples("openai/gsm8k")
    assert (len(train), len(test)) == (N_GSM8K_TRAIN, N_GSM8K_TEST)
    assert train[0].answer == "3" and "**" not in train[0].solution  # socratic's solutions have `**` steps
    assert dataset_splits("openai/gsm8k") == ["train", "test"]
    data = run_data("openai/gsm8k", "train", None, n_validation=5)
    assert (len(data.train), len(data.validation)) == (N_GSM8K_TRAIN, 5)
    assert len(sft_rows("openai/gsm8k", "train")) == N_GSM8K_TRAIN


def test_folders_and_hub_ids_load_like_short_names(hub_mirror):
    folder = hub_mirror / "DigitalLearningGmbH" / "MATH-lighteval"
    assert load_math_examples(str(folder), split="train") == load_math_examples("math", split="train")
    assert load_math_examples("EleutherAI/hendrycks_math") == load_math_examples("hendrycks_math")  # via the mirror
    assert load_math_examples(str(hub_mirror / "HuggingFaceH4" / "MATH-500" / "test.jsonl")) == load_math_examples(
        "math500"
    )


def test_course_math_folder(tmp_path, hub_mirror):
    folder = write_course_math(tmp_path / "MATH", load_prompt("r1_zero"))
    train = load_math_examples(str(folder), split="train")  # no `answer` field: taken from the solution
    assert [e.answer for e in train] == answers(TRAIN_IDS)
    assert [e.answer for e in load_math_examples(str(folder))] == answers(
        TEST_IDS
    )  # validation.jsonl; sft.jsonl is no split
    data = run_data(str(folder), "train", None, n_validation=1000)
    assert (len(data.train), len(data.validation)) == (N_TRAIN, N_TEST)
    assert f"validating on {N_TEST} of {folder} [validation]" in data.notes[0]


def test_a_record_without_answer_or_boxed_solution_names_file_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(math_problem(1)) + "\n" + json.dumps({"problem": "p", "solution": "no box here"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: missing field 'answer', and field 'solution' has no \\boxed"):
        load_math_examples(str(path))
    path.write_text(json.dumps({"problem": "p"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: missing field 'answer' \(and no 'solution'"):
        load_math_examples(str(path))


def test_math_trains_on_train_and_validates_on_a_spread_of_test(hub_mirror):
    data = run_data("math", "train", None, n_validation=14)
    assert len(data.train) == N_TRAIN and len(data.validation) == 14
    assert data.validation == spread_subset(load_math_examples("math"), 14)
    assert len({e.meta["type"] for e in data.validation}) >= 4  # spread over subjects, not the first 14 (algebra)
    assert data.notes[0] == "training on 70 questions of math [train]; validating on 14 of math [test]"
    assert data.notes[-1] == "overlap: 0 of 14 validation questions also appear in the training data"


@pytest.mark.parametrize("source", ["competition_math", "qwedsacf/competition_math", "math500", "file"])
def test_a_single_split_source_holds_out_a_seeded_disjoint_slice(hub_mirror, source):
    if source == "file":
        source = str(hub_mirror / "HuggingFaceH4" / "MATH-500" / "test.jsonl")
    allow = source in ("math500", str(hub_mirror / "HuggingFaceH4" / "MATH-500" / "test.jsonl"))  # test sets
    whole = load_math_examples(source, split="train" if "competition_math" in source else None)
    data = run_data(source, "train", None, n_validation=50, allow_evaluation_split=allow)
    size = len(whole) // 10
    assert len(data.validation) == min(50, size) and len(data.train) == len(whole) - size
    assert not {e.question for e in data.train} & {e.question for e in data.validation}
    assert run_data(source, "train", None, n_validation=50, allow_evaluation_split=allow) == data  # the same slice
    assert any(f"{size} of its {len(whole)} questions held out" in note for note in data.notes)
    # a resumed run may validate on fewer questions: it still trains on exactly the same ones
    fewer = run_data(source, "train", None, n_validation=1, allow_evaluation_split=allow)
    assert fewer.train == data.train and len(fewer.validation) == 1 and fewer.validation[0] in data.validation


def evaluation_layouts(root, course) -> dict[str, tuple[str, list[int], bool]]:
    """Every layout docs/concepts/data_and_evaluation.md lists -> (source, the problems evaluating it means,
    whether a tenth is held out)."""
    math500 = root / "HuggingFaceH4" / "MATH-500"
    return {
        "math500": ("math500", MATH500_IDS, False),
        "math500_folder": (str(math500), MATH500_IDS, False),
        "math500_hub_id": ("HuggingFaceH4/MATH-500", MATH500_IDS, False),  # through the mirror
        "math500_jsonl": (str(math500 / "test.jsonl"), MATH500_IDS, False),
        "lighteval": ("math", TEST_IDS, False),
        "lighteval_folder": (str(root / "DigitalLearningGmbH" / "MATH-lighteval"), TEST_IDS, False),
        "hendrycks_math": ("hendrycks_math", TEST_IDS, False),
        "hendrycks_hub_id": ("EleutherAI/hendrycks_math", TEST_IDS, False),
        "course_math": (str(course), TEST_IDS, False),  # validation.jsonl
        "competition_math": ("competition_math", TRAIN_IDS + TEST_IDS, True),  # one training split
        "competition_hub_id": ("qwedsacf/competition_math", TRAIN_IDS + TEST_IDS, True),
    }


@pytest.mark.parametrize("layout", list(evaluation_layouts(Path("."), Path("."))))
def test_an_evaluation_set_is_evaluated_whole_in_every_layout(hub_mirror, tmp_path, layout, capsys):
    course = write_course_math(tmp_path / "MATH", load_prompt("r1_zero"))
    source, ids, held_out = evaluation_layouts(hub_mirror, course)[layout]
    examples, note = evaluation_examples(source)
    if held_out:  # the tenth a training run validates on, and a note saying so
        assert len(examples) == len(ids) // 10 and "a training split" in note
        assert set(e.question for e in examples) <= {math_problem(i)["problem"] for i in ids}
        assert [e.question for e in examples] == [e.question for e in run_data(source, "train", None, 10**6).validation]
    else:  # MATH-500 is all of its problems, MATH's test split all of its
        assert sorted(e.answer for e in examples) == sorted(answers(ids)) and note is None
    # the evaluation scripts' math task says the same
    loaded = evaluation_task(EvalConfig(dataset=source, prompt="r1_zero")).truths
    assert len(loaded) == len(examples) and ("holds out" in capsys.readouterr().out) == held_out


@pytest.mark.parametrize("layout", ["math500", "math500_folder", "math500_hub_id", "math500_jsonl", "course_valid"])
def test_training_on_an_evaluation_set_is_refused_unless_asked(hub_mirror, tmp_path, layout):
    course = write_course_math(tmp_path / "MATH", load_prompt("r1_zero"))
    source = {"course_valid": str(course / "validation.jsonl")}.get(layout) or evaluation_layouts(hub_mirror, course)[
        layout
    ][0]
    with pytest.raises(ValueError, match=r"^--dataset: .*an evaluation set.*--train-on-evaluation-split"):
        run_data(source, "train", None, 10)
    data = run_data(source, "train", None, 10, allow_evaluation_split=True)
    assert data.train and data.validation and "held out" in " ".join(data.notes)


def test_a_named_evaluation_split_is_refused_unless_asked(hub_mirror, tmp_path):
    with pytest.raises(ValueError, match=r"split 'test' of math: an evaluation set.*--train-on-evaluation-split"):
        run_data("math", "test", None, 10)
    course = str(write_course_math(tmp_path / "MATH", load_prompt("r1_zero")))
    with pytest.raises(ValueError, match="split 'validation' of .*MATH: an evaluation set"):
        run_data(course, "validation", None, 10)
    data = run_data("math", "test", None, 10, allow_evaluation_split=True)  # its own test split: a tenth held out
    assert len(data.train) == N_TEST - N_TEST // 10 and len(data.validation) == N_TEST // 10


def test_validation_that_is_trained_on_is_refused_naming_both(hub_mirror):
    # competition_math holds MATH's test problems, and MATH-500 is taken from them
    with pytest.raises(
        ValueError,
        match=r"10 of 10 validation questions \(math500\) are also training questions "
        r"\(competition_math \[train\]\).*--allow-validation-overlap",
    ):
        run_data("competition_math", "train", "math500", n_validation=100)
    data = run_data("competition_math", "train", "math500", n_validation=100, allow_overlap=True)
    assert data.notes[-1] == "overlap: 10 of 10 validation questions also appear in the training data"
    assert run_data("math", "train", "math500", 100).notes[-1].startswith("overlap: 0 of 10")


def test_whitespace_does_not_hide_an_overlap_and_one_percent_is_allowed(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(math_problem(i)) + "\n" for i in range(200)))

    def validation(n_seen: int):
        path = tmp_path / f"val{n_seen}.jsonl"
        seen = [
            math_problem(i) | {"problem": "  " + math_problem(i)["problem"].replace(" ", "\n ")} for i in range(n_seen)
        ]
        path.write_text(
            "".join(json.dumps(r) + "\n" for r in seen + [math_problem(1000 + i) for i in range(300 - n_seen)])
        )
        return str(path)

    assert run_data(str(train), "train", validation(3), 300).notes[-1].startswith("overlap: 3 of 300")  # 1%: allowed
    with pytest.raises(ValueError, match="4 of 300 validation questions"):
        run_data(str(train), "train", validation(4), 300)


def test_bad_split_and_missing_source_name_the_flag(hub_mirror, monkeypatch):
    with pytest.raises(ValueError, match=r"--dataset: --dataset-split 'dev': math has splits train, test"):
        run_data("math", "dev", None, 10)
    with pytest.raises(ValueError, match=r"--validation-dataset: dataset 'nope.jsonl': no such file"):
        run_data("math", "train", "nope.jsonl", 10)
    monkeypatch.delenv(MIRROR_ENV)
    with pytest.raises(ValueError, match=r"--dataset: dataset 'no_such_name'"):
        run_data("no_such_name", "train", None, 10)


@pytest.mark.parametrize(
    "source",
    # openai/gsm8k through `datasets`; the shipped `gsm8k` is a folder of <split>.jsonl files, as `course` is. A run
    # each: by default math, math500 (a test set trained on when asked), openai/gsm8k and course; the other layouts
    # under -m slow (each is read by default in test_short_names_read_the_real_layouts and
    # test_an_evaluation_set_is_evaluated_whole_in_every_layout)
    [
        "math",
        "math500",
        pytest.param("competition_math", marks=pytest.mark.slow),
        pytest.param("hendrycks_math", marks=pytest.mark.slow),
        "openai/gsm8k",
        "course",
        pytest.param("lighteval_folder", marks=pytest.mark.slow),
        pytest.param("math500_jsonl", marks=pytest.mark.slow),
    ],
)
def test_a_grpo_run_starts_on_each_layout(hub_mirror, tiny_model_dir, tmp_path, source, capsys):
    dataset = {
        "course": str(write_course_math(tmp_path / "MATH", load_prompt("r1_zero"))),
        "lighteval_folder": str(hub_mirror / "DigitalLearningGmbH" / "MATH-lighteval"),
        "math500_jsonl": str(hub_mirror / "HuggingFaceH4" / "MATH-500" / "test.jsonl"),
    }.get(source, source)
    config = tiny_config(
        tiny_model_dir,
        tmp_path,
        dataset=dataset,
        prompt="r1_zero",
        n_eval_examples=2,
        sampling_max_tokens=4,
        sampling_min_tokens=1,
        train_on_evaluation_split=source.startswith("math500"),  # MATH-500 is a test set: trained on only when asked
    )
    rows = train_grpo(config)
    assert len(rows) == 1 and rows[0]["grpo_step"] == 1
    printed = capsys.readouterr().out
    assert "training on " in printed and re.search(r"overlap: 0 of [12] validation questions", printed)
    assert (config.output_dir / "policy" / "config.json").is_file()
