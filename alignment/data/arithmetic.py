"""Arithmetic word problems generated from a seed: a math task small models can learn in minutes on a CPU.

A source name picks the difficulty, read by every loader like a dataset's name:

    arithmetic                                   # 1 to 2 operations, numbers 1..20, seed 0
    arithmetic?ops=1-3&max=50&seed=1&train=4000&test=200

`ops` is how many operations a problem chains (1 to 3, a single number or a range), `min`/`max` bound the numbers
the problem states, `seed` draws the training problems, `train`/`test` are the splits' sizes. A problem is in the
test split or not by a hash of its content (its numbers and operations, not its wording), so the held-out problems
are the same for every seed and no training problem, in any phrasing and from any seed, is one of them; the test
split itself is drawn with a fixed seed, so changing `seed` changes only what is trained on.

Each problem is a GSM8K-shaped record: `question`, and `answer` holding the worked solution, one line per
operation, then `#### N`; so the r1_zero grader checks N and SFT turns the lines into a reasoning trace.
Answers are whole numbers: subtraction never goes below zero and division is exact.

    uv run scripts/write_arithmetic.py 'arithmetic?ops=1-2' --out data/arithmetic   # train.jsonl, test.jsonl
"""

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import parse_qsl

NAME = "arithmetic"
SPLITS = ("train", "test")
TEST_SEED = 1_000_003  # the held-out problems' own seed: the same exam whatever --seed trains on
TEST_SHARE = 8  # one problem in 8 (by content hash) may be a test problem, the rest training ones
MAX_DRAWS_PER_PROBLEM = 200  # a split the ranges cannot fill stops with an error instead of looping

PEOPLE = ("Ava", "Ben", "Chloe", "Dan", "Emma", "Finn", "Grace", "Hugo", "Ivy", "Jack", "Lena", "Max", "Nora", "Omar")
ITEMS = ("apples", "marbles", "stickers", "coins", "books", "pencils", "cards", "shells", "stamps", "cookies")

# How a problem starts, then one sentence per operation: "+", "-" and "*" take a number, "/" divides into equal shares.
OPENINGS = (
    "{name} has {a} {items}.",
    "{name} starts with {a} {items}.",
    "There are {a} {items} in {name}'s box.",
)
STEPS: dict[str, tuple[str, ...]] = {
    "+": ("Then {name} gets {b} more.", "A friend gives {name} {b} more {items}.", "{name} finds {b} more {items}."),
    "-": ("Then {name} gives away {b}.", "{name} loses {b} of them.", "{name} uses {b} of the {items}."),
    "*": (
        "Then the number of {items} becomes {b} times as many.",
        "{name} multiplies the pile by {b}.",
        "{name} ends up with {b} times as many {items}.",
    ),
    "/": (
        "Then {name} shares them equally among {b} friends and keeps one share.",
        "{name} splits them into {b} equal groups and keeps one group.",
        "{name} divides the {items} equally into {b} bags and keeps one bag.",
    ),
}
QUESTIONS = (
    "How many {items} does {name} have now?",
    "How many {items} are there now?",
    "What is the number of {items} at the end?",
)
APPLY: dict[str, Callable[[int, int], int]] = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "/": lambda x, y: x // y,
}


@dataclass(frozen=True)
class ArithmeticSpec:
    """A difficulty and the sizes of the splits: the parameters of an `arithmetic?...` source name."""

    min_ops: int = 1
    max_ops: int = 2
    min_value: int = 1
    max_value: int = 20
    seed: int = 0
    n_train: int = 2000
    n_test: int = 200


@dataclass(frozen=True)
class Problem:
    question: str
    start: int
    steps: tuple[tuple[str, int], ...]  # (operation, operand) applied in order
    answer: int

    def content(self) -> str:
        """The problem without its wording: what decides its split and what makes two problems the same."""
        return " ".join([str(self.start)] + [f"{op}{b}" for op, b in self.steps])

    def solution(self) -> str:
        """One line per operation, then `#### answer` (GSM8K's layout)."""
        lines, value = [], self.start
        for op, b in self.steps:
            result = APPLY[op](value, b)
            lines.append(f"{value} {op} {b} = {result}")
            value = result
        return "\n".join(lines + [f"#### {self.answer}"])

    def record(self) -> dict[str, str]:
        return {"question": self.question, "answer": self.solution()}


def is_arithmetic(source: str) -> bool:
    return source == NAME or source.startswith(NAME + "?")


def _int(key: str, text: str, source: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"dataset {source!r}: {key}={text!r} is not a whole number") from None


def parse_source(source: str) -> ArithmeticSpec:
    """`arithmetic?ops=1-3&max=50&...` -> its spec; ValueError naming the source and the bad parameter."""
    if not is_arithmetic(source):
        raise ValueError(f"dataset {source!r} is not an {NAME} source ({NAME} or {NAME}?ops=1-2&max=20&...)")
    values = asdict(ArithmeticSpec())
    keys = {"min": "min_value", "max": "max_value", "seed": "seed", "train": "n_train", "test": "n_test"}
    _, _, query = source.partition("?")
    for key, text in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if key == "ops":
            low, _, high = text.partition("-")
            values["min_ops"], values["max_ops"] = _int(key, low, source), _int(key, high or low, source)
        elif key in keys:
            values[keys[key]] = _int(key, text, source)
        else:
            raise ValueError(f"dataset {source!r}: unknown parameter {key!r} (known: ops, {', '.join(keys)})")
    spec = ArithmeticSpec(**values)
    if not 1 <= spec.min_ops <= spec.max_ops <= 3:
        raise ValueError(f"dataset {source!r}: ops must be a range within 1-3, got {spec.min_ops}-{spec.max_ops}")
    if not 1 <= spec.min_value < spec.max_value:
        raise ValueError(f"dataset {source!r}: needs 1 <= min < max, got min={spec.min_value} max={spec.max_value}")
    if spec.n_train < 1 or spec.n_test < 1:
        raise ValueError(f"dataset {source!r}: train and test must be at least 1")
    return spec


def _operand(op: str, value: int, spec: ArithmeticSpec, rng: random.Random) -> int | None:
    """A number for `value op number` within the spec's range whose result is a whole number >= 0, or None."""
    low, high = spec.min_value, spec.max_value
    if op == "-":
        high = min(high, value)
    elif op == "*":
        low, high = max(low, 2), min(high, 9)  # small factors: word problems multiply by a few, not by 40
    elif op == "/":
        divisors = [d for d in range(max(low, 2), min(high, 9) + 1) if value % d == 0 and value // d > 0]
        return rng.choice(divisors) if divisors else None
    return rng.randint(low, high) if low <= high else None


def draw_problem(spec: ArithmeticSpec, rng: random.Random) -> Problem | None:
    """One problem, or None when the drawn operations cannot be completed from the drawn start."""
    value = start = rng.randint(spec.min_value, spec.max_value)
    steps = []
    for _ in range(rng.randint(spec.min_ops, spec.max_ops)):
        op = rng.choice("+-*/")
        b = _operand(op, value, spec, rng)
        if b is None:
            return None
        steps.append((op, b))
        value = APPLY[op](value, b)
    names = {"name": rng.choice(PEOPLE), "items": rng.choice(ITEMS)}
    sentences = [rng.choice(OPENINGS).format(a=start, **names)]
    sentences += [rng.choice(STEPS[op]).format(b=b, **names) for op, b in steps]
    sentences.append(rng.choice(QUESTIONS).format(**names))
    question = " ".join(s[0].upper() + s[1:] for s in sentences)
    return Problem(question, start, tuple(steps), value)


def in_test_split(problem: Problem) -> bool:
    digest = hashlib.sha256(problem.content().encode()).digest()
    return int.from_bytes(digest[:8], "big") % TEST_SHARE == 0


def generate(spec: ArithmeticSpec, split: str) -> list[Problem]:
    """The `split` (train or test) of `spec`: distinct problems (by content), the same ones every call."""
    if split not in SPLITS:
        raise ValueError(f"{NAME} has splits {', '.join(SPLITS)}, not {split!r}")
    test = split == "test"
    size = spec.n_test if test else spec.n_train
    rng = random.Random(TEST_SEED if test else spec.seed)
    problems: dict[str, Problem] = {}
    for _ in range(size * MAX_DRAWS_PER_PROBLEM):
        problem = draw_problem(spec, rng)
        if problem is not None and in_test_split(problem) == test:
            problems.setdefault(problem.content(), problem)
            if len(problems) == size:
                return list(problems.values())
    raise ValueError(
        f"{NAME}: found only {len(problems)} distinct {split} problems of {size} asked for with ops "
        f"{spec.min_ops}-{spec.max_ops} and numbers {spec.min_value}-{spec.max_value}: widen the range or ask fewer"
    )


def arithmetic_records(source: str, split: str) -> list[tuple[str, dict[str, str]]]:
    """(where, GSM8K-shaped record) for each problem of `split` of the source, as the dataset loaders read rows."""
    spec = parse_source(source)
    return [(f"{source}[{split}] problem {i}", p.record()) for i, p in enumerate(generate(spec, split))]


def write_jsonl(source: str, folder: Path) -> list[Path]:
    """Both splits as `<split>.jsonl` in `folder` (a dataset folder every loader reads); returns the files."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for split in SPLITS:
        path = folder / f"{split}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for _, record in arithmetic_records(source, split):
                f.write(json.dumps(record) + "\n")
        written.append(path)
    return written
