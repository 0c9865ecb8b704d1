"""Prompt templates (files in the top-level prompts/ folder, or any template file) and the kind each is: the kind
picks the reward function (alignment/grader.py) and the stop strings.

A name is its own kind: `r1_zero` (reward `r1_zero_reward_fn`, generation stops at `</answer>`) or `question_only`
(reward `question_only_reward_fn`, the last \\boxed{}; no stop string: the response ends at EOS). A template file is
r1_zero-style when it asks for `<answer>` tags, and question_only-style otherwise; so PKU's `data/r1_zero.prompt` and
`data/question_only.prompt` (the same texts as ours) behave as the names do.
"""

from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent.parent / "prompts"
PROMPT_NAMES = ("r1_zero", "question_only")
Prompt = str  # one of PROMPT_NAMES or the path of a template file
STOP_STRINGS = {"r1_zero": ("</answer>",), "question_only": ()}
PROMPT_HELP = (
    "Prompt template: r1_zero, question_only, or a template file with {question} (one asking for <answer> tags "
    "is graded and stopped as r1_zero, any other as question_only)."
)


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


def check_prompt(name_or_path: str) -> None:
    """A name or a readable template file with {question}; else a ValueError naming --prompt."""
    try:
        load_prompt(name_or_path)
    except (ValueError, OSError) as err:
        raise ValueError(f"--prompt: {err}") from None


def prompt_kind(name_or_path: str) -> str:
    """`r1_zero` or `question_only`: the reward function and stop strings a prompt brings (see the module docstring)."""
    if name_or_path in PROMPT_NAMES and not Path(name_or_path).is_file():
        return name_or_path
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


def chat_template(tokenizer) -> str:
    """The model's chat turn around `{question}`, or the bare question for models without a chat template."""
    if not tokenizer.chat_template:
        return "{question}\n"
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": "{question}"}], add_generation_prompt=True, tokenize=False
    )
