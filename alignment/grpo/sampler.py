"""The GRPO sampler: draws each step's questions, generates group_size rollouts for each, grades them.

It holds the rollout engine, the task, the grader and the seeded question order (whose position a checkpoint
keeps); with DAPO's dynamic sampling (--dynamic-sampling) it draws again for groups whose rewards all agree. With
--curriculum-threshold its curriculum (alignment/tasks/curriculum.py) sees every graded rollout and regenerates the
rows of a task that moved up a level before the next draw; its levels are part of a checkpoint too.
Sampling settings are a function of the step and the draw alone, so a resumed run samples exactly the same.
"""

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

import torch

from alignment.data.task import Task
from alignment.evaluation import evaluate_task, reward_means
from alignment.grading.parallel import ParallelGrader
from alignment.grpo.batch import truncated
from alignment.grpo.config import GRPOConfig
from alignment.grpo.objective import Objective
from alignment.prompts import format_prompt
from alignment.rollout.forward_tape import ForwardTape
from alignment.rollout.interface import Rollout, RolloutEngine, SamplingConfig
from alignment.run.setup import PhaseTimer, PromptOrder
from alignment.tasks.curriculum import Curriculum


@dataclass
class Drawn:
    """A step's graded groups: rollouts[i * G:(i + 1) * G] answer question questions[i]."""

    questions: list[int]
    rollouts: list[Rollout]
    scores: list[dict[str, float]]
    stats: dict[str, float]  # over every rollout drawn (dynamic sampling's dropped groups included)


def rollout_sampling(c: GRPOConfig, step: int, draw: int = 0) -> SamplingConfig:
    """Sampling settings of step `step`'s rollouts, draw `draw` of its dynamic sampling (the Ray generators' too)."""
    return SamplingConfig(
        temperature=c.sampling_temperature,
        top_p=c.sampling_top_p,
        max_tokens=c.sampling_max_tokens,
        min_tokens=c.sampling_min_tokens,
        stop=c.stop,
        # + 1: no rollout call shares its seed with a validation, which samples with the run's seed (as eval_zero_shot)
        seed=c.seed * 1_000_003 + 1 + step + draw * 1_000_000_007,
    )


def validation_sampling(c: GRPOConfig) -> SamplingConfig:
    """One sample per validation question with the rollout settings, up to eval_max_tokens, at eval_temperature, but
    without --sampling-min-tokens: validation samples as the zero-shot evaluation does (scripts/eval_zero_shot.py,
    the handouts' evaluation settings), so that step 0 measures what the baseline measures; the minimum length is a
    training device (no empty rollouts), not part of the benchmark."""
    return SamplingConfig(
        temperature=c.sampling_temperature if c.eval_temperature is None else c.eval_temperature,
        top_p=c.sampling_top_p,
        max_tokens=c.eval_max_tokens or c.sampling_max_tokens,
        min_tokens=0,
        stop=c.stop,
        seed=c.seed,
    )


def informative_groups(rewards: torch.Tensor, group_size: int) -> list[bool]:
    """Per group of `group_size` consecutive rewards (n,): whether they differ (DAPO's dynamic sampling keeps those)."""
    grouped = rewards.view(-1, group_size)
    return (grouped != grouped[:, :1]).any(dim=1).tolist()


def rollout_stats(rollouts: Sequence[Rollout], scores: Sequence[dict[str, float]], max_tokens: int) -> dict[str, float]:
    """A step's rollout metrics: mean rewards (each reward function's too, `train_reward_<name>`), lengths."""
    lengths = [len(r.token_ids) for r in rollouts]
    n = len(rollouts)
    return reward_means(scores, "train_") | {
        "train_reward": sum(s["reward"] for s in scores) / n,
        "train_format_reward": sum(s.get("format_reward", 0.0) for s in scores) / n,
        "train_answer_reward": sum(s.get("answer_reward", 0.0) for s in scores) / n,
        "response_length_mean": sum(lengths) / n,
        "response_length_max": max(lengths),
        "truncated_fraction": sum(truncated(r, max_tokens) for r in rollouts) / n,
    }


class GRPOSampler:
    """The engine, task, grader and question order of a run; `draw(step)` is one step's graded groups."""

    def __init__(
        self,
        config: GRPOConfig,
        engine: RolloutEngine,
        task: Task,
        grader: ParallelGrader,
        tape: ForwardTape | None = None,
    ) -> None:
        self.config, self.engine, self.task, self.grader, self.tape = config, engine, task, grader, tape
        self.objective = Objective.from_settings(config)  # the rewards dynamic sampling compares
        self.order = PromptOrder(len(task.questions), config.seed)
        self.curriculum = Curriculum.from_settings(config)  # None without --curriculum-threshold

    def draw(self, step: int, timer: PhaseTimer | None = None) -> Drawn:
        """Step `step`'s questions (the step about to be taken: 0 first) and their graded rollouts.

        One draw of n_prompts_per_rollout_batch questions; with --dynamic-sampling (DAPO), groups whose rewards all
        agree are dropped and as many new questions drawn as groups are missing, for at most
        --dynamic-sampling-max-draws rounds. A batch still short trains on the groups it has (on the last round's,
        all of advantage 0, if it has none).
        """
        c, n, timer = self.config, self.config.n_prompts_per_rollout_batch, timer or PhaseTimer()
        questions: list[int] = []
        rollouts: list[Rollout] = []
        scores: list[dict[str, float]] = []
        every: list[tuple[Rollout, dict[str, float]]] = []
        dropped = 0
        if self.curriculum is not None:
            self.curriculum.apply(self.task)  # rows of tasks that moved up since the last draw, at their new level
        for attempt in range(c.dynamic_sampling_max_draws if c.dynamic_sampling else 1):
            asked = self.order.take(n - len(questions))
            with timer("rollout"):
                new = self.generate(asked, step, attempt)
            with timer("grading"):
                graded = self.grade(asked, new)
            every += zip(new, graded)
            keep = [True] * len(asked)
            if c.dynamic_sampling:
                keep = informative_groups(self.objective.rewards(new, graded, step + 1), c.group_size)
            dropped += keep.count(False)
            for i in (i for i, kept in enumerate(keep) if kept):
                group = slice(i * c.group_size, (i + 1) * c.group_size)
                rollouts += [replace(r, prompt_index=len(questions)) for r in new[group]]
                scores += graded[group]
                questions.append(asked[i])
            if len(questions) == n:
                break
        kept = len(questions)
        if not questions:
            questions, rollouts, scores = asked, new, graded
        drawn = [r for r, _ in every]
        stats = rollout_stats(drawn, [s for _, s in every], c.sampling_max_tokens)
        if c.overlong_buffer is not None:
            stats["overlong_penalty_mean"] = self.objective.length_penalties(drawn).mean().item()
        if c.dynamic_sampling:
            stats |= {
                "dynamic_draws": attempt + 1,
                "dynamic_groups_drawn": len(every) // c.group_size,
                "dynamic_groups_dropped": dropped,
                "dynamic_groups_missing": n - kept,
            }
        if self.curriculum is not None:
            stats |= self.curriculum.metrics()
        return Drawn(questions, rollouts, scores, stats)

    def evaluate(self, on: Task, sampling: SamplingConfig) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """One sample per question of `on`, graded: the validation's summary and a few examples."""
        return evaluate_task(self.engine, on, self.grader, sampling)

    def generate(self, questions: Sequence[int], step: int, draw: int = 0) -> list[Rollout]:
        """group_size rollouts for each question index, prompt-major."""
        model = getattr(self.engine, "model", None)
        if isinstance(model, torch.nn.Module):
            model.eval()  # an in-process engine samples the policy, which the learner left in train mode
        prompts = [format_prompt(self.task.template, self.task.questions[q]) for q in questions]
        with nullcontext() if self.tape is None else self.tape.recording(self.engine):
            return self.engine.generate(prompts, self.config.group_size, rollout_sampling(self.config, step, draw))

    def grade(self, questions: Sequence[int], rollouts: Sequence[Rollout]) -> list[dict[str, float]]:
        truths = self.task.truths_for(questions, [r.prompt_index for r in rollouts])
        scores = self.grader([r.text for r in rollouts], truths)
        if self.curriculum is not None:
            self.curriculum.record(truths, scores)
        return scores

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the sampler: the question order's position, the curriculum's levels."""
        kept: dict[str, Any] = {"order_position": self.order.position}
        return kept if self.curriculum is None else kept | {"curriculum": self.curriculum.state()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.order.position = state["order_position"]
        if self.curriculum is not None:
            self.curriculum.load_state(state["curriculum"])
