"""Prompt templates (files in the top-level prompts/ folder, or any template file) and the kind each is: the kind
picks the reward function (alignment/grader.py) and the stop strings.

The two kinds: `r1_zero` (reward `r1_zero_reward_fn`, generation stops at `</answer>`, kept in the output) and
`question_only` (reward `question_only_reward_fn`, the last \\boxed{}; no stop string: the response ends at EOS). Each
shipped name has its kind (`PROMPT_KINDS`)::

    r1_zero                   the DeepSeek R1-Zero prompt (CS336 A5 2025 and 2026, UW, PKU)
    r1_zero_three_shot_gsm8k  r1_zero with three worked GSM8K training problems before the question (CS336 2026's
                              few-shot baseline; the worked reasoning is this project's)
    question_only             the bare question (the handouts' text)
    question_only_boxed       the question and a request to box the final answer, as the 2026 course repository's
                              question_only file asks (in this project's words)

A template file is r1_zero-style when it asks for `<answer>` tags, and question_only-style otherwise; so PKU's
`data/r1_zero.prompt` and `data/question_only.prompt` (the same texts as ours) behave as the names do.
"""

from collections.abc import Callable
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
PROMPT_KINDS = {
    "r1_zero": "r1_zero",
    "question_only": "question_only",
    "r1_zero_three_shot_gsm8k": "r1_zero",
    "question_only_boxed": "question_only",
}
PROMPT_NAMES = tuple(PROMPT_KINDS)
Prompt = str  # one of PROMPT_NAMES or the path of a template file
STOP_STRINGS = {"r1_zero": ("</answer>",), "question_only": ()}
PROMPT_HELP = (
    f"Prompt template: {', '.join(PROMPT_NAMES)} (prompts/), or a template file with {{question}} (one asking for "
    "<answer> tags is graded and stopped as r1_zero, any other as question_only)."
)


def load_prompt(name_or_path: str) -> str:
    """A template by name (PROMPT_NAMES) or from a file; it must contain `{question}`."""
    path = Path(name_or_path)
    if not path.is_file():
        if name_or_path not in PROMPT_NAMES:
            raise ValueError(
                f"unknown prompt {name_or_path!r}: expected one of {', '.join(PROMPT_NAMES)} or a template file"
            )
        path = PROMPTS_DIR / f"{name_or_path}.prompt"
    template = path.read_text()
    if "{question}" not in template:
        raise ValueError(f"prompt template {path} has no {{question}} placeholder")
    return template


def check_prompt(name_or_path: str) -> None:
    """A name or a readable template file with {question}; else a ValueError naming --prompt."""
    try:
        load_prompt(name_or_path)
    except (ValueError, OSError) as err:
        raise ValueError(f"--prompt: {err}") from None


def prompt_kind(name_or_path: str) -> str:
    """`r1_zero` or `question_only`: the reward function and stop strings a prompt brings (see the module docstring)."""
    if name_or_path in PROMPT_NAMES and not Path(name_or_path).is_file():
        return PROMPT_KINDS[name_or_path]
    return "r1_zero" if "<answer>" in load_prompt(name_or_path) else "question_only"


def stop_strings(name_or_path: str) -> tuple[str, ...]:
    """Where generation stops for this prompt (kept in the output): `</answer>` for r1_zero-style, none otherwise."""
    return STOP_STRINGS[prompt_kind(name_or_path)]


def format_prompt(template: str, question: str) -> str:
    """Fill `{question}`; plain replacement, so LaTeX braces elsewhere in a template are left alone."""
    return template.replace("{question}", question)


def prompt_question(template: str, prompt: str) -> str | None:
    """The question a prompt was formatted from with `template` (format_prompt's inverse), or None if it was not."""
    before, _, after = template.partition("{question}")
    if len(prompt) < len(before) + len(after) or not (prompt.startswith(before) and prompt.endswith(after)):
        return None
    return prompt[len(before) : len(prompt) - len(after)]


def chat_renderer(tokenizer) -> Callable[[list[dict[str, str]]], str]:
    """A function rendering chat messages as the model's prompt (its chat template, ending where the assistant's turn
    starts); a model without a chat template gets the messages' contents one per line."""

    def render(messages: list[dict[str, str]]) -> str:
        if not tokenizer.chat_template:
            return "".join(f"{m['content']}\n" for m in messages)
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    return render


def user_turn(system_prompt: str | None = None) -> list[dict[str, str]]:
    """A user message holding `{question}`, after a system message when one is given."""
    system = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
    return [*system, {"role": "user", "content": "{question}"}]


def chat_template(tokenizer, system_prompt: str | None = None) -> str:
    """The model's chat turn around `{question}` (after `system_prompt` when given), or the bare question for models
    without a chat template."""
    return chat_renderer(tokenizer)(user_turn(system_prompt))
