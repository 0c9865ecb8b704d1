"""Multi-turn environments: the model acts, the environment answers, the model acts again.

- base: the interface every environment implements (`reset`, `step` -> EnvStep).
- episode: an episode as one token sequence with its sampled-token mask, behaviour log-probs and rewards.
- runner: every live episode's next turn in one batched engine call, token ids in and out.
- sampler: GRPO's sampler over episodes (`--env NAME`), with validation on held-out tasks.
- registry: the names `--env` takes, each with its constructor and tasks.
- arithmetic, calculator: the calculator tool's parser (no eval) and its environment.
- kissing: PKU HW3 §7's refinement loop (the model's program, the evaluator's verdict, the model refines).
"""

from alignment.envs.base import Environment, EnvStep

__all__ = ["EnvStep", "Environment"]
