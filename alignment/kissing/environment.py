"""PKU HW3 §7's refinement loop as an environment: the model writes a program, the evaluator answers, the model
refines.

`reset(task)` gives the handout's simple prompt (or the task's own, with a starting program if it has one);
each `step(reply)` takes the program out of the reply, runs it in the sandbox, verifies its set exactly, and
answers with the handout's refinement prompts around the evaluator's verdict: on failure the exact error
(`Minimum squared distance 36 < maximum squared norm 40`, the course evaluator's words), on success the score
and the invitation to add more vectors. The episode ends after `max_turns` programs.

Reward: each turn's reward is a score, in points (|C| when the set is valid, 0 otherwise) or, by default, as a
fraction of the public record the course's evaluator divides by (its `combined_score`, |C| / 593); `final` says
whether a turn is scored on its own program ("last") or on the episode's best program so far ("best", the
default: the handout keeps the best set found, so a bold attempt that breaks a valid set costs nothing at the end).
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from alignment.envs.base import EnvStep
from alignment.kissing.sandbox import SandboxLimits
from alignment.kissing.verifier import RECORD, KissingMetrics, evaluate_program

# The handout's prompts (§7.4), word for word: the baseline, then the two refinement prompts around the verdict.
HANDOUT_PROMPT = (
    "I need to find a set of integer vectors C in 11 dimensions such that 0 is not in C and "
    "$\\min_{x \\neq y \\in C} \\|x - y\\| \\geq \\max_{x \\in C} \\|x\\|$. My score is the number of vectors in C. "
    "Please write a Python program that defines a global variable `points` as a list of such vectors."
)
FAILED_PROMPT = (
    "Your previous attempt failed with this error: `{error}`. This means the condition was violated. Please analyze "
    "your set of vectors and propose a new, corrected set that fixes this error."
)
VALID_PROMPT = (
    "Your previous set of vectors was valid and achieved a score of {score}. This is great! Now, can you try to *add "
    "more vectors* to this set while still satisfying the condition? For example, can you find a new vector `z` such "
    "that its norm is no more than the current max norm, and its distance to all other vectors is at least that max "
    "norm?"
)
NO_PROGRAM = "no program found in the reply"  # the verdict when a reply holds no Python program
NO_PROGRAM_PROMPT = "Your reply contained no Python program. Reply with the complete program in one ```python block."
STARTING_PROGRAM = "Here is a program to start from. {verdict}\n\n```python\n{program}```"

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_ENTRY = re.compile(r"\bpoints\b|\bdef (?:run_code|get_centers)\b")


def extract_program(reply: str) -> str | None:
    """The program in a reply: the last fenced block that gives points (a global `points`, `run_code` or
    `get_centers`; an unclosed final fence counts), else the last fenced block, else the whole reply if it
    compiles and assigns `points`; reasoning in <think> tags is skipped."""
    text = _THINK.sub("", reply)
    blocks = [b.strip() for b in _FENCE.findall(text) if b.strip()]
    giving = [b for b in blocks if _ENTRY.search(b)]
    if giving or blocks:
        return (giving or blocks)[-1] + "\n"
    if re.search(r"^\s*points\s*=", text, re.MULTILINE):
        try:
            compile(text, "reply", "exec")
            return text.strip() + "\n"
        except SyntaxError:
            return None
    return None


def verdict_text(metrics: KissingMetrics) -> str:
    """What the model reads after a program: the handout's refinement prompt around the evaluator's verdict."""
    if metrics.validity == 1.0:
        return VALID_PROMPT.format(score=metrics.num_points)
    return FAILED_PROMPT.format(error=metrics.message)


@dataclass
class KissingSettings:
    max_turns: int = 4  # programs per episode
    reward: Literal["record_fraction", "points"] = "record_fraction"  # |C| / 593 (the course's combined_score) or |C|
    final: Literal["best", "last"] = "best"  # a turn's reward: the episode's best program so far, or its own
    limits: SandboxLimits = field(default_factory=SandboxLimits)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.reward not in ("record_fraction", "points"):
            raise ValueError(f"reward must be 'record_fraction' or 'points', got {self.reward!r}")
        if self.final not in ("best", "last"):
            raise ValueError(f"final must be 'best' or 'last', got {self.final!r}")


class KissingEnvironment:
    """One episode of program refinement. A task is a dict with optional `prompt` (or `question`, as GRPO's task
    rows name it; default: the handout's) and `program` (a starting program, shown with its verdict in the first
    message)."""

    name = "kissing"

    def __init__(
        self,
        settings: KissingSettings | None = None,
        evaluate: Callable[[str], KissingMetrics] | None = None,
    ) -> None:
        self.settings = settings or KissingSettings()
        self.max_turns = self.settings.max_turns
        self._evaluate = evaluate or (lambda program: evaluate_program(program, self.settings.limits))
        self.turn = 0
        self.best_points = 0  # the episode's best valid |C| so far

    def reward(self, points: int) -> float:
        return points / RECORD if self.settings.reward == "record_fraction" else float(points)

    def reset(self, task: dict[str, Any]) -> str:
        self.turn, self.best_points = 0, 0
        prompt = task.get("prompt") or task.get("question") or HANDOUT_PROMPT  # "question": a Task row (GRPO)
        start = task.get("program")
        if not start:
            return prompt
        metrics = self._evaluate(start)
        if metrics.validity == 1.0:
            self.best_points = metrics.num_points
        verdict = f"Evaluator: {metrics.message}"
        return f"{prompt}\n\n{STARTING_PROGRAM.format(verdict=verdict, program=start.rstrip() + chr(10))}"

    def restore(self, turn: int, best_points: int) -> None:
        """Continue an episode from a log: `turn` programs already answered, the best of them valid at `best_points`."""
        self.turn, self.best_points = turn, best_points

    def step(self, action: str) -> EnvStep:
        if self.turn >= self.max_turns:
            raise RuntimeError(f"the episode is over: all {self.max_turns} turns were taken")
        self.turn += 1
        program = extract_program(action)
        metrics = KissingMetrics(message=NO_PROGRAM) if program is None else self._evaluate(program)
        points = metrics.num_points if metrics.validity == 1.0 else 0
        self.best_points = max(self.best_points, points)
        done = self.turn >= self.max_turns
        feedback = verdict_text(metrics) if program is not None else NO_PROGRAM_PROMPT
        info = {
            "turn": self.turn,
            "program": program,
            "verdict": metrics.to_json(),
            "points": points,
            "best_points": self.best_points,
            "feedback": feedback,  # also when done, for logs: what the model would read next
        }
        scored = self.best_points if self.settings.final == "best" else points
        return EnvStep("" if done else feedback, self.reward(scored), done, info)


def grade_reply(reply: str, truth: Any = None) -> dict[str, float]:
    """A single reply scored as a one-turn episode is: the record fraction of its program's valid set (0 when the
    reply holds no program or the set is invalid), for a reward function outside an episode."""
    step = KissingEnvironment(KissingSettings(max_turns=1)).step(reply)
    return {"reward": step.reward, "points": float(step.info["points"])}


def kissing_environment(**settings: Any) -> KissingEnvironment:
    """The registry's constructor: keyword settings of KissingSettings (max_turns, reward, final, limits)."""
    return KissingEnvironment(KissingSettings(**settings))
