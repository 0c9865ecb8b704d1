"""--env sources: built-in names are module attributes loaded as a user's are; a file's class, factory or
EnvironmentDefinition; rows from --task, the environment's own, or seeds; every bad source refused in one line
naming --env before any model loads; the shipped example environment."""

import inspect
import socket
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from alignment.envs.calculator import CalculatorEnv
from alignment.envs.loading import (
    BUILTIN_ENVS,
    Configured,
    definition_for,
    environment_maker,
    environment_tasks,
    resolve,
)
from alignment.grpo.config import GRPOConfig, validate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "envs" / "guess_number.py"

ENVS = """
from alignment.envs import EnvStep, EnvironmentDefinition
from alignment.tasks import TaskDefinition

made = []


class Echo:
    name, max_turns = "echo", 2

    def __init__(self):
        made.append(self)

    def reset(self, row):
        self.row = row
        return f"row {row}"

    def step(self, action):
        return EnvStep("again", float(action == "yes"), True)


class Sized(Echo):
    def __init__(self, settings):
        super().__init__()
        self.max_turns = settings.turns


class WithRows(Echo):
    rows = [{"n": i} for i in range(10)]


def factory(settings):
    return Echo()


def defined(settings):
    return EnvironmentDefinition(Echo, rows=[{"n": i} for i in range(20)], system_prompt="Be brief.")


paired = EnvironmentDefinition(Echo, rows=lambda s: ([{"n": 1}, {"n": 2}], [{"n": 3}]))


class NoStep:
    name, max_turns = "no_step", 1

    def reset(self, row):
        return ""


class NoTurns(Echo):
    max_turns = None


class Silent(Echo):
    def reset(self, row):
        return None


class Broken(Echo):
    def reset(self, row):
        return row["missing"]


class TwoArguments(Echo):
    def __init__(self, a, b):
        super().__init__()


class Remote(Echo):  # an async environment (a service's client)
    closed = []

    async def reset(self, row):
        self.row = row
        return f"remote row {row}"

    async def step(self, action):
        return EnvStep("again", 1.0, True)

    async def close(self):
        Remote.closed.append(self.row)


not_an_env = 42
task = TaskDefinition(rows=[{"q": f"question {i}"} for i in range(10)], rewards=[len], fields={"question": "q"})
"""


@dataclass
class Settings:
    """A run's settings as the loaders read them (a dataclass: --task at its default means "not given")."""

    task: str = "math"
    env_max_turns: int | None = None
    n_train_prompts: int = 6
    n_eval_examples: int = 3
    seed: int = 0
    turns: int = 3


@pytest.fixture
def envs_file(tmp_path) -> str:
    path = tmp_path / "my_envs.py"
    path.write_text(textwrap.dedent(ENVS))
    return str(path)


def test_built_in_names_are_module_attributes_loaded_the_user_s_way():
    for name, where in BUILTIN_ENVS.items():
        source = resolve(name)
        assert source.kind == "module" and f"{source.target}:{source.attribute}" == where
    settings = Settings(env_max_turns=3)
    by_name = environment_tasks("calculator_arithmetic", settings)
    by_module = environment_tasks(BUILTIN_ENVS["calculator_arithmetic"], settings)
    assert by_name[0].truths == by_module[0].truths and len(by_name[0].truths) == 6
    env = environment_maker("calculator_arithmetic", settings)()
    assert isinstance(env, Configured) and env.max_turns == 3 and env.stop == ("</calculator>", "</answer>")
    assert env.reset(by_name[0].truths[0]) == by_name[0].questions[0]
    assert isinstance(environment_maker("calculator_arithmetic", Settings())(), CalculatorEnv)  # no override: as is


def test_a_class_is_built_fresh_per_episode_and_plays_seeds(envs_file):
    make = environment_maker(f"{envs_file}:Echo", Settings())
    a, b = make(), make()
    assert a is not b and a.max_turns == 2
    train, validation = environment_tasks(f"{envs_file}:Echo", Settings())
    assert [r["seed"] for r in train.truths] == list(range(6)) and len(validation.truths) == 3
    assert not {r["seed"] for r in train.truths} & {r["seed"] for r in validation.truths}
    second_run, _ = environment_tasks(f"{envs_file}:Echo", Settings(seed=1))
    assert [r["seed"] for r in second_run.truths] == list(range(6, 12))  # another run seed, other games
    assert train.questions[0] == "0" and a.reset(train.truths[0]) == "row {'seed': 0}"


def test_a_class_taking_the_settings_a_factory_and_a_class_s_own_rows(envs_file):
    assert environment_maker(f"{envs_file}:Sized", Settings(turns=5))().max_turns == 5
    make = environment_maker(f"{envs_file}:factory", Settings())
    assert make() is not make()
    train, validation = environment_tasks(f"{envs_file}:WithRows", Settings())
    # a fifth held out, at most --n-eval-examples: 8 train, 2 validation
    assert [r["n"] for r in train.truths] == list(range(8)) and [r["n"] for r in validation.truths] == [8, 9]


def test_a_definition_brings_rows_and_a_system_prompt(envs_file):
    env = environment_maker(f"{envs_file}:defined", Settings())()
    assert env.context == [{"role": "system", "content": "Be brief."}]
    train, validation = environment_tasks(f"{envs_file}:defined", Settings())
    assert len(train.truths) == 17 and [r["n"] for r in validation.truths] == [17, 18, 19]
    train, validation = environment_tasks(f"{envs_file}:paired", Settings())
    assert train.truths == [{"n": 1}, {"n": 2}] and validation.truths == [{"n": 3}]


def test_task_rows_given_beside_env_replace_the_environment_s_own(envs_file):
    settings = Settings(task=f"{envs_file}:task")
    train, validation = environment_tasks(f"{envs_file}:WithRows", settings)
    assert train.truths[0] == {"q": "question 0", "question": "question 0"}  # the task's field renames apply
    assert len(train.truths) == 8 and validation.truths[-1]["question"] == "question 9"
    assert train.questions[0] == "question 0"


@pytest.mark.parametrize(
    "source, message",
    [
        ("{f}:Nope", "--env {f}:Nope: {f} defines no 'Nope'"),
        ("/no/such/envs.py:Echo", "--env /no/such/envs.py:Echo: no file /no/such/envs.py"),
        ("{f}:not_an_env", "--env {f}:not_an_env: a int is not an environment: name an Environment class"),
        ("{f}:NoStep", "--env {f}:NoStep: a NoStep is not an environment: it has no step"),
        ("{f}:NoTurns", "it has no max_turns \\(an int\\)"),
        ("{f}:TwoArguments", "TwoArguments\\(\\) needs 2 arguments"),
        ("no_such_module:Env", "--env no_such_module:Env: cannot import 'no_such_module'"),
        ("nope", "--env 'nope' is not a built-in environment \\(arithmetic_no_tool, calculator"),
        (
            "verifiers:my_env",
            "--env verifiers:my_env: verifiers environments are not supported: verifiers runs its own",
        ),
        ("reasoning_gym:chain_sum", "reasoning-gym tasks are one-turn; use --task reasoning_gym:chain_sum"),
    ],
)
def test_bad_sources_are_refused_in_one_line_naming_env(envs_file, source, message):
    source, message = source.format(f=envs_file), message.format(f=envs_file)
    with pytest.raises(ValueError, match=message) as caught:
        environment_maker(source, Settings())
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "attribute, message",
    [
        ("Silent", "reset\\(row\\) returned a NoneType, not the first observation"),
        ("Broken", "reset of the first training row {'seed': 0} failed: KeyError: 'missing'"),
    ],
)
def test_a_reset_that_does_not_give_text_is_refused_with_the_row(envs_file, attribute, message):
    with pytest.raises(ValueError, match=f"--env {envs_file}:{attribute}: {message}"):
        environment_tasks(f"{envs_file}:{attribute}", Settings())


def test_an_async_environment_keeps_its_coroutines_under_the_run_s_turn_limit(envs_file):
    settings = Settings(env_max_turns=4)
    env = environment_maker(f"{envs_file}:Remote", settings)()
    assert isinstance(env, Configured) and env.max_turns == 4  # wrapped for the run's limit, yet still async
    assert inspect.iscoroutinefunction(env.reset) and inspect.iscoroutinefunction(env.step)
    assert inspect.iscoroutinefunction(env.close)
    train, _ = environment_tasks(f"{envs_file}:Remote", settings)  # its first reset awaited, not taken for text
    remote = sys.modules[type(env.env).__module__].Remote
    assert remote.closed == [train.truths[0]] == [{"seed": 0}]


def test_openenv_goes_to_its_adapter(tmp_path):
    with pytest.raises(ValueError, match="--env openenv:localhost:8000: give the server's address"):
        definition_for("openenv:localhost:8000", Settings())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, not listening: nothing answers there
        with pytest.raises(ValueError, match=f"--env openenv:{url}: no OpenEnv server answers at {url}/schema"):
            definition_for(f"openenv:{url}", SimpleNamespace(env_step_timeout_s=0.4))


def test_the_settings_check_refuses_a_bad_env_before_any_model_loads(envs_file, tmp_path):
    config = GRPOConfig(model="/nonexistent", env=f"{envs_file}:NoStep", output_dir=tmp_path)
    with pytest.raises(ValueError, match="has no step"):
        validate(config)
    validate(replace(config, env=f"{envs_file}:Echo"))
    import scripts.train_grpo as script

    args = ["--env", f"{envs_file}:not_an_env", "--model", "/nonexistent", "--output-dir", str(tmp_path / "run")]
    result = CliRunner().invoke(script.app, args)
    assert result.exit_code != 0 and "a int is not an environment" in result.output
    assert not (tmp_path / "run").exists()


def test_the_shipped_example_is_won_by_bisection():
    source = f"{EXAMPLE}:guess_number"
    settings = SimpleNamespace(n_train_prompts=8, n_eval_examples=16, seed=0, env_max_turns=None)
    train, validation = environment_tasks(source, settings)
    assert len(train.truths) == 8 and [r["secret"] for r in validation.truths] == list(range(1, 17))
    for row in validation.truths:
        env = environment_maker(source, settings)()
        env.reset(row)
        low, high = 1, 16
        while True:
            guess = (low + high) // 2
            step = env.step(f"{guess}")
            if step.done:
                break
            low, high = (guess + 1, high) if step.observation == "higher" else (low, guess - 1)
        assert step.reward == 1.0 and guess == row["secret"]
    env = environment_maker(f"{EXAMPLE}:GuessNumber", settings)()  # the class alone plays seeds
    env.reset({"seed": 3})
    assert 1 <= env.secret <= 16 and env.step("no idea").observation == "Answer with a number."


@pytest.mark.slow  # about a minute on 2 loaded cores
def test_a_user_s_environment_file_trains_on_ray_rebuilt_from_its_source(cluster, tiny_model_dir, tmp_path):
    """The actors get the --env text alone and load the file themselves: the run trains and validates on it."""
    from alignment.ray.driver import train_grpo_ray
    from tests.test_ray_strategies import config_for, logged

    config = config_for(
        tiny_model_dir,
        tmp_path,
        env=f"{EXAMPLE}:guess_number",
        env_max_turns=2,
        env_max_tokens=200,
        n_train_prompts=8,
        n_grpo_steps=1,
        strategy="colocated-sync",
    )
    train_grpo_ray(config)
    rows = logged(config)
    assert [r["grpo_step"] for r in rows if "loss" in r] == [1]
    assert all(1 <= r["train_turns_mean"] <= 2 for r in rows if "loss" in r)
    assert [r["grpo_step"] for r in rows if "eval_reward" in r] == [0, 1]
