"""LLM-driven program search for kissing configurations (PKU NLPDL HW3 §7), with the verifier as judge.

Modes (each step asks the chat model for one program and verifies it in the sandbox):
- best_of_n: N independent samples of the same prompt (the starting program and its verifier output);
  the verifier selects the best.
- refine: the latest program and the verifier's exact message go back to the model, step after step.
- evolve: a database of scored programs (AlphaEvolve-style); each step samples a parent with probability
  proportional to exp((score - best) / parent_temperature) and shows it with the best other programs
  ("inspirations") and their verifier output.

Every prompt and reply goes into conversation_log.json (rewritten atomically after each step), the best
program into best_program.py and best.json, so a stopped run resumes from its log.
"""

import json
import math
import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from alignment.atomic import atomic_write_json, atomic_write_text
from alignment.kissing_verifier import DIMENSION, KissingMetrics
from alignment.llm_client import ChatModel, Message
from alignment.rollout import SamplingConfig

Mode = Literal["best_of_n", "refine", "evolve"]
Source = Literal["seed", "search-code", "llm"]
LOG_FILE, BEST_PROGRAM, BEST_JSON = "conversation_log.json", "best_program.py", "best.json"

SYSTEM_PROMPT = "You are an expert in discrete geometry, coding theory and Python."
TASK_PROMPT = f"""Find a large kissing configuration in dimension {DIMENSION}.

Write a Python program that defines a global variable `points`: a list of integer vectors in Z^{DIMENSION}
(each a list of {DIMENSION} Python ints) such that
- the zero vector is not in the set and no vector appears twice;
- the minimum squared distance between two distinct vectors is at least the maximum squared norm of a vector.
Then the kissing number in dimension {DIMENSION} is at least len(points). The score is len(points) when the set is
valid and 0 otherwise. Known lower bounds: 438 (best lattice), 582, 592, 593; the upper bound is 870.
The program runs with a time limit, without network access, and may only write files in its own folder;
numpy is available. Reply with the complete program in a single ```python code block."""


@dataclass
class Candidate:
    """One scored program: a seed, the search code's result, or a model's reply."""

    id: int
    source: Source
    program: str | None  # None when the reply held no program
    score: float
    metrics: dict[str, Any]
    elapsed_s: float  # since the run began (continued across resumes)
    parent: int | None = None
    prompt: list[Message] | None = None
    reply: str | None = None
    tokens: dict[str, int] | None = None
    note: str = ""  # where a seed came from, or the search code's history


_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)


def extract_program(reply: str) -> str | None:
    """The program in a reply: the last fenced block that mentions `points` (an unclosed final fence counts),
    else the whole reply if it compiles and assigns `points`; reasoning in <think> tags is skipped."""
    text = _THINK.sub("", reply)
    blocks = [b.strip() for b in _FENCE.findall(text) if b.strip()]
    with_points = [b for b in blocks if re.search(r"\bpoints\b", b)]
    if with_points:
        return with_points[-1] + "\n"
    if blocks:
        return blocks[-1] + "\n"
    if re.search(r"^\s*points\s*=", text, re.MULTILINE):
        try:
            compile(text, "reply", "exec")
            return text.strip() + "\n"
        except SyntaxError:
            return None
    return None


def clip_program(program: str, max_chars: int) -> str:
    """Long programs (literal point lists) shortened for prompts: head and tail with a marked gap."""
    if len(program) <= max_chars:
        return program
    half = max_chars // 2
    return f"{program[:half]}\n# ... ({len(program) - 2 * half} characters omitted) ...\n{program[-half:]}"


def describe(candidate: Candidate, max_chars: int) -> str:
    return (f"Program {candidate.id} (score {candidate.score:g}). Verifier: {candidate.metrics.get('message', '')}\n"
            f"```python\n{clip_program(candidate.program or '', max_chars)}```")


def sample_parent(candidates: list[Candidate], temperature: float, rng: random.Random) -> Candidate:
    """Score-weighted choice: weight exp((score - best) / temperature); temperature 0 takes the best."""
    best = max(c.score for c in candidates)
    if temperature <= 0:
        return next(c for c in candidates if c.score == best)
    weights = [math.exp((c.score - best) / temperature) for c in candidates]
    return rng.choices(candidates, weights=weights, k=1)[0]


@dataclass
class DiscoverySettings:
    mode: Mode = "evolve"
    iterations: int = 8  # model calls in total, across resumes
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.8, max_tokens=1024, stop=()))
    parent_temperature: float = 10.0
    inspirations: int = 2
    prompt_program_chars: int = 6000
    seed: int = 0


class Discovery:
    """The search state (the database of candidates) and its files in `output_dir`."""

    def __init__(self, output_dir: Path, settings: DiscoverySettings, evaluate: Callable[[str], KissingMetrics]) -> None:
        self.output_dir = output_dir
        self.settings = settings
        self.evaluate = evaluate
        self.candidates: list[Candidate] = []
        self._started = time.monotonic()
        self._offset_s = 0.0
        log = output_dir / LOG_FILE
        if log.exists():
            self.candidates = [Candidate(**row) for row in json.loads(log.read_text(encoding="utf-8"))]
            self._offset_s = max((c.elapsed_s for c in self.candidates), default=0.0)

    # --- the database -------------------------------------------------------------------------------

    def elapsed_s(self) -> float:
        return self._offset_s + time.monotonic() - self._started

    @property
    def best(self) -> Candidate | None:
        return max(self.candidates, key=lambda c: (c.score, -c.id), default=None)

    @property
    def model_steps(self) -> int:
        return sum(c.source == "llm" for c in self.candidates)

    def add(self, source: Source, program: str | None, metrics: KissingMetrics, **details: Any) -> Candidate:
        """Record a scored program; the log, and the best program if it improved, are rewritten atomically."""
        previous = self.best
        candidate = Candidate(len(self.candidates), source, program, metrics.score, metrics.to_json(),
                              round(self.elapsed_s(), 3), **details)
        self.candidates.append(candidate)
        if program is not None and (previous is None or candidate.score > previous.score):
            atomic_write_text(self.output_dir / BEST_PROGRAM, program)
            atomic_write_json(self.output_dir / BEST_JSON, {
                "score": candidate.score, "candidate": candidate.id, "source": source, "metrics": candidate.metrics,
            })
        atomic_write_json(self.output_dir / LOG_FILE, [asdict(c) for c in self.candidates])
        return candidate

    def add_program(self, source: Source, program: str, note: str = "") -> Candidate:
        return self.add(source, program, self.evaluate(program), note=note)

    # --- prompts --------------------------------------------------------------------------------------

    def _with_programs(self) -> list[Candidate]:
        return [c for c in self.candidates if c.program is not None]

    def prompt(self, rng: random.Random) -> tuple[list[Message], int | None]:
        """The next step's messages and the candidate they build on (None: the bare task)."""
        s = self.settings
        pool = self._with_programs()
        if not pool:
            return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK_PROMPT}], None
        if s.mode == "best_of_n":  # every sample sees the best program from before the model's first step
            first = [c for c in pool if c.source != "llm"] or pool
            parent = max(first, key=lambda c: (c.score, -c.id))
            body = f"A starting point:\n\n{describe(parent, s.prompt_program_chars)}\n\nWrite a program that scores higher."
        elif s.mode == "refine":
            parent = pool[-1]
            body = (f"Your previous program:\n\n{describe(parent, s.prompt_program_chars)}\n\n"
                    "Fix what the verifier reports and raise the score. Reply with the complete new program.")
        else:
            parent = sample_parent(pool, s.parent_temperature, rng)
            others = sorted((c for c in pool if c.id != parent.id), key=lambda c: (-c.score, c.id))[:s.inspirations]
            shown = "\n\n".join(describe(c, s.prompt_program_chars) for c in others)
            body = (f"Improve this program:\n\n{describe(parent, s.prompt_program_chars)}\n\n"
                    + (f"Other programs from the database, best first:\n\n{shown}\n\n" if others else "")
                    + f"Write a new program that scores higher than {parent.score:g}.")
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": f"{TASK_PROMPT}\n\n{body}"}]
        return messages, parent.id

    # --- the loop -------------------------------------------------------------------------------------

    def step(self, chat: ChatModel) -> Candidate:
        s = self.settings
        step = self.model_steps
        rng = random.Random(s.seed * 1_000_003 + step)  # the same step draws the same parent after a resume
        messages, parent = self.prompt(rng)
        sampling = SamplingConfig(**(asdict(s.sampling) | {"seed": s.seed + step}))
        reply = chat.chat(messages, sampling)
        tokens = {"prompt": reply.prompt_tokens, "completion": reply.completion_tokens}
        program = extract_program(reply.text)
        metrics = self.evaluate(program) if program else KissingMetrics(message="no program found in the reply")
        return self.add("llm", program, metrics, parent=parent, prompt=messages, reply=reply.text, tokens=tokens)

    def run(self, chat: ChatModel) -> Candidate | None:
        """Model steps until `iterations` are done; a progress bar shows the best score."""
        total = self.settings.iterations
        with tqdm(total=total, initial=min(self.model_steps, total), desc=f"kissing {self.settings.mode}") as bar:
            while self.model_steps < total:
                latest = self.step(chat)
                bar.update(1)
                bar.set_postfix(best=self.best.score if self.best else 0, last=latest.score)
        return self.best
