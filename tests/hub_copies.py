"""Small local copies of the hub's MATH and GSM8K repos, laid out as the real repos are (file names, README configs,
columns, splits), and the course's `MATH/` folder; loaded through `datasets` exactly as downloads of them would be.

The problems are made up, but related as the real ones are: MATH-500 is a subset of MATH's test split,
competition_math holds train and test in one split, hendrycks_math splits the same problems by subject.
"""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SUBJECTS = [
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
]
TYPES = [
    "Algebra",
    "Counting & Probability",
    "Geometry",
    "Intermediate Algebra",
    "Number Theory",
    "Prealgebra",
    "Precalculus",
]
N_TRAIN, N_TEST, N_MATH500 = 70, 35, 10
N_GSM8K_TRAIN, N_GSM8K_TEST = 40, 20


def math_problem(i: int) -> dict[str, str]:
    """Problem i, its worked solution ending in a boxed answer with nested braces (every fifth uses \\fbox)."""
    box = "\\fbox" if i % 5 == 4 else "\\boxed"
    answer = f"\\frac{{{i * (i + 1)}}}{{{i + 2}}}"
    return {
        "problem": f"Problem {i}: express ${i}\\cdot{i + 1}$ divided by ${i + 2}$ as a fraction.",
        "level": f"Level {1 + i % 5}",
        "type": TYPES[i % 7],
        "solution": f"We multiply to get ${i * (i + 1)}$, so the result is ${box}{{{answer}}}$.",
        "answer": answer,
    }


def by_subject(ids: range) -> list[int]:
    """MATH's files are grouped by subject, and so are its splits."""
    return sorted(ids, key=lambda i: (i % 7, i))


TRAIN_IDS, TEST_IDS = by_subject(range(N_TRAIN)), by_subject(range(N_TRAIN, N_TRAIN + N_TEST))
MATH500_IDS = TEST_IDS[::3][:N_MATH500]


def gsm8k_problem(i: int, socratic: bool = False) -> dict[str, str]:
    steps = (
        f"How many does Ann have? ** Ann has {i} + 3 = <<{i}+3={i + 3}>>{i + 3}"
        if socratic
        else f"Ann has {i} + 3 = <<{i}+3={i + 3}>>{i + 3}"
    )
    return {
        "question": f"Ann has {i} apples and gets 3 more. How many apples does she have?",
        "answer": f"{steps} apples.\n#### {i + 3}",
    }


def _parquet(path: Path, rows: list[dict], columns: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({c: [r[c] for r in rows] for c in columns}), path)


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _card(folder: Path, configs: dict[str, dict[str, str]] | None) -> None:
    """README.md with the repo's `configs:` front matter (config -> split -> file pattern), as on the hub."""
    lines = ["---"]
    if configs:
        lines.append("configs:")
        for name, splits in configs.items():
            lines += [f"- config_name: {name}", "  data_files:"]
            for split, pattern in splits.items():
                lines += [f"  - split: {split}", f"    path: {pattern}"]
    lines += ["---", f"# {folder.name} (a small local copy for tests)", ""]
    (folder / "README.md").write_text("\n".join(lines))


def write_hub_mirror(root: Path) -> Path:
    """Every hub repo that a short name names, under root/<owner>/<name>/; returns root."""
    math_columns = ["problem", "level", "solution", "type"]  # the parquet copies carry no `answer`
    train, test = [math_problem(i) for i in TRAIN_IDS], [math_problem(i) for i in TEST_IDS]

    lighteval = root / "DigitalLearningGmbH" / "MATH-lighteval"
    _parquet(lighteval / "data" / "train-00000-of-00001.parquet", train, math_columns)
    _parquet(lighteval / "data" / "test-00000-of-00001.parquet", test, math_columns)
    configs = {"default": {"train": "data/train-*", "test": "data/test-*"}}
    for subject, kind in zip(SUBJECTS, TYPES):
        for split, rows in (("train", train), ("test", test)):
            _parquet(
                lighteval / subject / f"{split}-00000-of-00001.parquet",
                [r for r in rows if r["type"] == kind],
                math_columns,
            )
        configs[subject] = {"train": f"{subject}/train-*", "test": f"{subject}/test-*"}
    _card(lighteval, configs)

    hendrycks = root / "EleutherAI" / "hendrycks_math"
    configs = {}
    for subject, kind in zip(SUBJECTS, TYPES):
        for split, rows in (("train", train), ("test", test)):
            _parquet(
                hendrycks / subject / f"{split}-00000-of-00001.parquet",
                [r for r in rows if r["type"] == kind],
                ["problem", "level", "type", "solution"],
            )
        configs[subject] = {"train": f"{subject}/train-*", "test": f"{subject}/test-*"}
    _card(hendrycks, configs)

    competition = root / "qwedsacf" / "competition_math"
    _parquet(
        competition / "data" / "train-00000-of-00001-7320a6f3aba8ebd2.parquet",
        train + test,
        ["problem", "level", "type", "solution"],
    )
    _card(competition, None)

    math500 = root / "HuggingFaceH4" / "MATH-500"
    _jsonl(
        math500 / "test.jsonl",
        [
            {
                "problem": r["problem"],
                "solution": r["solution"],
                "answer": r["answer"],
                "subject": r["type"],
                "level": int(r["level"].split()[-1]),
                "unique_id": f"test/{i}.json",
            }
            for i, r in zip(MATH500_IDS, map(math_problem, MATH500_IDS))
        ],
    )
    _card(math500, None)

    gsm8k = root / "openai" / "gsm8k"
    for config, socratic in (("main", False), ("socratic", True)):
        for split, ids in (
            ("train", range(N_GSM8K_TRAIN)),
            ("test", range(N_GSM8K_TRAIN, N_GSM8K_TRAIN + N_GSM8K_TEST)),
        ):
            _parquet(
                gsm8k / config / f"{split}-00000-of-00001.parquet",
                [gsm8k_problem(i, socratic) for i in ids],
                ["question", "answer"],
            )
    _card(gsm8k, {c: {"train": f"{c}/train-*", "test": f"{c}/test-*"} for c in ("main", "socratic")})
    return root


def write_course_math(folder: Path, r1_zero_template: str) -> Path:
    """The course's MATH/ folder: train.jsonl without `answer`, validation.jsonl with it, and sft.jsonl traces."""
    train = [{k: v for k, v in math_problem(i).items() if k != "answer"} for i in TRAIN_IDS]
    _jsonl(folder / "train.jsonl", train)
    _jsonl(folder / "validation.jsonl", [math_problem(i) for i in TEST_IDS])
    _jsonl(
        folder / "sft.jsonl",
        [
            {
                "prompt": r1_zero_template.replace("{question}", p["problem"]),
                "response": f" {p['solution']} </think> <answer> {p['answer']} </answer>",
                "ground_truth": p["answer"],
            }
            for p in map(math_problem, TRAIN_IDS)
        ],
    )
    return folder
