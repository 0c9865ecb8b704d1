"""Multi-turn environments: the model acts, the environment answers, the model acts again.

`alignment.envs.base` holds the interface every environment implements; the episode runner turns an environment
and a rollout engine into token-in/token-out episodes the GRPO learner trains on.
"""

from alignment.envs.base import Environment, EnvStep

__all__ = ["EnvStep", "Environment"]
