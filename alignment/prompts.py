"""Prompt templates (files in the top-level prompts/ folder) and their reward functions."""

from pathlib import Path
from typing import Literal

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
PROMPT_NAMES = ("r1_zero", "question_only")
Prompt = Literal[PROMPT_NAMES]  # type: ignore[valid-type]


def load_prompt(name_or_path: str) -> str:
    """A template by name (`r1_zero`, `question_only`) or from a file; it must contain `{question}`."""
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


def format_prompt(template: str, question: str) -> str:
    """Fill `{question}`; plain replacement, so LaTeX braces elsewhere in a template are left alone."""
    return template.replace("{question}", question)


def prompt_question(template: str, prompt: str) -> str | None:
    """The question a prompt was formatted from with `template` (format_prompt's inverse), or None if it was not."""
    before, _, after = template.partition("{question}")
    if len(prompt) < len(before) + len(after) or not (prompt.startswith(before) and prompt.endswith(after)):
        return None
    return prompt[len(before) : len(prompt) - len(after)]


def chat_template(tokenizer) -> str:
    """The model's chat turn around `{question}`, or the bare question for models without a chat template."""
    if not tokenizer.chat_template:
        return "{question}\n"
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": "{question}"}], add_generation_prompt=True, tokenize=False
    )
