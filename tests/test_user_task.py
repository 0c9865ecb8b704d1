"""A task of the user's own, named by --task file.py:NAME: its rows read from jsonl, parquet or csv with other field
names, its prompts, its weighted rewards graded in worker processes and logged one by one, its errors as one line
before any model loads, and a reward that fails mid-run leaving a checkpoint to resume."""

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from alignment.grpo.config import GRPOConfig
from alignment.grpo_run import train_grpo
from alignment.prompts import chat_renderer
from alignment.tasks.building import run_tasks
from alignment.tasks.loading import reward_set
from alignment.tasks.rows import read_rows

TASK_FILE = """
from pathlib import Path
from alignment.tasks import Reward, TaskDefinition

def contains(completion, row):
    return float(str(row["answer"]) in completion)

def short(completion, row):
    return None if row["level"] == "skip" else float(len(completion) < 12)

task = TaskDefinition(
    rows={rows!r},
    prompt="Solve: {{question}}",
    rewards=[contains, Reward(short, weight=0.5)],
    answer_field="answer",
    category_field="level",
    chat={chat},
)
"""

ROWS = [
    {"problem": f"{a} plus {b}", "solution": str(a + b), "level": ["easy", "hard", "skip"][a % 3]}
    for a in range(12)
    for b in range(2)
]


def write_rows(folder: Path, kind: str) -> Path:
    """ROWS as one file of `kind`, or for `folder-parquet` as train/test parquet files in a folder."""
    import pandas as pd

    frame = pd.DataFrame(ROWS)
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "jsonl":
        path = folder / "rows.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif kind == "csv":
        path = folder / "rows.csv"
        frame.to_csv(path, index=False)
    elif kind == "folder-parquet":
        path = folder / "data"
        path.mkdir()
        frame.iloc[:20].to_parquet(path / "train.parquet")
        frame.iloc[20:].to_parquet(path / "test.parquet")
    else:  # a dataset folder laid out as a hub repository: data/<split>-00000-of-00001.parquet
        path = folder / "repo"
        (path / "data").mkdir(parents=True)
        frame.iloc[:20].to_parquet(path / "data" / "train-00000-of-00001.parquet")
        frame.iloc[20:].to_parquet(path / "data" / "test-00000-of-00001.parquet")
    return path


def write_task(tmp_path: Path, rows: str, chat: bool = False, body: str = TASK_FILE) -> str:
    path = tmp_path / "my_task.py"
    path.write_text(textwrap.dedent(body.format(rows=rows, chat=chat)))
    return f"{path}:task"


def settings(model: str, tmp_path: Path, task: str, **overrides) -> GRPOConfig:
    base = GRPOConfig(
        model=model,
        task=task,
        task_fields="question=problem,answer=solution",
        n_grpo_steps=1,
        learning_rate=1e-3,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        eval_every=1,
        n_eval_examples=4,
        checkpoint_every=1,
        grader_workers=1,
        backend="hf",
        output_dir=tmp_path / "run",
    )
    return replace(base, **overrides)


@pytest.mark.parametrize("kind", ["jsonl", "csv", "folder-parquet", "hub-layout"])
def test_rows_are_read_renamed_split_and_prompted(tmp_path, kind):
    source = write_rows(tmp_path / "data", kind)
    config = settings("unused", tmp_path, write_task(tmp_path, str(source)), n_eval_examples=3)
    train, validation = run_tasks(config)
    if kind in ("folder-parquet", "hub-layout"):  # the source's test split validates, up to --n-eval-examples
        assert set(read_rows(str(source))) == {"train", "test"}
        assert len(train.questions) == 20 and len(validation.questions) == 3
    else:  # one split: a tenth held out by seed 0, the same every time
        assert len(train.questions) == 22 and len(validation.questions) == 2
        assert run_tasks(config)[1].questions == validation.questions
    assert not set(train.questions) & set(validation.questions)
    row = train.truths[0]
    assert train.questions[0] == f"Solve: {row['problem']}" and row["answer"] == row["solution"]
    assert train.template == "{question}"  # chat=False: the prompt as it is
    assert train.categories is not None and set(train.categories) <= {"easy", "hard", "skip"}
    assert train.logged_truth(row) == row["solution"]


def test_training_subsets_and_overlap_follow_run_datas_rules(tmp_path):
    source = write_rows(tmp_path / "data", "jsonl")
    config = settings("unused", tmp_path, write_task(tmp_path, str(source)), n_train_examples=5)
    train, _ = run_tasks(config)
    assert len(train.questions) == 5 and run_tasks(config)[0].questions == train.questions  # seed 0: the same 5
    overlapping = replace(config, n_train_examples=None, task_validation_data=str(source))
    with pytest.raises(ValueError, match="validation prompts are also training prompts.*--allow-validation-overlap"):
        run_tasks(overlapping)
    _, validation = run_tasks(replace(overlapping, allow_validation_overlap=True))
    assert len(validation.questions) == 4  # --n-eval-examples of --task-validation-data's rows


def test_a_chat_task_is_in_the_models_chat_turn_with_its_system_prompt(tmp_path, tokenizer):
    body = TASK_FILE.replace("chat={chat},", "chat={chat}, system_prompt='Be brief.',")
    config = settings("unused", tmp_path, write_task(tmp_path, str(write_rows(tmp_path, "jsonl")), True, body))
    bare, _ = run_tasks(config)
    chat, _ = run_tasks(config, chat_renderer(tokenizer), check=False)
    assert bare.template == "{question}" and chat.questions == bare.questions
    assert "Be brief." in chat.template and chat.template.index("Be brief.") < chat.template.index("{question}")
    assert chat.template.startswith("<|im_start|>system")


def test_conversational_rows_are_rendered_whole(tmp_path, tokenizer):
    rows = [{"prompt": [{"role": "user", "content": f"Say {i}"}], "answer": str(i)} for i in range(20)]
    body = (
        "from alignment.tasks import TaskDefinition\ntask = TaskDefinition(rows={rows!r}, rewards=[lambda c, r: 1.0])"
    )
    config = replace(settings("unused", tmp_path, write_task(tmp_path, rows, body=body)), task_fields=None)
    bare, _ = run_tasks(config)
    chat, _ = run_tasks(config, chat_renderer(tokenizer), check=False)
    assert bare.questions[0].startswith("Say ") and chat.template == "{question}"
    assert chat.questions[0].startswith("<|im_start|>") and "Say " in chat.questions[0]


def test_a_user_task_trains_with_weighted_rewards_logged_each(tiny_model_dir, tmp_path):
    source = write_rows(tmp_path / "data", "jsonl")
    config = settings(str(tiny_model_dir), tmp_path, write_task(tmp_path, str(source)), grader_workers=2)
    config = replace(config, log_train_rollouts_every=1, reward_weights="contains=2")
    rows = train_grpo(config)
    step = rows[-1]
    logged = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    trained = [r for r in logged if "ground_truth" in r]
    assert len(trained) == 4 and all(isinstance(r["ground_truth"], str) for r in trained)  # answer_field
    for r in trained:  # the weighted sum: 2 x contains + 0.5 x short (null: did not apply, left out)
        assert r["reward"] == pytest.approx(2 * r["reward_contains"] + 0.5 * (r["reward_short"] or 0.0))
    assert step["train_reward"] == pytest.approx(sum(r["reward"] for r in trained) / 4)
    assert step["train_reward_contains"] == pytest.approx(sum(r["reward_contains"] for r in trained) / 4)
    applied = [r["reward_short"] for r in trained if r["reward_short"] is not None]  # a nanmean, as TRL's
    assert step.get("train_reward_short") == (pytest.approx(sum(applied) / len(applied)) if applied else None)
    metrics = [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [m for m in metrics if "eval_reward" in m]
    assert evals and all("eval_reward_contains" in m for m in evals)
    assert any(k.startswith("eval_reward@") for k in evals[0])


BAD_REWARDS = """
from alignment.tasks import Reward, TaskDefinition

def contains(completion, row):
    return float(str(row["answer"]) in completion)

def raises(completion, row):
    return row["no_such_field"]

def nan(completion, row):
    return float("nan")

def text(completion, row):
    return "good"

def one_argument(completion):
    return 1.0

task = TaskDefinition(rows={rows!r}, prompt="Solve: {{question}}", rewards=[contains])
raising = TaskDefinition(rows={rows!r}, prompt="Solve: {{question}}", rewards=[contains, raises])
nan_task = TaskDefinition(rows={rows!r}, prompt="Solve: {{question}}", rewards=[nan])
text_task = TaskDefinition(rows={rows!r}, prompt="Solve: {{question}}", rewards=[text])
wrong_shape = TaskDefinition(rows={rows!r}, prompt="Solve: {{question}}", rewards=[one_argument])
"""


@pytest.mark.parametrize(
    ("attribute", "overrides", "says"),
    [
        ("task", {"task_fields": "question=nope"}, "field 'question' is column 'nope', which row 0 lacks"),
        ("task", {"task_fields": None}, "the prompt names field 'question', which row 0 lacks"),
        ("raising", {}, "reward raises on row .*raised KeyError: 'no_such_field'"),
        ("nan_task", {}, "reward nan on row .*returned nan"),
        ("text_task", {}, "reward text on row .*returned 'good'"),
        ("wrong_shape", {}, "reward one_argument must take two arguments"),
        ("no_such_name", {}, "defines no 'no_such_name'"),
        ("task", {"reward_weights": "typo=2"}, r"no reward 'typo' \(its rewards: contains\)"),
        ("task", {"task_data": "missing.jsonl"}, "--task-data missing.jsonl: no such file"),
        ("task", {"task_validation_data": "missing.jsonl"}, "--task-validation-data missing.jsonl"),
    ],
)
def test_bad_inputs_fail_in_one_line_before_any_model_loads(tmp_path, attribute, overrides, says):
    task = write_task(tmp_path, str(write_rows(tmp_path / "data", "jsonl")), body=BAD_REWARDS)
    missing_model = str(tmp_path / "no-model-here")  # reported only if the task's error did not come first
    config = replace(settings(missing_model, tmp_path, task.replace(":task", f":{attribute}")), **overrides)
    with pytest.raises(ValueError, match=says) as error:
        train_grpo(config)
    assert "\n" not in str(error.value) and "no-model-here" not in str(error.value)
    assert not (tmp_path / "run" / "settings.json").exists()  # nothing was started


def test_a_missing_task_file_is_named(tmp_path):
    config = settings(str(tmp_path / "no-model-here"), tmp_path, f"{tmp_path / 'nowhere.py'}:task")
    with pytest.raises(ValueError, match="--task: no file .*nowhere.py"):
        train_grpo(config)


FLAKY = """
from pathlib import Path
from alignment.tasks import TaskDefinition

COUNT, BROKEN = Path({count!r}), Path({broken!r})

def contains(completion, row):
    calls = int(COUNT.read_text()) + 1 if COUNT.exists() else 1
    COUNT.write_text(str(calls))
    if calls > {calls_before_step_2} and BROKEN.exists():
        raise RuntimeError("the judge is down")
    return float(str(row["answer"]) in completion)

task = TaskDefinition(rows={rows!r}, prompt="Solve: {{question}}", rewards=[contains])
"""


def test_a_reward_failing_mid_run_stops_it_and_the_run_resumes_once_fixed(tiny_model_dir, tmp_path):
    count, broken = tmp_path / "calls", tmp_path / "broken"
    broken.touch()
    # preflight 1 call, step 0's validation 2, step 1's rollouts 4: the 8th call, in step 2, raises
    body = FLAKY.replace("{count!r}", repr(str(count))).replace("{broken!r}", repr(str(broken)))
    body = body.replace("{calls_before_step_2}", "7")
    task = write_task(tmp_path, str(write_rows(tmp_path / "data", "jsonl")), body=body)
    config = settings(str(tiny_model_dir), tmp_path, task, n_grpo_steps=3, eval_every=10, n_eval_examples=2)
    with pytest.raises(ValueError, match="reward contains on row .*raised RuntimeError: the judge is down"):
        train_grpo(config)
    assert json.loads((config.output_dir / "checkpoint" / "COMPLETE").read_text()) == 1
    broken.unlink()  # the judge is back
    resumed = train_grpo(config, resume=True)
    assert [row["grpo_step"] for row in resumed] == [2, 3]
    metrics = [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m["grpo_step"] for m in metrics if "train_reward" in m]
    assert steps == [1, 2, 3]  # step 1's row, written before the failure, kept once


def test_eval_zero_shot_and_best_of_n_report_each_reward_and_category(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from scripts import best_of_n, eval_zero_shot

    task = write_task(tmp_path, str(write_rows(tmp_path / "data", "folder-parquet")))
    common = ["--task", task, "--task-fields", "question=problem,answer=solution", "--model", tiny_model_dir]
    common += ["--limit", 3, "--max-tokens", 4, "--backend", "hf", "--grader-workers", 2]
    out = tmp_path / "eval"
    result = CliRunner().invoke(eval_zero_shot.app, [str(a) for a in [*common, "--output-dir", out]])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert summary["num_examples"] == len(lines) == 3
    assert summary["reward"] == pytest.approx(sum(line["reward"] for line in lines) / 3)
    assert summary["reward_contains"] == pytest.approx(sum(line["reward_contains"] for line in lines) / 3)
    levels = {line["ground_truth"]["level"] for line in lines}  # no answer_field in the file: the row is the truth
    assert {k.removeprefix("reward@") for k in summary if k.startswith("reward@")} == levels
    assert all(line["prompt"].startswith("Solve: ") for line in lines)

    out = tmp_path / "best"
    flags = [*common, "--n-max", 2, "--ns", 1, "--ns", 2, "--success-reward", 0.5, "--output-dir", out]
    result = CliRunner().invoke(best_of_n.app, [str(a) for a in flags])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    lines = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert summary["num_problems"] == 3 and len(lines) == 6 and summary["samples"]["num_examples"] == 6
    solved = [sum(line["reward"] >= 0.5 for line in lines[i : i + 2]) for i in range(0, 6, 2)]
    assert summary["pass_at"]["2"] == pytest.approx(sum(s > 0 for s in solved) / 3)
    assert "reward_contains" in summary["samples"]


EVALUATED_TASK = """
from alignment.tasks import TaskDefinition

def contains(completion, row):
    return float(str(row["answer"]) in completion)

def training_rows(settings):
    raise AssertionError("an evaluation reads no training row")

task = TaskDefinition(
    rows=training_rows,
    evaluation_rows={rows!r},
    prompt="Solve: {{question}}",
    rewards=[contains],
    fields={{"question": "problem", "answer": "solution"}},
    chat={chat},
)
"""


def test_a_task_is_evaluated_on_its_evaluation_rows_whole(tiny_model_dir, tmp_path):
    """A TaskDefinition's evaluation_rows are what eval_zero_shot evaluates (the test split of a folder, whole), its
    training rows never read; best_of_n's N=1 reads that run's generations, graded again against the task's rows."""
    from typer.testing import CliRunner

    from scripts import best_of_n, eval_zero_shot

    task = write_task(tmp_path, str(write_rows(tmp_path / "data", "folder-parquet")), body=EVALUATED_TASK)
    common = ["--task", task, "--model", tiny_model_dir, "--max-tokens", 4, "--backend", "hf", "--grader-workers", 1]
    zero = tmp_path / "eval"
    result = CliRunner().invoke(eval_zero_shot.app, [str(a) for a in [*common, "--output-dir", zero]])
    assert result.exit_code == 0, result.output
    assert "evaluating the 4 rows of" in result.output and "[test]" in result.output
    summary = json.loads((zero / "summary.json").read_text())
    lines = [json.loads(line) for line in (zero / "generations.jsonl").read_text().splitlines()]
    assert [line["prompt"] for line in lines] == [f"Solve: {row['problem']}" for row in ROWS[20:]]
    assert [line["ground_truth"]["solution"] for line in lines] == [row["solution"] for row in ROWS[20:]]
    assert summary["num_examples"] == 4 and "counts" not in summary  # no format or answer graded: no categories
    for line, row in zip(lines[:3], ROWS[20:]):  # three of the four answered right, to be found again at N=1
        line["response"] = f"it is {row['solution']}"
    (zero / "generations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    best = tmp_path / "best"
    flags = [*common, "--n-max", 2, "--ns", 1, "--ns", 2, "--zero-shot-generations", zero / "generations.jsonl"]
    result = CliRunner().invoke(best_of_n.app, [str(a) for a in [*flags, "--output-dir", best]])
    assert result.exit_code == 0, result.output
    summary = json.loads((best / "summary.json").read_text())
    assert summary["num_problems"] == 4 and summary["pass_at"]["1"] == summary["best_at"]["1"] == 0.75
    # --task-validation-data takes the evaluation rows' place
    validation = tmp_path / "validation.jsonl"
    validation.write_text("".join(json.dumps(row) + "\n" for row in ROWS[:2]))
    flags = [*common, "--task-validation-data", validation, "--output-dir", tmp_path / "other"]
    result = CliRunner().invoke(eval_zero_shot.app, [str(a) for a in flags])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "other" / "generations.jsonl").read_text().splitlines()
    assert [json.loads(line)["prompt"] for line in lines] == [f"Solve: {row['problem']}" for row in ROWS[:2]]


def test_expert_iteration_keeps_rollouts_reaching_the_threshold_on_a_user_task(tiny_model_dir, tmp_path):
    from typer.testing import CliRunner

    from scripts import expert_iteration

    task = write_task(tmp_path, str(write_rows(tmp_path / "data", "jsonl")))
    flags = ["--task", task, "--task-fields", "question=problem,answer=solution", "--model", tiny_model_dir]
    flags += ["--n-eval-examples", 2, "--eval-max-tokens", 4, "--n-ei-steps", 1, "--questions-per-step", 2]
    flags += ["--rollouts-per-question", 2, "--sampling-max-tokens", 5, "--batch-size", 2]
    flags += ["--gradient-accumulation-steps", 1, "--max-seq-length", 128, "--backend", "hf", "--grader-workers", 2]
    flags += ["--ei-reward-threshold", 0, "--output-dir", tmp_path / "ei"]
    result = CliRunner().invoke(expert_iteration.app, [str(f) for f in flags])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in (tmp_path / "ei" / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if "kept_fraction" in m)
    assert step["n_rollouts"] == 4 and step["n_kept"] == 4 and step["sft_steps"] == 2  # rewards >= 0: every one
    evals = [m for m in metrics if "eval_reward" in m]
    assert evals and "eval_reward_contains" in evals[-1]


def test_expert_iteration_refuses_the_keyword_task_in_one_line(tmp_path):
    from alignment.supervised.config import EIConfig, validate

    with pytest.raises(ValueError, match="--task keywords trains with scripts/train_grpo.py"):
        validate(EIConfig(task="keywords", output_dir=tmp_path / "ei"))


def test_a_sweep_preset_names_a_task_file(tmp_path):
    from alignment.experiments.sweep import load_preset

    preset = tmp_path / "capitals.toml"
    preset.write_text(
        'script = "train_grpo"\n[shared]\ntask = "data/tasks/capitals.py:task"\nn_grpo_steps = 2\n'
        '[arms.light]\nreward_weights = "brief=0.1"\n[arms.heavy]\nreward_weights = "brief=1"\n'
    )
    runs = load_preset(preset).runs
    assert [r.settings["task"] for r in runs] == ["data/tasks/capitals.py:task"] * 2
    preset.write_text('script = "train_grpo"\n[shared]\ntask = "capitals.py"\nn_grpo_steps = 2\n[arms.a]\n')
    with pytest.raises(ValueError, match="arm 'a': --task 'capitals.py': name the object to load"):
        load_preset(preset)


def test_the_built_in_tasks_are_task_definitions_too(tmp_path):
    from alignment.grader import r1_zero_reward_fn
    from alignment.tasks.building import task_stop
    from alignment.tasks.loading import definition_for

    config = GRPOConfig(task="arithmetic", n_eval_examples=4, output_dir=tmp_path / "run")
    train, validation = run_tasks(config)
    assert len(validation.questions) == 4 and not set(train.questions) & set(validation.questions)
    row = train.truths[0]
    right = train.reward_fn(f"</think> <answer>{row['final']}</answer>", row)
    assert right["reward"] == right["reward_answer"] == right["format_reward"] == right["answer_reward"] == 1.0
    assert train.logged_truth(row) == row["final"] and task_stop(config) == ("</answer>",)

    math = GRPOConfig(task="math", dataset="data/sample_math.jsonl", n_eval_examples=4, prompt="r1_zero")
    definition = definition_for("math", math)
    chosen = definition.rows(math)
    math_train, math_validation = chosen.train, chosen.validation
    answer = math_train[0]["answer"]
    graded = reward_set("math", definition, math)(f"</think> <answer>{answer}</answer>", math_train[0])
    assert graded == r1_zero_reward_fn(f"</think> <answer>{answer}</answer>", answer)  # the grader's dict as it is
    assert math_validation and math_train[0]["prompt"].startswith("A conversation between User and Assistant")
    keywords = GRPOConfig(task="keywords", n_train_prompts=8, n_eval_examples=2)
    definition = definition_for("keywords", keywords)
    chosen = definition.rows(keywords)
    keyword_train, keyword_validation = chosen.train, chosen.validation
    assert len(keyword_train) == 8 and len(keyword_validation) == 2
    row = keyword_train[0]
    rewards = reward_set("keywords", definition, keywords)
    assert rewards(" and ".join(row["keywords"]), row)["reward"] == 1.0 and rewards("", row)["reward"] == 0.0
