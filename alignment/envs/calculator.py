"""A calculator tool for arithmetic and GSM8K-style word problems.

The system prompt tells the model the tag that calls the tool, and one demonstration exchange shows it; a turn
that ends with `<calculator>3*(4+5)</calculator>` gets the value (`27`) back as the next user turn, an expression
the parser refuses gets `error: ...`. A turn with `<answer>...</answer>` ends the episode, graded by the r1_zero grader
(alignment/grader.py) on that answer: reward 1 when it matches the ground truth, else 0. A turn with neither ends it
unrewarded. Without the tool (`tool=False`) the same problems are asked for an answer alone, in one turn.
Expressions go through alignment/envs/arithmetic.py's parser, never eval.
"""

import random
import re
from dataclasses import dataclass, field
from typing import Any

from alignment.data.task import Task
from alignment.envs.arithmetic import CalculatorError, evaluate, format_value
from alignment.envs.base import EnvStep
from alignment.grader import r1_zero_reward_fn

CALL = re.compile(r"<calculator>(.*?)</calculator>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)(?:</answer>|$)", re.DOTALL)

TOOL_SYSTEM = (
    "You solve math problems. You have a calculator: write <calculator>expression</calculator> (numbers, + - * / "
    "and parentheses) and the user tells you its value. Give the final result as <answer>number</answer>."
)
NO_TOOL_SYSTEM = "You solve math problems. Give the final result as <answer>number</answer>."
# one demonstration exchange, shown before the problem as earlier turns of the conversation
EXAMPLE = "Lee has 12 bags with 34 marbles in each. How many marbles in all?"
TOOL_EXAMPLE = [
    {"role": "user", "content": EXAMPLE},
    {"role": "assistant", "content": "<calculator>12*34</calculator>"},
    {"role": "user", "content": "408"},
    {"role": "assistant", "content": "<answer>408</answer>"},
]
NO_TOOL_EXAMPLE = [{"role": "user", "content": EXAMPLE}, {"role": "assistant", "content": "<answer>408</answer>"}]


def grade(response: str, truth: Any) -> dict[str, float]:
    """The r1_zero grader's verdict on the last <answer> block of `response` (format: such a block exists)."""
    answers = ANSWER.findall(response)
    if not answers:
        return {"format_reward": 0.0, "answer_reward": 0.0, "reward": 0.0}
    return r1_zero_reward_fn(f"</think> <answer>{answers[-1].strip()}</answer>", truth)


@dataclass
class CalculatorEnv:
    """One episode: the problem, up to max_turns - 1 calculator calls, then the answer."""

    max_turns: int = 4
    tool: bool = True
    name: str = "calculator"
    truth: Any = None
    tool_calls: int = 0
    tool_errors: int = 0
    stop: tuple[str, ...] = field(init=False)
    context: list[dict[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.stop = ("</calculator>", "</answer>") if self.tool else ("</answer>",)
        system = {"role": "system", "content": TOOL_SYSTEM if self.tool else NO_TOOL_SYSTEM}
        self.context = [system] + (TOOL_EXAMPLE if self.tool else NO_TOOL_EXAMPLE)

    def reset(self, task: dict[str, Any]) -> str:
        self.truth, self.tool_calls, self.tool_errors = task["answer"], 0, 0
        return task["question"]

    def step(self, action: str) -> EnvStep:
        calls = CALL.findall(action)
        if self.tool and calls and "<answer>" not in action:
            self.tool_calls += 1
            try:
                observation = format_value(evaluate(calls[-1]))
            except CalculatorError as err:
                self.tool_errors += 1
                observation = f"error: {err}"
            return EnvStep(observation, 0.0, False, self.counts())
        scores = grade(action, self.truth)
        return EnvStep("", scores["reward"], True, self.counts() | scores)

    def counts(self) -> dict[str, float]:
        return {"tool_calls": float(self.tool_calls), "tool_errors": float(self.tool_errors)}


def arithmetic_problems(count: int, seed: int) -> tuple[list[str], list[str]]:
    """`count` one-step word problems on two- and three-digit numbers (sums, differences, products of two 2-digit
    numbers): questions and answers, seeded. Apart from alignment/data/arithmetic.py on purpose: that task is sized
    for a 135M model to solve in its head (small numbers, products by 2-9); these are sized so the tool pays."""
    rng = random.Random(seed)
    names, things = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fay"], ["apples", "books", "coins", "stamps", "shells"]
    questions, answers = [], []
    for _ in range(count):
        name, thing = rng.choice(names), rng.choice(things)
        a, b = rng.randint(12, 99), rng.randint(12, 99)
        kind = rng.randrange(3)
        if kind == 0:
            a, b = a * 10 + rng.randint(0, 9), b * 10 + rng.randint(0, 9)
            question, answer = f"{name} has {a} {thing} and gets {b} more. How many {thing} now?", a + b
        elif kind == 1:
            a, b = max(a, b) * 10 + rng.randint(0, 9), min(a, b)
            question, answer = f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?", a - b
        else:
            question, answer = f"{name} has {a} boxes with {b} {thing} in each. How many {thing} in all?", a * b
        questions.append(question)
        answers.append(str(answer))
    return questions, answers


def arithmetic_tasks(n_train: int, n_validation: int, seed: int) -> tuple[Task, Task]:
    """Generated problems: training from `seed`, validation from another stream without the training questions."""
    train = arithmetic_problems(n_train, seed)
    seen = set(train[0])
    pool = zip(*arithmetic_problems(2 * n_validation + 16, seed + 7_919))
    held_out = [(q, a) for q, a in pool if q not in seen][:n_validation]
    validation = [q for q, _ in held_out], [a for _, a in held_out]
    return Task(*train, "{question}", grade), Task(*validation, "{question}", grade)
