"""Kissing-number discovery (PKU NLPDL HW3 §7) with a language model, run as conversations with the refinement
environment (alignment/kissing/environment.py): the model writes a program, the sandboxed evaluator answers, the
model refines.

Modes, the handout's approaches (§7.4):
- baseline: the handout's simple prompt, one turn.
- refine: agentic refinement, one conversation of `turns` turns: the history is kept (trimmed to
  `history_chars`, oldest turns first, the task and the latest turn always kept), each failure's exact error goes
  back, and after a valid set the "add more vectors" prompt.
- best_of_n: N independent samples of the first prompt (none sees another's program); the verifier selects.
- best_of_n_refine: best-of-N, then the best sample's conversation continues as refinement up to `turns` turns.
- refine_chains: N independent refinement conversations of `turns` turns each, taken in turns.
- search: no model; the project's search code (alignment.kissing.search) alone, a separate baseline.

The run folder holds the handout's deliverables, rewritten atomically after each turn: program.py (the best valid
program), best.json, and conversation_log.json: a JSON object with the run's settings, its sessions, each
conversation's first message and every turn (the exact request sent, the answer, the reasoning apart, tokens,
cost, timings, the program, the evaluator's verdict and the reply the model got). Reasoning is logged and never
sent back. Turns that do not depend on each other (the N samples, a round of the chains) go out
`parallel` at a time. A stopped run resumes from its log. One time budget (`budget_s`) bounds the whole run, counted
across resumes: no request starts after it, a reply still awaited when it runs out is abandoned (logged without
an answer), and only a verification under way may finish past it.
"""

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from alignment.kissing.environment import KissingEnvironment, KissingSettings
from alignment.kissing.llm_client import ChatModel, ChatReply, Message
from alignment.kissing.verifier import DIMENSION, KissingMetrics
from alignment.rollout.interface import SamplingConfig
from alignment.utils.atomic import atomic_write_json, atomic_write_text

Mode = Literal["baseline", "refine", "best_of_n", "best_of_n_refine", "refine_chains", "search"]
MODES: tuple[str, ...] = Mode.__args__  # type: ignore[attr-defined]
LOG_FILE, BEST_PROGRAM, BEST_JSON = "conversation_log.json", "program.py", "best.json"
LOG_FORMAT = "kissing-discovery-log/3"


@dataclass
class DiscoverySettings:
    mode: Mode = "refine"
    samples: int = 4  # N: independent samples (best_of_n, best_of_n_refine) or conversations (refine_chains)
    turns: int = 8  # model turns per refinement conversation (refine, refine_chains, best_of_n_refine)
    history_chars: int = 48_000  # characters of past turns sent back; older turns are dropped first
    parallel: int = 1  # requests in flight at once, for turns that do not depend on each other
    sampling: SamplingConfig = field(default_factory=lambda: SamplingConfig(temperature=0.8, max_tokens=32768, stop=()))
    system_prompt: str = ""  # none by default, as the handout's prompt stands alone
    task: dict[str, Any] = field(default_factory=dict)  # the environment's task: `prompt`, `program` (to start from)
    seed: int = 0
    budget_s: float = math.inf  # wall-clock seconds for the whole run, across resumes
    model: str = ""  # the name each request carries
    extra_body: dict[str, Any] = field(default_factory=dict)  # request fields passed through (logged with requests)
    price_in_per_mtok: float | None = None  # cost per million prompt tokens, when known
    price_out_per_mtok: float | None = None  # cost per million completion tokens (reasoning included)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name, low in (("samples", 1), ("turns", 1), ("history_chars", 0), ("parallel", 1)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")
        for name in ("price_in_per_mtok", "price_out_per_mtok"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def conversations(self) -> int:
        return 1 if self.mode in ("baseline", "refine", "search") else self.samples

    @property
    def turns_each(self) -> int:
        """The most turns one conversation takes."""
        return 1 if self.mode in ("baseline", "best_of_n") else self.turns

    @property
    def requests(self) -> int:
        """Model requests in a run that is not stopped early."""
        if self.mode == "search":
            return 0
        if self.mode == "best_of_n_refine":
            return self.samples + self.turns - 1
        return self.conversations * self.turns_each


@dataclass
class Turn:
    """One model turn of one conversation, as logged."""

    conversation: int
    turn: int  # 1-based within its conversation
    request: dict[str, Any]  # exactly what was sent: model, messages, sampling fields, extra fields
    trimmed_turns: int  # past turns left out of the request to keep it within history_chars
    elapsed_s: float  # when the turn was recorded, seconds since the run began (continued across resumes)
    generate_s: float
    answer: str | None = None  # the reply without reasoning (what the conversation keeps); None: no reply in time
    reasoning: str | None = None
    finish_reason: str | None = None
    tokens: dict[str, int | None] = field(default_factory=dict)  # prompt, completion, reasoning (when reported)
    cost_usd: float | None = None
    program: str | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    points: int = 0  # |C| when valid, else 0
    reward: float = 0.0  # the environment's reward for this turn
    feedback: str = ""  # the environment's answer: the next user message of this conversation
    verify_s: float | None = None


def calls_with_deadline(
    works: list[Callable[[], ChatReply]], timeout_s: float
) -> list[tuple[ChatReply | None, float, BaseException | None]]:
    """Each work() in a daemon thread of its own, all at once; for each, (its reply or None when it had not returned
    within `timeout_s`, the seconds it took, the error it raised). A thread still waiting is abandoned: a blocking
    HTTP read or a local generation cannot be interrupted, and the process exits without it."""
    boxes: list[dict[str, Any]] = [{} for _ in works]

    def target(work: Callable[[], ChatReply], box: dict[str, Any]) -> None:
        began = time.monotonic()
        try:
            box["reply"] = work()
        except BaseException as err:  # re-raised in the caller's thread
            box["error"] = err
        box["took_s"] = time.monotonic() - began

    workers = [threading.Thread(target=target, args=(w, b), daemon=True) for w, b in zip(works, boxes)]
    began = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        left = timeout_s - (time.monotonic() - began)
        worker.join(max(0.0, left) if math.isfinite(timeout_s) else None)
    waited = round(time.monotonic() - began, 3)
    return [(box.get("reply"), round(box.get("took_s", waited), 3), box.get("error")) for box in boxes]


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def trim_history(first: str, past: list[tuple[str, str]], max_chars: int) -> tuple[list[Message], int]:
    """The conversation's messages: the first user message, then as many of the latest (answer, feedback) pairs
    as fit in `max_chars` (the latest always); returns them and how many older pairs were left out."""
    kept: list[tuple[str, str]] = []
    used = len(first)
    for answer, feedback in reversed(past):
        size = len(answer) + len(feedback)
        if kept and used + size > max_chars:
            break
        kept.insert(0, (answer, feedback))
        used += size
    messages: list[Message] = [{"role": "user", "content": first}]
    for answer, feedback in kept:
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": feedback}]
    return messages, len(past) - len(kept)


class Discovery:
    """The run's conversations, its log and its files in `output_dir`. `run_info` (the script's settings) goes
    into the log as is; each construction (a start or a resume) opens a session, closed by `stop(reason)`."""

    def __init__(
        self,
        output_dir: Path,
        settings: DiscoverySettings,
        env_settings: KissingSettings,
        evaluate: Callable[[str], KissingMetrics] | None = None,
        run_info: dict[str, Any] | None = None,
    ) -> None:
        self.output_dir = output_dir
        output_dir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.run_info = run_info or {}
        env_settings = replace(env_settings, max_turns=settings.turns_each)
        self.envs = [KissingEnvironment(env_settings, evaluate) for _ in range(settings.conversations)]
        self.first: list[str | None] = [None] * settings.conversations
        self.turns: list[Turn] = []
        self.search: dict[str, Any] | None = None  # the search mode's result
        self.sessions: list[dict[str, Any]] = []
        self._started = time.monotonic()
        self._offset_s = 0.0
        log = output_dir / LOG_FILE
        if log.exists():
            self._load(log)
        self.sessions.append(
            {
                "started_at": utc_now(),
                "began_s": round(self._offset_s, 3),
                "ended_s": None,
                "budget_s": settings.budget_s if math.isfinite(settings.budget_s) else None,
                "stopped": None,
            }
        )

    def _load(self, log: Path) -> None:
        saved = json.loads(log.read_text(encoding="utf-8"))
        if not isinstance(saved, dict) or saved.get("format") != LOG_FORMAT:
            raise ValueError(f"{log} is not a {LOG_FORMAT} log (written by an older version?); start over")
        if len(saved["conversations"]) != self.settings.conversations:
            raise ValueError(
                f"{log} has {len(saved['conversations'])} conversations, these settings make a different number"
            )
        self.first = [c["first_message"] for c in saved["conversations"]]
        self.turns = [Turn(**row) for row in saved["turns"]]
        self.search = saved.get("search")
        self.sessions = saved["sessions"]
        for i, env in enumerate(self.envs):
            mine = self.of(i)
            env.restore(len(mine), max((t.points for t in mine), default=0))
        times = [t.elapsed_s for t in self.turns] + [s["ended_s"] or 0.0 for s in self.sessions]
        self._offset_s = max(times, default=0.0)

    # --- time, log, files -----------------------------------------------------------------------------

    def elapsed_s(self) -> float:
        return self._offset_s + time.monotonic() - self._started

    def remaining_s(self) -> float:
        """Seconds left of the run's budget (negative once it is spent)."""
        return self.settings.budget_s - self.elapsed_s()

    def of(self, conversation: int) -> list[Turn]:
        """The conversation's answered turns (a request abandoned at the budget's end is logged, and asked again
        after a resume)."""
        return [t for t in self.turns if t.conversation == conversation and t.answer is not None]

    def usage(self) -> dict[str, Any]:
        answered = [t for t in self.turns if t.answer is not None]
        costs = [t.cost_usd for t in answered if t.cost_usd is not None]
        return {
            "requests": len(self.turns),
            "answered": len(answered),
            "prompt_tokens": sum(t.tokens.get("prompt") or 0 for t in answered),
            "completion_tokens": sum(t.tokens.get("completion") or 0 for t in answered),
            "reasoning_tokens": sum(t.tokens.get("reasoning") or 0 for t in answered),
            "cost_usd": round(sum(costs), 6) if costs else None,
        }

    def log(self) -> dict[str, Any]:
        """conversation_log.json: everything a report, a resume or a reader needs."""
        s = self.settings
        return {
            "format": LOG_FORMAT,
            "dimension": DIMENSION,
            "mode": s.mode,
            "run": self.run_info,
            "sessions": self.sessions,
            "usage": self.usage(),
            "best": self.best_json(),
            "conversations": [
                {"id": i, "system_prompt": s.system_prompt or None, "first_message": first}
                for i, first in enumerate(self.first)
            ],
            "turns": [asdict(t) for t in self.turns],
            "search": self.search,
        }

    def save(self) -> None:
        atomic_write_json(self.output_dir / LOG_FILE, self.log())

    def stop(self, reason: str) -> str:
        """Close this session with the reason the run ended (kept in the log)."""
        self.sessions[-1].update(ended_s=round(self.elapsed_s(), 3), stopped=reason)
        self.save()
        return reason

    def best(self) -> tuple[int, str | None, str]:
        """(points, program, where it came from) of the best valid program of the run."""
        found = [
            (t.points, -i, t.program, f"conversation {t.conversation}, turn {t.turn}") for i, t in enumerate(self.turns)
        ]
        if self.search:
            found.append((self.search["points"], 1, self.search["program"], "the search code"))
        points, _, program, source = max(((p, o, g, w) for p, o, g, w in found if p > 0), default=(0, 0, None, ""))
        return points, program, source

    def best_json(self) -> dict[str, Any]:
        points, _, source = self.best()
        return {"points": points, "source": source or None}

    def _record(self, turn: Turn) -> None:
        previous = self.best()[0]
        self.turns.append(turn)
        if turn.points > previous and turn.program is not None:
            atomic_write_text(self.output_dir / BEST_PROGRAM, turn.program)
            atomic_write_json(self.output_dir / BEST_JSON, self.best_json() | {"verdict": turn.verdict})
        self.save()

    # --- the conversations ----------------------------------------------------------------------------

    def next_conversation(self) -> int | None:
        """Which conversation speaks next: the one with fewest turns (N samples first, chains in turns); in
        best_of_n_refine, after the N first turns, the conversation with the best program (earliest on ties)."""
        s = self.settings
        counts = [len(self.of(i)) for i in range(s.conversations)]
        if s.mode == "best_of_n_refine" and min(counts) >= 1:
            best = max(range(s.conversations), key=lambda i: (max(t.points for t in self.of(i)), -i))
            return best if counts[best] < s.turns_each else None
        open_ = [i for i in range(s.conversations) if counts[i] < s.turns_each]
        return min(open_, key=lambda i: (counts[i], i)) if open_ else None

    def next_batch(self) -> list[int]:
        """The conversations whose next turns go out together: the open ones at the lowest turn count (the N
        samples, a round of the chains), at most `parallel`; one where each turn needs the last (refine, and the
        refinement after best-of-N)."""
        first = self.next_conversation()
        if first is None:
            return []
        counts = [len(self.of(i)) for i in range(self.settings.conversations)]
        if self.settings.mode == "best_of_n_refine" and min(counts) >= 1:
            return [first]
        level = [i for i in range(self.settings.conversations) if counts[i] == counts[first]]
        return level[: self.settings.parallel]

    def messages(self, conversation: int) -> tuple[list[Message], int]:
        first = self.first[conversation]
        if first is None:
            first = self.first[conversation] = self.envs[conversation].reset(self.settings.task)
        past = [(t.answer or "", t.feedback) for t in self.of(conversation)]
        messages, trimmed = trim_history(first, past, self.settings.history_chars)
        if self.settings.system_prompt:
            messages.insert(0, {"role": "system", "content": self.settings.system_prompt})
        return messages, trimmed

    def cost(self, reply: ChatReply) -> float | None:
        s = self.settings
        if s.price_in_per_mtok is None and s.price_out_per_mtok is None:
            return None
        spent = reply.prompt_tokens * (s.price_in_per_mtok or 0) + reply.completion_tokens * (s.price_out_per_mtok or 0)
        return round(spent / 1e6, 8)

    def step(self, chat: ChatModel, conversations: list[int]) -> list[Turn]:
        """One turn of each of `conversations`: their requests at once (each with its own seed; replies awaited at
        most until the budget runs out), then the environment's verdicts, recorded in conversation order."""
        s = self.settings
        asks = []
        for k, conversation in enumerate(conversations):
            messages, trimmed = self.messages(conversation)
            sampling = replace(s.sampling, seed=s.seed + len(self.turns) + k)  # every request its own seed
            asks.append((conversation, messages, trimmed, sampling))
        works = [lambda m=messages, p=sampling: chat.chat(m, p) for _, messages, _, sampling in asks]
        replies = calls_with_deadline(works, self.remaining_s())
        turns = [self._answer(*ask, reply, took) for ask, (reply, took, error) in zip(asks, replies) if error is None]
        errors = [error for _, _, error in replies if error is not None]
        if errors:  # the answered turns are recorded first, so a resume asks only the failed ones again
            raise errors[0]
        return turns

    def _answer(
        self,
        conversation: int,
        messages: list[Message],
        trimmed: int,
        sampling: SamplingConfig,
        reply: ChatReply | None,
        generate_s: float,
    ) -> Turn:
        s = self.settings
        request = {
            "model": s.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": sampling.seed,
        } | s.extra_body
        number = len(self.of(conversation)) + 1
        if reply is None:
            turn = Turn(conversation, number, request, trimmed, round(self.elapsed_s(), 3), generate_s)
            self._record(turn)
            return turn
        began = time.monotonic()
        answer = self.envs[conversation].step(reply.text)
        turn = Turn(
            conversation,
            number,
            request,
            trimmed,
            round(self.elapsed_s(), 3),
            generate_s,
            answer=reply.text,
            reasoning=reply.reasoning,
            finish_reason=reply.finish_reason,
            tokens={
                "prompt": reply.prompt_tokens,
                "completion": reply.completion_tokens,
                "reasoning": reply.reasoning_tokens,
            },
            cost_usd=self.cost(reply),
            program=answer.info["program"],
            verdict=answer.info["verdict"],
            points=answer.info["points"],
            reward=answer.reward,
            feedback=answer.info["feedback"],
            verify_s=round(time.monotonic() - began, 3),
        )
        self._record(turn)
        return turn

    def run(self, chat: ChatModel | None) -> str:
        """Model turns until the mode's plan is done or the budget is spent; returns (and logs) why it stopped.
        `chat` may be None when no turn is due (all done, or no time)."""
        s = self.settings
        with tqdm(total=s.requests, initial=len(self.turns), desc=f"kissing {s.mode}") as bar:
            while batch := self.next_batch():
                if self.remaining_s() <= 0:
                    return self.stop(f"budget of {s.budget_s:g} s spent after {len(self.turns)} model turns")
                assert chat is not None, "a model turn is due: pass a chat model"
                latest = self.step(chat, batch)
                bar.update(len(latest))
                bar.set_postfix(best=self.best()[0], last=max(t.points for t in latest))
                late = [t for t in latest if t.answer is None]
                if late:
                    return self.stop(
                        f"budget of {s.budget_s:g} s ran out while waiting for {len(late)} model turn(s) "
                        "(their requests are logged without a reply)"
                    )
        return self.stop(f"all {len(self.turns)} model turns of {s.mode} done")

    def run_search(self, search: Callable[[float], tuple[str, str]], evaluate: Callable[[str], KissingMetrics]) -> str:
        """The search mode: `search(seconds)` gives (program, note) within the remaining budget; it is verified."""
        if self.search is None:
            began = time.monotonic()
            program, note = search(max(0.0, self.remaining_s()))
            generate_s = round(time.monotonic() - began, 3)
            metrics = evaluate(program)
            points = metrics.num_points if metrics.validity == 1.0 else 0
            previous = self.best()[0]
            self.search = {
                "program": program,
                "note": note,
                "points": points,
                "verdict": metrics.to_json(),
                "generate_s": generate_s,
                "elapsed_s": round(self.elapsed_s(), 3),
            }
            if points > previous:
                atomic_write_text(self.output_dir / BEST_PROGRAM, program)
                atomic_write_json(self.output_dir / BEST_JSON, self.best_json() | {"verdict": metrics.to_json()})
        return self.stop(f"search code done: {self.search['points']} points")
