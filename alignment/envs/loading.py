"""`--env SOURCE` to the environment a run plays and its training and validation rows, in one place for GRPO, GRPO
on Ray and the settings' validation.

Every source goes the same way (alignment/tasks/source.py names them): a built-in name is the module attribute
BUILTIN_ENVS names, a file or module attribute is an Environment class, a function of the run's settings returning
an Environment or an EnvironmentDefinition, or an EnvironmentDefinition (alignment/envs/definition.py); a library
source is built by its adapter (alignment/envs/textarena.py, alignment/envs/openenv.py). Environments reach other
processes (Ray actors) as their source text and are rebuilt there, never pickled.
"""

import inspect
from collections.abc import Callable
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

from alignment.data.task import Task
from alignment.envs.base import Environment, context_messages, stop_strings
from alignment.envs.calls import CallTimeout, EnvCalls
from alignment.envs.definition import EnvironmentDefinition
from alignment.envs.rows import row_text, seed_rows, source_rows
from alignment.tasks.definition import Row
from alignment.tasks.loading import definition_for as task_definition_for
from alignment.tasks.source import Source, load_attribute, resolve_source

# The built-in environments, written against the same contract as a user's (alignment/grpo/environments.py)
BUILTIN_ENVS: dict[str, str] = {
    "calculator": "alignment.grpo.environments:calculator",
    "calculator_arithmetic": "alignment.grpo.environments:calculator_arithmetic",
    "arithmetic_no_tool": "alignment.grpo.environments:arithmetic_no_tool",
    "kissing": "alignment.grpo.environments:kissing",
}

VERIFIERS_REFUSED = (
    "verifiers environments are not supported: verifiers runs its own rollout loop and calls the model through an "
    "OpenAI- or vLLM-style HTTP client, with no reset/step for this library's token-in/token-out episode runner to "
    "drive (docs/concepts/environments.md); write the environment as an Environment class (--env file.py:NAME)"
)


def resolve(text: str) -> Source:
    """The source `--env text` names, a built-in name replaced by the attribute that defines it."""
    own = (
        "an environment of your own is --env path/to/file.py:NAME or --env package.module:NAME, a TextArena game "
        "--env textarena:GAME-ID"
    )
    return resolve_source(text, "--env", BUILTIN_ENVS, "environment", own)


def definition_for(text: str, settings: Any) -> EnvironmentDefinition:
    """The EnvironmentDefinition `--env text` names, for the run's `settings`; a one-line ValueError naming --env
    when the source is missing or names something that is not an environment."""
    source = resolve(text)
    if source.kind == "textarena":
        from alignment.envs.textarena import textarena_environment

        return textarena_environment(source.target, settings)
    if source.kind == "openenv":
        from alignment.envs.openenv import openenv_environment

        return openenv_environment(source.target, settings)
    if source.kind == "verifiers":
        raise ValueError(f"--env {text}: {VERIFIERS_REFUSED}")
    if source.kind == "reasoning_gym":
        raise ValueError(f"--env {text}: reasoning-gym tasks are one-turn; use --task {text}")
    try:
        obj = load_attribute(source, "--env")
    except FileNotFoundError:
        raise ValueError(f"--env {text}: no file {source.target}") from None
    return as_definition(obj, settings, text)


def _constructor_arguments(cls: type, text: str) -> int:
    """How many arguments `cls` needs: 0, or 1 (the run's settings)."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # a builtin or extension type: no signature to read
        return 0
    required = [
        p for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(required) > 1:
        raise ValueError(
            f"--env {text}: {cls.__name__}() needs {len(required)} arguments; an environment class is built with none "
            "or with the run's settings alone"
        )
    return len(required)


def _own_rows(obj: Any) -> Any:
    """The rows an environment class or instance carries (`rows`, else `task`), or None."""
    rows = getattr(obj, "rows", None)
    return rows if rows is not None else getattr(obj, "task", None)


def as_definition(obj: Any, settings: Any, text: str) -> EnvironmentDefinition:
    """`obj` (what --env text names) as an EnvironmentDefinition: a definition as it is, a class built per episode
    (with the settings when its constructor takes an argument), a factory called per episode with the settings."""
    if isinstance(obj, EnvironmentDefinition):
        return obj
    if inspect.isclass(obj):
        if _constructor_arguments(obj, text):
            return EnvironmentDefinition(lambda: obj(settings), rows=_own_rows(obj))
        return EnvironmentDefinition(obj, rows=_own_rows(obj))
    if callable(obj):
        made = obj(settings)
        if isinstance(made, EnvironmentDefinition):
            return made
        check_environment(made, text, getattr(settings, "env_max_turns", None))
        return EnvironmentDefinition(lambda: obj(settings), rows=_own_rows(made))
    raise ValueError(
        f"--env {text}: a {type(obj).__name__} is not an environment: name an Environment class, a function of the "
        "run's settings returning an environment, or an EnvironmentDefinition"
    )


def check_environment(env: Any, text: str, max_turns: int | None = None) -> None:
    """A ValueError naming --env and what is missing when `env` lacks the Environment interface (its max_turns may
    be missing when the run sets `max_turns`)."""
    missing = [name for name in ("reset", "step") if not callable(getattr(env, name, None))]
    turns = max_turns if max_turns is not None else getattr(env, "max_turns", None)
    if not isinstance(turns, int):
        missing.append("max_turns (an int)")
    if missing:
        raise ValueError(f"--env {text}: a {type(env).__name__} is not an environment: it has no {', '.join(missing)}")
    if turns < 1:
        raise ValueError(f"--env {text}: max_turns must be >= 1, got {turns}")


class Configured:
    """An environment with the run's turn limit (--env-max-turns) and its definition's context when it has none."""

    def __init__(self, env: Environment, max_turns: int | None, context: list[dict[str, str]]) -> None:
        self.env = env
        self.max_turns = max_turns if max_turns is not None else env.max_turns
        self.context = context_messages(env) or context
        self.stop = stop_strings(env)
        self.name = getattr(env, "name", type(env).__name__)
        # the environment's own methods: an async reset or step stays a coroutine function for the runner's calls
        self.reset: Callable[[dict[str, Any]], Any] = env.reset
        self.step: Callable[[str], Any] = env.step

    def __getattr__(self, name: str) -> Any:  # anything else the environment offers (e.g. close)
        return getattr(self.env, name)


def environment_maker(text: str, settings: Any) -> Callable[[], Environment]:
    """() -> a fresh environment of `--env text` for the run's settings, one checked instance made here."""
    definition = definition_for(text, settings)
    max_turns, context = getattr(settings, "env_max_turns", None), definition.context_messages()

    def make() -> Environment:
        env = definition.make()
        return Configured(env, max_turns, context) if max_turns is not None or context else env

    check_environment(definition.make(), text, max_turns)
    return make


def _task_named(settings: Any) -> str | None:
    """The --task the user gave beside --env (None when it is the settings' default, i.e. not given)."""
    task = getattr(settings, "task", None)
    if task is None or not is_dataclass(settings):
        return task
    default = next((f.default for f in fields(settings) if f.name == "task"), MISSING)
    return None if task == default else task


def scored_by_episodes(response: str, truth: Any) -> dict[str, float]:
    """An environment task's reward_fn: its rewards are the episodes', so nothing grades a lone response."""
    raise TypeError("an --env task is scored by its episodes' rewards, not by grading one response")


def environment_rows(text: str, settings: Any) -> tuple[list[Row], list[Row]]:
    """(training rows, validation rows) of `--env text`: --task's rows when given, else the environment's, else
    seeds."""
    n_train, n_validation = settings.n_train_prompts, settings.n_eval_examples
    task = _task_named(settings)
    if task is not None:
        return source_rows(task_definition_for(task, settings), None, settings, n_validation, f"--task {task}")
    definition = definition_for(text, settings)
    if definition.rows is None:
        return seed_rows(n_train, n_validation, settings.seed)
    return source_rows(definition.rows, definition.validation_rows, settings, n_validation, f"--env {text}")


def environment_tasks(text: str, settings: Any) -> tuple[Task, Task]:
    """The run's training and validation tasks of `--env text`: their truths are the rows each episode's reset
    receives. One environment is reset on the first training row here, before any model loads, as the runner calls it
    (an async reset on an event loop, --env-step-timeout-s at most), and closed."""
    train, validation = environment_rows(text, settings)
    env = environment_maker(text, settings)()
    with EnvCalls(getattr(settings, "env_step_timeout_s", 60.0)) as calls:
        first = calls([(env.reset, (train[0],))])[0]
        if callable(getattr(env, "close", None)) and not isinstance(first, CallTimeout):
            calls([(env.close, ())])
    if isinstance(first, Exception):
        raise ValueError(
            f"--env {text}: reset of the first training row {train[0]} failed: {type(first).__name__}: {first}"
        )
    if not isinstance(first, str):
        raise ValueError(f"--env {text}: reset(row) returned a {type(first).__name__}, not the first observation")

    def task(rows: list[Row]) -> Task:
        return Task([row_text(r) for r in rows], rows, "{question}", scored_by_episodes, name=text)

    return task(train), task(validation)
