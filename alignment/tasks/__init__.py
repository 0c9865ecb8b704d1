"""Tasks a user brings: one contract for the rows, the prompt and the rewards of a one-turn task, and one way to
name a task or an environment on every entry point (`--task`, `--env`).

source.py       how a source is named (built-in, file.py:NAME, pkg.module:NAME, reasoning_gym:, textarena:,
                openenv:, verifiers:) and how a file or module attribute is loaded in any process
definition.py   TaskDefinition, Reward and ChosenRows: what a user writes
rewards.py      RewardSet: the rewards as one grader (per-function scores, weighted sum, errors naming the row)
loading.py      `--task` to a TaskDefinition, and its rewards rebuilt by name in other processes
rows.py         a task's rows from a file, a folder of split files, a dataset folder or a hub id (`datasets`)
building.py     `run_tasks`: --task compiled into the loops' training and validation Tasks, rewards preflighted
builtin.py      the built-in tasks (math, keywords, arithmetic) as TaskDefinitions, built as a user's task is
reward_model.py a sequence-classification model as a batched reward
evaluating.py   any --task's validation rows sampled and graded (eval_zero_shot, best_of_n)
reasoning_gym.py `reasoning_gym:NAME[,NAME=WEIGHT...]`: reasoning-gym's generated rows and its own scores
curriculum.py   a reasoning-gym mix's levels, raised by training accuracy (--curriculum-threshold)
"""

from alignment.tasks.definition import ChosenRows, Reward, TaskDefinition
from alignment.tasks.rewards import RewardError, RewardSet

__all__ = ["ChosenRows", "Reward", "RewardError", "RewardSet", "TaskDefinition"]
