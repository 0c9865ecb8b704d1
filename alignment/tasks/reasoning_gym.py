"""`--task reasoning_gym:NAME[,NAME=WEIGHT...]`: reasoning-gym's procedural tasks as one TaskDefinition.

Rows are generated, not read: training rows with one seed, validation rows with another, each task's share of the
rows in proportion to its weight, and no training question equal to a validation question (checked, and a training
row that repeats one is replaced by the next one generated). `--task-config` gives a task its reasoning-gym
configuration ({"chain_sum": {"min_terms": 3}}).

A row is {"question", "answer", "metadata", "task", "prompt"}: reasoning-gym's entry (its metadata made JSON values),
the task's name (what evaluations break rewards down by) and the prompt: the question and the answer format. The
answer is `extract_answer`'s (the text of the last <answer> tag) and the reward `score` is reasoning-gym's own
`score_answer` of the row's dataset on it; `format` (weight 0.1) rewards a closed, non-empty <answer> tag. Both are
rebuilt from (source, settings) alone, so a grading worker scores as the trainer would.

reasoning-gym takes seconds to import: it is imported here only when a reasoning_gym source is used.
"""

import dataclasses
import difflib
import json
import math
import os
import random
import re
import subprocess
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from alignment.tasks.definition import Reward, Row, TaskDefinition

# no example inside the tags: a policy rewarded for the format could learn to copy it
ANSWER_FORMAT = "Give your final answer inside <answer></answer> tags: the answer alone, nothing else inside them."
DEFAULT_TRAIN_ROWS = 1000  # training rows of a mix when --n-train-examples is not set
DEFAULT_EVAL_ROWS = 256
SCORE_REWARD, FORMAT_REWARD, FORMAT_WEIGHT = "score", "format", 0.1
RUN_KEYS = ("seed", "size")  # configuration keys the run sets itself
ANSWER_TAG = re.compile(r"<answer>(.*?)(?:</answer>|\Z)", re.DOTALL)
CLOSED_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
VALIDATION_SEED_OFFSET = 1_000_000_007  # far from any training row's seed (reasoning-gym seeds row i with seed + i)
LEVEL_SEED_STRIDE = 10_000_019  # a curriculum level's training rows: their own seeds
# Tasks whose rows follow Python's string hash order (they iterate over sets of strings), which differs from one
# process to the next: they are drawn in an interpreter with PYTHONHASHSEED=0, so that a resumed run, a Ray actor or
# another seed's process draws the same rows (tests/test_reasoning_gym.py checks the list against the installed
# reasoning-gym under -m slow)
HASH_ORDERED = frozenset(
    {"isomorphic_strings", "knight_swap", "list_functions", "polynomial_multiplication", "ransom_note", "word_ladder"}
)
FIXED_HASHING_CHILD = """
import json, sys
from alignment.tasks.reasoning_gym import Mix
request = json.load(sys.stdin)
name, config, seed, count, exclude = request["args"]
try:
    print(json.dumps({"rows": Mix(**request["mix"]).generate(name, config, seed, count, frozenset(exclude))}))
except ValueError as error:
    print(json.dumps({"error": str(error)}))
"""
_FIXED_HASHING_REPLIES: dict[str, str] = {}  # a request's JSON: the child's reply


def extract_answer(completion: str) -> str | None:
    """The answer in `completion`: the text after the last `<answer>` up to its `</answer>` (or the end of the
    completion when unclosed); with no `<answer>` tag, the last non-empty line. Stripped; None when empty."""
    tags = ANSWER_TAG.findall(completion)
    if tags:
        answer = tags[-1].strip()
    else:
        lines = [line.strip() for line in completion.splitlines() if line.strip()]
        answer = lines[-1] if lines else ""
    return answer or None


def plain(value: Any) -> Any:
    """`value` as JSON values: tuples and sets as lists (sets sorted), numpy arrays and numbers as lists and numbers,
    dict keys as strings, anything else as its str."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=repr)
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "tolist"):  # numpy arrays and numbers
        return plain(value.tolist())
    return str(value)


def parse_weights(target: str) -> dict[str, float]:
    """`NAME[,NAME=WEIGHT...]` as {name: weight} (weight 1 when not given); a ValueError naming the bad part."""
    weights: dict[str, float] = {}
    for part in (p.strip() for p in target.split(",")):
        name, equals, text = (s.strip() for s in part.partition("="))
        if not name:
            raise ValueError(f"--task reasoning_gym:{target}: an empty task name (write NAME[,NAME=WEIGHT...])")
        try:
            weight = float(text) if equals else 1.0
        except ValueError:
            weight = math.nan
        if not (math.isfinite(weight) and weight > 0):
            raise ValueError(f"--task reasoning_gym:{target}: weight {text!r} of {name} is not a positive number")
        if name in weights:
            raise ValueError(f"--task reasoning_gym:{target}: {name} is named twice")
        weights[name] = weight
    return weights


def apportion(weights: Sequence[float], total: int) -> list[int]:
    """`total` split in proportion to `weights` (largest remainders): counts (n,) summing to `total`."""
    shares = [total * w / sum(weights) for w in weights]
    counts = [math.floor(s) for s in shares]
    by_remainder = sorted(range(len(shares)), key=lambda i: counts[i] - shares[i])
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _registry() -> dict[str, tuple[type, type]]:
    import reasoning_gym.factory  # seconds to import: only once a reasoning_gym source is used

    return reasoning_gym.factory.DATASETS


def _curricula() -> dict[str, type]:
    import reasoning_gym.factory

    return reasoning_gym.factory.CURRICULA


def config_keys(name: str) -> list[str]:
    """The configuration keys of reasoning-gym task `name` a user may set."""
    return [f.name for f in dataclasses.fields(_registry()[name][1]) if f.name not in RUN_KEYS]


@dataclass
class Mix:
    """A weighted mix of reasoning-gym tasks with their configurations, the run's seed and row counts; `levelled`:
    a curriculum sets each task's difficulty (its level's configuration, `config_at`)."""

    weights: dict[str, float]
    configs: dict[str, dict[str, Any]]  # as --task-config gives them
    seed: int
    n_train: int
    n_eval: int
    source: str  # as --task names it, for messages
    levelled: bool = False

    @classmethod
    def from_settings(cls, target: str, settings: Any) -> "Mix":
        """The mix `reasoning_gym:target` names, configured by --task-config; ValueErrors name what is wrong."""
        weights = parse_weights(target)
        known = _registry()
        for name in weights:
            if name not in known:
                close = difflib.get_close_matches(name, list(known), n=4, cutoff=0.6)
                hint = f"close: {', '.join(close)}" if close else f"reasoning-gym has {len(known)} tasks"
                raise ValueError(f"--task reasoning_gym:{target}: no reasoning-gym task {name!r} ({hint})")
        mix = cls(
            weights,
            task_configs(getattr(settings, "task_config", None), list(weights)),
            int(getattr(settings, "seed", 0) or 0),
            getattr(settings, "n_train_examples", None) or DEFAULT_TRAIN_ROWS,
            getattr(settings, "n_eval_examples", None) or DEFAULT_EVAL_ROWS,
            f"reasoning_gym:{target}",
            getattr(settings, "curriculum_threshold", None) is not None,
        )
        if mix.levelled:
            check_curricula(mix)
        for name in weights:  # a configuration reasoning-gym refuses fails now, in one line
            mix.dataset(name, mix.config_at(name, 0), 0, 1)
        return mix

    @property
    def names(self) -> list[str]:
        return list(self.weights)

    def curriculum(self, name: str, level: int) -> Any:
        """reasoning-gym's curriculum of task `name` with every attribute at `level` (or its last level)."""
        curriculum = _curricula()[name]()
        curriculum.set_global_level(level)
        return curriculum

    def top_level(self, name: str) -> int:
        return max(len(a.levels) for a in _curricula()[name]().attributes.values()) - 1

    def config_at(self, name: str, level: int) -> dict[str, Any]:
        """Task `name`'s configuration at curriculum level `level`: reasoning-gym's curriculum sets the fields of its
        attributes (each range from its first level to `level`), --task-config the others; without a curriculum,
        --task-config's."""
        if not self.levelled:
            return self.configs[name]
        config = self.curriculum(name, level).generate_configuration(defaults=self.configs[name])
        return {k: v for k, v in dataclasses.asdict(config).items() if k not in RUN_KEYS}

    def dataset(self, name: str, config: dict[str, Any], seed: int, size: int) -> Any:
        dataset_cls, config_cls = _registry()[name]
        try:
            return dataset_cls(config=config_cls(**config, seed=seed, size=size))
        except (AssertionError, ValueError, TypeError) as error:
            raise ValueError(f"--task-config {name} {json.dumps(config)}: reasoning-gym refuses it ({error})") from None

    def task_rows(self, name: str, level: int, count: int, exclude: frozenset[str] = frozenset()) -> list[Row]:
        """`count` training rows of task `name` at curriculum level `level` (0 without a curriculum), none of whose
        questions is in `exclude`: the same rows for the same arguments."""
        return self.generate(name, self.config_at(name, level), self.seed + level * LEVEL_SEED_STRIDE, count, exclude)

    def generate(
        self, name: str, config: dict[str, Any], seed: int, count: int, exclude: frozenset[str] = frozenset()
    ) -> list[Row]:
        """`count` rows of task `name` with `config`, the dataset seeded from `seed`, skipping questions in
        `exclude` (a ValueError when too few are left); a HASH_ORDERED task's drawn where string hashing is fixed."""
        if name in HASH_ORDERED and sys.flags.hash_randomization:
            return self.generate_with_fixed_hashing(name, config, seed, count, exclude)
        limit = 20 * count + 100
        dataset = self.dataset(name, config, seed + zlib.crc32(name.encode()), limit)
        rows: list[Row] = []
        for index in range(limit):
            if len(rows) == count:
                break
            entry = dataset[index]
            if entry["question"] not in exclude:
                rows.append(as_row(name, entry))
                check_scored_as_json(dataset, entry, rows[-1], self.source)
        if len(rows) < count:
            raise ValueError(
                f"--task {self.source}: {name} gave {len(rows)} training questions that are not validation questions "
                f"in {limit} tries, {count} needed: its configuration has too few distinct questions; ask for fewer "
                "(--n-train-examples, --n-eval-examples) or widen it with --task-config"
            )
        return rows

    def generate_with_fixed_hashing(
        self, name: str, config: dict[str, Any], seed: int, count: int, exclude: frozenset[str]
    ) -> list[Row]:
        """`generate` in a child interpreter started with PYTHONHASHSEED=0: the rows every process draws. A child
        takes seconds (it imports reasoning-gym) and a run asks for the same rows more than once (its prompts are
        built bare and in the chat turn): each request's reply is kept for the life of the process."""
        request = json.dumps({"mix": dataclasses.asdict(self), "args": [name, config, seed, count, sorted(exclude)]})
        if request not in _FIXED_HASHING_REPLIES:
            done = subprocess.run(
                [sys.executable, "-c", FIXED_HASHING_CHILD],
                input=request,
                env=os.environ | {"PYTHONHASHSEED": "0"},
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise RuntimeError(f"--task {self.source}: generating {name}'s rows failed: {done.stderr[-2000:]}")
            _FIXED_HASHING_REPLIES[request] = done.stdout
        reply = json.loads(_FIXED_HASHING_REPLIES[request])  # parsed again each time: the caller owns its rows
        if "error" in reply:
            raise ValueError(reply["error"])
        return reply["rows"]

    def counts(self, total: int) -> dict[str, int]:
        return dict(zip(self.names, apportion(list(self.weights.values()), total)))

    def validation_rows(self) -> list[Row]:
        """n_eval rows, each task's share by weight, at the first curriculum level."""
        seed = self.seed + VALIDATION_SEED_OFFSET
        return [
            r
            for name, n in self.counts(self.n_eval).items()
            for r in self.generate(name, self.config_at(name, 0), seed, n)
        ]

    def training_rows(self, exclude: frozenset[str]) -> list[Row]:
        """n_train rows, each task's share by weight, at the first curriculum level, in a seeded order."""
        rows = [r for name, n in self.counts(self.n_train).items() for r in self.task_rows(name, 0, n, exclude)]
        random.Random(self.seed).shuffle(rows)
        return rows


def check_curricula(mix: Mix) -> None:
    """With a curriculum every task of the mix needs reasoning-gym's curriculum for it, and leaves the fields its
    curriculum sets to it."""
    for name in mix.names:
        if name not in _curricula():
            raise ValueError(f"--curriculum-threshold: reasoning-gym has no curriculum for {name}")
        curriculum = _curricula()[name]()
        owned = set()
        for attribute in curriculum.attributes.values():
            owned |= {getattr(attribute, f, None) for f in ("field_name", "lower_field_name", "upper_field_name")}
        clash = sorted(owned & set(mix.configs[name]))
        if clash:
            raise ValueError(
                f"--task-config {name}: {', '.join(clash)} are set by its curriculum (--curriculum-threshold); "
                "leave them out"
            )


def as_row(name: str, entry: dict[str, Any]) -> Row:
    """A reasoning-gym entry as a row: its question, answer and metadata as JSON values, the task and the prompt."""
    question = entry["question"]
    return {
        "question": question,
        "answer": plain(entry["answer"]),
        "metadata": plain(entry.get("metadata", {})),
        "task": name,
        "prompt": f"{question}\n\n{ANSWER_FORMAT}",
    }


def check_scored_as_json(dataset: Any, entry: dict[str, Any], row: Row, source: str) -> None:
    """A ValueError when the row, its metadata made JSON values, scores the true answer otherwise than the entry:
    rewards read rows (they travel to grading workers and logs as JSON), so such a task cannot be scored."""
    if not isinstance(entry["answer"], str):
        return
    as_json = {"question": row["question"], "answer": row["answer"], "metadata": row["metadata"]}
    if dataset.score_answer(entry["answer"], as_json) != dataset.score_answer(entry["answer"], entry):
        raise ValueError(
            f"--task {source}: {row['task']} scores its own answer otherwise once its metadata is JSON values "
            "(its score_answer compares tuples or other Python objects), so it cannot be trained on here"
        )


def task_configs(text: str | None, names: list[str]) -> dict[str, dict[str, Any]]:
    """--task-config's JSON as each task's configuration ({} for a task it does not name); one-line errors."""
    given: Any = {}
    if text:
        try:
            given = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"--task-config is not JSON ({error})") from None
    if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
        raise ValueError('--task-config for reasoning_gym is {"TASK": {"KEY": VALUE, ...}, ...}')
    for name, config in given.items():
        if name not in names:
            raise ValueError(f"--task-config names {name!r}, which is not in the mix ({', '.join(names)})")
        valid = config_keys(name)
        for key in config:
            if key not in valid:
                raise ValueError(f"--task-config {name}: no key {key!r} (its keys: {', '.join(valid)})")
    return {name: dict(given.get(name, {})) for name in names}


def check_disjoint(train: Sequence[Row], validation: Sequence[Row], source: str) -> None:
    """A ValueError when a training question is also a validation question."""
    shared = {r["question"] for r in train} & {r["question"] for r in validation}
    if shared:
        raise ValueError(f"--task {source}: {len(shared)} training questions are validation questions too")


def scorer(configs: dict[str, dict[str, Any]]) -> Callable[[str], Callable[[str | None, dict[str, Any]], float]]:
    """`score_answer` of a task by name, built once per process (with the task's configuration where it has one)."""
    built: dict[str, Callable[[str | None, dict[str, Any]], float]] = {}

    def score_answer(name: str) -> Callable[[str | None, dict[str, Any]], float]:
        if name not in built:
            dataset_cls, config_cls = _registry()[name]
            built[name] = dataset_cls(config=config_cls(**configs.get(name, {}))).score_answer
        return built[name]

    return score_answer


def rewards(configs: dict[str, dict[str, Any]]) -> list[Reward]:
    """`score`: reasoning-gym's score_answer of the row's dataset (metadata's source_dataset) on the extracted
    answer; `format`: 1 for a closed, non-empty <answer> tag."""
    score_answer = scorer(configs)

    def score(completion: str, row: Row) -> float:
        entry = {"question": row["question"], "answer": row["answer"], "metadata": row["metadata"]}
        return float(score_answer(row["metadata"]["source_dataset"])(extract_answer(completion), entry))

    def answer_format(completion: str, row: Row) -> float:
        return float(any(tag.strip() for tag in CLOSED_ANSWER.findall(completion)))

    return [Reward(score, name=SCORE_REWARD), Reward(answer_format, weight=FORMAT_WEIGHT, name=FORMAT_REWARD)]


def reasoning_gym_task(target: str, settings: Any) -> TaskDefinition:
    """The TaskDefinition of `--task reasoning_gym:target`: checked now (names, weights, configurations, the
    curriculum), rows generated when the run asks for them."""
    mix = Mix.from_settings(target, settings)

    def rows(run_settings: Any) -> tuple[list[Row], list[Row]]:
        current = Mix.from_settings(target, run_settings)
        validation = current.validation_rows()
        train = current.training_rows(frozenset(r["question"] for r in validation))
        check_disjoint(train, validation, current.source)
        return train, validation

    return TaskDefinition(
        rows=rows,
        rewards=rewards(mix.configs),
        prompt=None,  # the row's prompt: the question and the answer format
        answer_field="answer",
        category_field="task",
        stop=("</answer>",),
    )
