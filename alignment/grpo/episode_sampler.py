"""GRPO on an environment: the sampler the loop draws episodes from, with GRPOSampler's `draw` and `evaluate`.

Each step draws n_prompts_per_rollout_batch tasks in the run's seeded order and plays group_size episodes of each
(alignment/envs/runner.py); the episodes go to the learner as rollouts, scored by their final reward, and the
learner's collate lays them out with their own prompts and masks (alignment/grpo/batch.py). Validation plays one
episode per held-out task at the validation settings. `scored_groups` gives each question's group as soon as its
episodes have ended, for a streaming generator (--strategy async on Ray, alignment/ray/episode_stream.py).

A group with an episode its environment failed (an error, a missed --env-step-timeout-s) is dropped whole: the step
trains on the intact groups (train_env_groups_dropped counts the others); a step with none stops the run. (Under
--strategy async on Ray the driver drops such a group too, and replaces it: alignment/ray/async_driver.py.)
"""

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from alignment.data.task import Task
from alignment.envs.base import EnvironmentUnavailable, stop_strings
from alignment.envs.episode import ENV_FAILURES, Episode, intact_groups
from alignment.envs.loading import environment_maker
from alignment.envs.runner import play_episodes, task_major
from alignment.grpo.config import GRPOConfig
from alignment.grpo.sampler import Drawn, rollout_sampling
from alignment.rollout.interface import RolloutEngine, SamplingConfig
from alignment.run.setup import PhaseTimer, PromptOrder
from alignment.tasks.curriculum import Curriculum


class EpisodeSampler:
    """The engine, the environment, its task rows and the question order of a run (`order` is what a checkpoint
    keeps, as GRPOSampler's)."""

    def __init__(
        self, config: GRPOConfig, engine: RolloutEngine, task: Task, tokenizer: PreTrainedTokenizerBase
    ) -> None:
        assert config.env is not None
        self.config, self.engine, self.task, self.tokenizer = config, engine, task, tokenizer
        self.make_env = environment_maker(config.env, config)  # rebuilt from its source in every process
        self.stop = stop_strings(self.make_env())
        self.order = PromptOrder(len(task.questions), config.seed)
        Curriculum.from_settings(config)  # --curriculum-threshold is refused: episodes have no levels

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the sampler: the question order's position."""
        return {"order_position": self.order.position}

    def load_state(self, state: dict[str, Any]) -> None:
        self.order.position = state["order_position"]

    def play(
        self,
        task: Task,
        questions: Sequence[int],
        group_size: int,
        sampling: SamplingConfig,
        timer: PhaseTimer | None = None,
    ) -> list[Episode]:
        """group_size episodes of each question, question-major."""
        return task_major(self.play_groups(task, questions, group_size, sampling, timer))

    def play_groups(
        self,
        task: Task,
        questions: Sequence[int],
        group_size: int,
        sampling: SamplingConfig,
        timer: PhaseTimer | None = None,
        places: Sequence[int] | None = None,
    ) -> Iterator[tuple[int, list[Episode]]]:
        """(i, the group_size episodes of questions[i]) as soon as they have all ended (alignment/envs/runner.py);
        `places`: each question's place in its rollout batch, which seeds its episodes."""
        model = getattr(self.engine, "model", None)
        if isinstance(model, torch.nn.Module):
            model.eval()  # an in-process engine samples the policy, which the learner left in train mode
        c = self.config
        return play_episodes(
            self.engine,
            self.tokenizer,
            self.make_env,
            [episode_row(task, q) for q in questions],
            group_size,
            replace(sampling, stop=self.stop),
            c.env_max_tokens,
            c.env_step_timeout_s,
            c.env_concurrency,
            timer,
            places,
        )

    def draw(self, step: int, timer: PhaseTimer | None = None) -> Drawn:
        """Step `step`'s groups, those with a failed episode left out (their count in train_env_groups_dropped)."""
        c, timer = self.config, timer or PhaseTimer()
        asked = self.order.take(c.n_prompts_per_rollout_batch)
        with timer("rollout"):
            episodes, scores = self.scored_episodes(asked, step, timer)
        stats = episode_stats(episodes, "train_")
        questions: list[int] = []
        kept: list[Episode] = []
        kept_scores: list[dict[str, float]] = []
        for i, intact in enumerate(intact_groups(episodes, c.group_size)):
            if intact:
                group = slice(i * c.group_size, (i + 1) * c.group_size)
                kept += [replace(e, prompt_index=len(questions)) for e in episodes[group]]
                kept_scores += scores[group]
                questions.append(asked[i])
        if not questions:
            error = next(e.info["env_error"] for e in episodes if e.failed)
            raise EnvironmentUnavailable(
                f"--env {c.env}: every group of GRPO step {step + 1} had an episode its environment failed: {error}"
            )
        stats["train_env_groups_dropped"] = len(asked) - len(questions)
        return Drawn(questions, list(kept), kept_scores, stats)

    def scored_episodes(
        self, questions: Sequence[int], step: int, timer: PhaseTimer | None = None
    ) -> tuple[list[Episode], list[dict[str, float]]]:
        """Step `step`'s group_size episodes of each question, and their scores."""
        sampling = rollout_sampling(self.config, step)
        episodes = self.play(self.task, questions, self.config.group_size, sampling, timer)
        return episodes, episode_scores(episodes)

    def scored_groups(
        self, questions: Sequence[int], step: int, places: Sequence[int]
    ) -> Iterator[tuple[int, list[Episode], list[dict[str, float]]]]:
        """Step `step`'s group_size episodes of each question: (i, the group of questions[i], its scores) as soon as
        the group's episodes have all ended, the other groups' playing on; places[i] is questions[i]'s place in step
        `step`'s rollout batch, which seeds its episodes (a part of the batch played apart draws numbers of its own)."""
        sampling = rollout_sampling(self.config, step)
        for i, group in self.play_groups(self.task, questions, self.config.group_size, sampling, places=places):
            yield i, group, episode_scores(group)

    def evaluate(self, on: Task, sampling: SamplingConfig) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """One episode per validation task: eval_reward (its mean final reward) and the episodes' statistics."""
        episodes = self.play(on, range(len(on.questions)), 1, sampling)
        examples = [
            {"prompt": on.questions[e.prompt_index], "response": e.text, "truth": on.truths[e.prompt_index]}
            | {"reward": e.reward, "turns": e.turns, "stopped_by": e.stopped_by}
            for e in episodes[:3]
        ]
        return episode_stats(episodes, "eval_"), examples


def episode_row(task: Task, question: int) -> dict[str, Any]:
    """The row an episode of `question` resets on: an environment task's truth is its row; a task of questions and
    answers gives {"question", "answer"}."""
    truth = task.truths[question]
    return truth if isinstance(truth, dict) else {"question": task.questions[question], "answer": truth}


def episode_scores(episodes: Sequence[Episode]) -> list[dict[str, float]]:
    """Each episode's scores as a grader's: the final reward, and the environment's other *_reward entries."""
    return [{"reward": e.reward} | {k: v for k, v in e.info.items() if k.endswith("_reward")} for e in episodes]


def episode_stats(episodes: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Means over the episodes: reward, turns, sampled and total tokens, how they ended, and each numeric entry of
    the environments' info (e.g. tool_calls), plus the fraction of episodes where that entry is > 0."""
    n = len(episodes)
    stats = {
        "reward": sum(e.reward for e in episodes) / n,
        "turns_mean": sum(e.turns for e in episodes) / n,
        "sampled_tokens_mean": sum(sum(e.sampled_mask or ()) for e in episodes) / n,
        "episode_tokens_mean": sum(len(e.token_ids) for e in episodes) / n,
    }
    for reason in ("max_turns", "max_tokens", *ENV_FAILURES):
        stats[f"stopped_by_{reason}"] = sum(e.stopped_by == reason for e in episodes) / n
    keys = sorted({k for e in episodes for k, v in e.info.items() if isinstance(v, (int, float)) and k != "reward"})
    for key in keys:
        values = [float(e.info.get(key, 0.0)) for e in episodes]
        stats[f"{key}_mean"] = sum(values) / n
        if not key.endswith("_reward"):
            stats[f"{key}_rate"] = sum(v > 0 for v in values) / n
    out = {prefix + k: v for k, v in stats.items()}
    if prefix == "train_":  # the loop's progress bar and logs read these names
        out |= {
            "response_length_mean": stats["sampled_tokens_mean"],
            "truncated_fraction": stats["stopped_by_max_tokens"],
        }
    return out
