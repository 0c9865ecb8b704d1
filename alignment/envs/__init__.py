"""Multi-turn environments: the model acts, the environment answers, the model acts again.

- base: the interface every environment implements (`reset`, `step` -> EnvStep).
- episode: an episode as one token sequence with its sampled-token mask, behaviour log-probs and rewards.
- runner: every live episode's next turn in one batched engine call, token ids in and out.
- calls: a turn's environment calls at once (threads, or one event loop for async environments), each under a
  deadline, answers in call order.
- definition: EnvironmentDefinition, what `--env file.py:NAME` may name besides a class or a factory.
- rows, loading: an environment's rows, and `--env SOURCE` to the environment and tasks a run plays.
- textarena: TextArena's single-player games (`--env textarena:GAME-ID`).
- openenv: episodes in WebSocket sessions on a running OpenEnv server (`--env openenv:URL`).
- arithmetic, calculator: the calculator tool's parser (no eval) and its environment.

What stands on these sits above them: GRPO's sampler over episodes and the built-in environments
(alignment/grpo/episode_sampler.py, alignment/grpo/environments.py), PKU HW3 §7's refinement loop beside the
kissing-number verifier it calls (alignment/kissing/environment.py).
"""

from alignment.envs.base import Environment, EnvStep
from alignment.envs.definition import EnvironmentDefinition

__all__ = ["EnvStep", "Environment", "EnvironmentDefinition"]
