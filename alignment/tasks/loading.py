"""`--task SOURCE` to a TaskDefinition, and to the run's training and validation Tasks.

Every source goes the same way: a built-in name is the module attribute BUILTIN names, a file or module attribute
is a TaskDefinition or a function of the run's settings returning one, a library source is built by that library's
adapter (alignment/tasks/reasoning_gym.py). Rewards are rebuilt in other processes from (source, settings) alone.
"""

import dataclasses
from types import SimpleNamespace
from typing import Any

from alignment.tasks.definition import Reward, TaskDefinition
from alignment.tasks.rewards import RewardSet
from alignment.tasks.source import Source, load_attribute, resolve_source

# The built-in tasks, written against the same contract as a user's (alignment/tasks/builtin.py)
BUILTIN: dict[str, str] = {
    "math": "alignment.tasks.builtin:math",
    "keywords": "alignment.tasks.builtin:keywords",
    "arithmetic": "alignment.tasks.builtin:arithmetic",
}


def settings_json(settings: Any) -> dict[str, Any]:
    """The run's settings as the JSON values a task's factory reads in another process."""
    if isinstance(settings, SimpleNamespace):
        return dict(vars(settings))
    if hasattr(settings, "to_json"):
        return settings.to_json()
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        return {k: str(v) if hasattr(v, "__fspath__") else v for k, v in dataclasses.asdict(settings).items()}
    return dict(settings or {})


def resolve(text: str) -> Source:
    """The source `--task text` names, a built-in name replaced by the attribute that defines it."""
    own = (
        "a task of your own is --task path/to/file.py:NAME or --task package.module:NAME, reasoning-gym's "
        "--task reasoning_gym:NAME"
    )
    return resolve_source(text, "--task", BUILTIN, "task", own)


def definition_for(text: str, settings: Any) -> TaskDefinition:
    """The TaskDefinition `--task text` names, for the run's `settings` (a factory is called with them)."""
    source = resolve(text)
    if source.kind == "reasoning_gym":
        from alignment.tasks.reasoning_gym import reasoning_gym_task

        return reasoning_gym_task(source.target, settings)
    if source.kind in ("textarena", "openenv", "verifiers"):
        raise ValueError(f"--task {text}: {source.kind} sources are environments; use --env {text}")
    obj = load_attribute(source, "--task")
    if callable(obj) and not isinstance(obj, TaskDefinition):
        obj = obj(settings)
    if not isinstance(obj, TaskDefinition):
        raise ValueError(
            f"--task {text}: {source.attribute} is a {type(obj).__name__}, not a TaskDefinition "
            "(or a function of the run's settings returning one)"
        )
    return obj


def weighted_rewards(text: str, definition: TaskDefinition, settings: Any) -> list[Reward]:
    """The definition's rewards with --reward-weights NAME=WEIGHT applied; an unknown NAME lists the names."""
    rewards = definition.reward_list()
    overrides = getattr(settings, "reward_weights", None)
    if not overrides:
        return rewards
    weights: dict[str, float] = {}
    for item in (i.strip() for i in overrides.split(",") if i.strip()):
        name, _, value = item.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise ValueError(f"--reward-weights: {item!r} is not NAME=WEIGHT (WEIGHT a number)") from None
    names = [r.label for r in rewards]
    unknown = sorted(set(weights) - set(names))
    if unknown:
        listed = ", ".join(names)
        raise ValueError(f"--reward-weights: task {text} has no reward {unknown[0]!r} (its rewards: {listed})")
    return [dataclasses.replace(r, weight=weights.get(r.label, r.weight)) for r in rewards]


def reward_set_for(text: str, settings: dict[str, Any]) -> RewardSet:
    """Task `text`'s rewards in this process, from its source and the run's settings (how a RewardSet unpickles)."""
    namespace = SimpleNamespace(**settings)
    return RewardSet(text, weighted_rewards(text, definition_for(text, namespace), namespace), (text, settings))


def reward_set(text: str, definition: TaskDefinition, settings: Any) -> RewardSet:
    """The rewards of `definition`, which `--task text` named, able to travel to other processes by name."""
    return RewardSet(text, weighted_rewards(text, definition, settings), (text, settings_json(settings)))
