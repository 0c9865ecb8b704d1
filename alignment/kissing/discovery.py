"""LLM-driven program search for kissing configurations (PKU NLPDL HW3 §7), with the verifier as judge.

Modes (each step asks the chat model for one program and verifies it in the sandbox):
- best_of_n: N independent samples of the same prompt (the starting program and its verifier output);
  the verifier selects the best.
- refine: the latest program and the verifier's exact message go back to the model, step after step.
- evolve: a database of scored programs (AlphaEvolve-style); each step samples a parent with probability
  proportional to exp((score - best) / parent_temperature) and shows it with the best other programs
  ("inspirations") and their verifier output.

The run folder holds the handout's deliverables, rewritten atomically after each step: program.py (the best
program), conversation_log.json (a JSON object: the run's settings, its sessions and every candidate, with each
request sent to the model, the reply, the timings and the verifier's verdict) and, written by the script,
report.md. A stopped run resumes from its log. One time budget (`budget_s`) bounds the whole run, counted
across resumes: no model request starts after it, a reply still awaited when it runs out is abandoned, and only
a verification already under way may finish past it.
"""

import json
import math
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from alignment.kissing.llm_client import ChatModel, ChatReply, Message
from alignment.kissing.verifier import DIMENSION, KissingMetrics
from alignment.rollout.interface import SamplingConfig
from alignment.utils.atomic import atomic_write_json, atomic_write_text

Mode = Literal["best_of_n", "refine", "evolve"]
Source = Literal["seed", "search-code", "llm"]
LOG_FILE, BEST_PROGRAM, BEST_JSON = "conversation_log.json", "program.py", "best.json"
LOG_FORMAT = "kissing-discovery-log/2"

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
    """One scored program: a seed, the search code's result, or one model turn (its request and reply)."""

    id: int
    source: Source
    program: str | None  # None when the reply held no program (or never came)
    score: float
    verdict: dict[str, Any]  # the verifier's metrics, or why there was nothing to verify
    elapsed_s: float  # when it was recorded, seconds since the run began (continued across resumes)
    parent: int | None = None
    request: dict[str, Any] | None = None  # model, messages and sampling settings sent
    reply: str | None = None  # None: no reply within the budget
    finish_reason: str | None = None
    tokens: dict[str, int] | None = None
    generate_s: float | None = None  # waiting for the reply, or running the search code
    verify_s: float | None = None  # the sandboxed run and the exact check
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
    return (
        f"Program {candidate.id} (score {candidate.score:g}). Verifier: {candidate.verdict.get('message', '')}\n"
        f"```python\n{clip_program(candidate.program or '', max_chars)}```"
    )


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
    budget_s: float = math.inf  # wall-clock seconds for the whole run (search code and model steps), across resumes
    model: str = ""  # the name each request carries


def call_with_deadline(work: Callable[[], ChatReply], timeout_s: float) -> ChatReply | None:
    """work() in a daemon thread; None when it has not returned within `timeout_s` (the thread is abandoned:
    a blocking HTTP read or a local generation cannot be interrupted, and the process exits without it)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["reply"] = work()
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(max(0.0, timeout_s) if math.isfinite(timeout_s) else None)
    if worker.is_alive():
        return None
    if "error" in box:
        raise box["error"]
    return box["reply"]


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Discovery:
    """The search state (the database of candidates), the run's sessions and its files in `output_dir`.

    `run_info` (the script's settings: backend, model, ...) goes into the log as is; each construction (a start
    or a resume) opens a session, closed by `stop(reason)`."""

    def __init__(
        self,
        output_dir: Path,
        settings: DiscoverySettings,
        evaluate: Callable[[str], KissingMetrics],
        run_info: dict[str, Any] | None = None,
    ) -> None:
        self.output_dir = output_dir
        self.settings = settings
        self.evaluate = evaluate
        self.run_info = run_info or {}
        self.candidates: list[Candidate] = []
        self.sessions: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self._offset_s = 0.0
        log = output_dir / LOG_FILE
        if log.exists():
            saved = json.loads(log.read_text(encoding="utf-8"))
            if not isinstance(saved, dict) or saved.get("format") != LOG_FORMAT:
                raise ValueError(
                    f"{log} is not a {LOG_FORMAT} log (written by an older version?); start over with --overwrite"
                )
            self.candidates = [Candidate(**row) for row in saved["candidates"]]
            self.sessions = saved["sessions"]
            self._offset_s = max([c.elapsed_s for c in self.candidates] + [s["ended_s"] or 0.0 for s in self.sessions])
        self.sessions.append(
            {
                "started_at": utc_now(),
                "began_s": round(self._offset_s, 3),
                "ended_s": None,
                "budget_s": settings.budget_s if math.isfinite(settings.budget_s) else None,
                "iterations": settings.iterations,
                "stopped": None,
            }
        )

    # --- the database -------------------------------------------------------------------------------

    def elapsed_s(self) -> float:
        return self._offset_s + time.monotonic() - self._started

    def remaining_s(self) -> float:
        """Seconds left of the run's budget (negative once it is spent)."""
        return self.settings.budget_s - self.elapsed_s()

    def log(self) -> dict[str, Any]:
        """conversation_log.json: everything a report, a resume or a reader needs."""
        return {
            "format": LOG_FORMAT,
            "task": TASK_PROMPT,
            "system_prompt": SYSTEM_PROMPT,
            "dimension": DIMENSION,
            "run": self.run_info,
            "sessions": self.sessions,
            "candidates": [asdict(c) for c in self.candidates],
        }

    def save(self) -> None:
        atomic_write_json(self.output_dir / LOG_FILE, self.log())

    def stop(self, reason: str) -> str:
        """Close this session with the reason the run ended (kept in the log)."""
        self.sessions[-1].update(ended_s=round(self.elapsed_s(), 3), stopped=reason)
        self.save()
        return reason

    @property
    def best(self) -> Candidate | None:
        return max(self.candidates, key=lambda c: (c.score, -c.id), default=None)

    @property
    def model_steps(self) -> int:
        return sum(c.source == "llm" for c in self.candidates)

    def add(self, source: Source, program: str | None, metrics: KissingMetrics, **details: Any) -> Candidate:
        """Record a scored program; the log, and the best program if it improved, are rewritten atomically."""
        previous = self.best
        candidate = Candidate(
            len(self.candidates),
            source,
            program,
            metrics.score,
            metrics.to_json(),
            round(self.elapsed_s(), 3),
            **details,
        )
        self.candidates.append(candidate)
        if program is not None and (previous is None or candidate.score > previous.score):
            atomic_write_text(self.output_dir / BEST_PROGRAM, program)
            atomic_write_json(
                self.output_dir / BEST_JSON,
                {
                    "score": candidate.score,
                    "candidate": candidate.id,
                    "source": source,
                    "verdict": candidate.verdict,
                },
            )
        self.save()
        return candidate

    def add_program(self, source: Source, program: str, note: str = "", generate_s: float | None = None) -> Candidate:
        began = time.monotonic()
        metrics = self.evaluate(program)
        return self.add(
            source, program, metrics, note=note, generate_s=generate_s, verify_s=round(time.monotonic() - began, 3)
        )

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
            start = describe(parent, s.prompt_program_chars)
            body = f"A starting point:\n\n{start}\n\nWrite a program that scores higher."
        elif s.mode == "refine":
            parent = pool[-1]
            body = (
                f"Your previous program:\n\n{describe(parent, s.prompt_program_chars)}\n\n"
                "Fix what the verifier reports and raise the score. Reply with the complete new program."
            )
        else:
            parent = sample_parent(pool, s.parent_temperature, rng)
            others = sorted((c for c in pool if c.id != parent.id), key=lambda c: (-c.score, c.id))[: s.inspirations]
            shown = "\n\n".join(describe(c, s.prompt_program_chars) for c in others)
            body = (
                f"Improve this program:\n\n{describe(parent, s.prompt_program_chars)}\n\n"
                + (f"Other programs from the database, best first:\n\n{shown}\n\n" if others else "")
                + f"Write a new program that scores higher than {parent.score:g}."
            )
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{TASK_PROMPT}\n\n{body}"},
        ]
        return messages, parent.id

    # --- the loop -------------------------------------------------------------------------------------

    def step(self, chat: ChatModel) -> Candidate:
        """One model turn: prompt, reply (awaited at most until the budget runs out), extraction, verdict."""
        s = self.settings
        step = self.model_steps
        rng = random.Random(s.seed * 1_000_003 + step)  # the same step draws the same parent after a resume
        messages, parent = self.prompt(rng)
        sampling = SamplingConfig(**(asdict(s.sampling) | {"seed": s.seed + step}))
        request = {
            "model": s.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": sampling.seed,
        }
        began = time.monotonic()
        reply = call_with_deadline(lambda: chat.chat(messages, sampling), self.remaining_s())
        asked = {"parent": parent, "request": request, "generate_s": round(time.monotonic() - began, 3)}
        if reply is None:
            cut = KissingMetrics(message=f"no reply within the run's budget of {s.budget_s:g} s (request abandoned)")
            return self.add("llm", None, cut, **asked)
        answered = asked | {
            "reply": reply.text,
            "finish_reason": reply.finish_reason,
            "tokens": {"prompt": reply.prompt_tokens, "completion": reply.completion_tokens},
        }
        program = extract_program(reply.text)
        if program is None:
            return self.add("llm", None, KissingMetrics(message="no program found in the reply"), **answered)
        began = time.monotonic()
        metrics = self.evaluate(program)
        return self.add("llm", program, metrics, **answered, verify_s=round(time.monotonic() - began, 3))

    def run(self, chat: ChatModel | None) -> str:
        """Model steps until `iterations` are done or the budget is spent; returns (and logs) why it stopped.
        A progress bar shows the best score. `chat` may be None when no step can run (none left, or no time)."""
        s = self.settings
        with tqdm(total=s.iterations, initial=min(self.model_steps, s.iterations), desc=f"kissing {s.mode}") as bar:
            while self.model_steps < s.iterations:
                if self.remaining_s() <= 0:
                    return self.stop(
                        f"budget of {s.budget_s:g} s spent after {self.model_steps} of {s.iterations} model steps"
                    )
                assert chat is not None, "a model step is due: pass a chat model"
                latest = self.step(chat)
                bar.update(1)
                bar.set_postfix(best=self.best.score if self.best else 0, last=latest.score)
                if latest.reply is None:
                    return self.stop(
                        f"budget of {s.budget_s:g} s ran out while waiting for model step "
                        f"{self.model_steps} (its request is logged without a reply)"
                    )
        return self.stop(f"all {s.iterations} model steps done")
