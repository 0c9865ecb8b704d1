"""Episodes against a running OpenEnv environment server (`--env openenv:URL`), one WebSocket session per episode.

openenv-core serves an environment (a class with `reset`, `step` and `state`) with `create_app` and uvicorn. Its
POST /reset and /step each play one call on a fresh instance, so a multi-turn episode plays over /ws, where a
connection is a session with an instance of its own: JSON messages {"type": "reset" | "step" | "close", "data": ...}
answered by {"type": "observation", "data": {"observation": {...}, "reward": r, "done": d}} or {"type": "error",
"data": {"message": ..., "code": ...}}. The adapter speaks that protocol with `websockets` rather than importing
openenv's client, whose package import loads its web interface (gradio: tens of seconds).

The mapping:
- the URL is the server's http(s):// (or ws://) address, optionally `#action=FIELD&observation=FIELD`;
- the model's turn becomes the action {FIELD: turn text}: FIELD the action's one string field (GET /schema), or
  `#action=FIELD` when it has several;
- the observation's text is its `#observation=FIELD`, else its one string field, else its JSON;
- reward (None: 0) and done are the server's; the runner caps the turns at --env-max-turns (default 8);
- a row's entries are `reset`'s keyword arguments (the server keeps those its environment's `reset` takes); the
  default rows are seeds, {"seed": i}.

A server that goes away: a reset tries a fresh connection `Retries.tries` times with doubling waits; a step whose
session is lost checks the same way whether the server is back. Not back: EnvironmentUnavailable, one line naming
the URL and the error, and the run stops before any update. Back: the session (the episode's state on the server)
is gone all the same, so the episode fails (its group is not trained) and the run goes on. Every wait is bounded:
the schedule fits in half the runner's per-call deadline, which cancels anything longer.
"""

import asyncio
import functools
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import websockets
from websockets.asyncio.client import ClientConnection

from alignment.envs.base import EnvironmentUnavailable, EnvStep
from alignment.envs.definition import EnvironmentDefinition

DEFAULT_MAX_TURNS = 8
VALIDATION_SEEDS = 1_000_000  # validation rows' seeds start here, apart from the training rows' 0, 1, ...
# what a lost or refused connection raises (TimeoutError: an open that timed out)
CONNECTION_ERRORS = (OSError, TimeoutError, websockets.exceptions.WebSocketException)


@dataclass(frozen=True)
class Retries:
    """How a lost server is tried again: `tries` connections, `first_wait_s` before the second, doubling after."""

    tries: int = 4
    first_wait_s: float = 0.5
    connect_timeout_s: float = 5.0

    @classmethod
    def within(cls, deadline_s: float, tries: int = 4) -> "Retries":
        """The default schedule, shrunk so that all its connections and waits take at most half of `deadline_s`."""
        waits = 2 ** (tries - 1) - 1  # the waits' sum in units of the first
        first_wait = min(cls.first_wait_s, deadline_s / 4 / waits)
        return cls(tries, first_wait, min(cls.connect_timeout_s, deadline_s / 4 / tries))

    def waits(self) -> list[float]:
        """Seconds to wait before each try (0 before the first)."""
        return [0.0] + [self.first_wait_s * 2**k for k in range(self.tries - 1)]


@dataclass(frozen=True)
class Server:
    """A server's address and how its actions and observations carry text."""

    url: str  # http(s)://host:port[/path], for messages and GET /schema
    ws_url: str  # its /ws endpoint
    action_field: str
    observation_field: str | None  # None: the observation's JSON


def parse_url(url: str) -> tuple[str, dict[str, str]]:
    """`url` without its fragment, and the fragment's `action=` / `observation=` choices."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(f"--env openenv:{url}: give the server's address, e.g. openenv:http://127.0.0.1:8011")
    choices = {k: v[-1] for k, v in parse_qs(parts.fragment).items()}
    unknown = sorted(set(choices) - {"action", "observation"})
    if unknown:
        raise ValueError(f"--env openenv:{url}: unknown choice {', '.join(unknown)} after '#' (action=, observation=)")
    base = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
    return base, choices


def text_field(schema: dict[str, Any], chosen: str | None, what: str, url: str) -> str | None:
    """The field of `schema` (a JSON schema) that carries text: `chosen`, else its one string field (metadata aside);
    None when it has no or several (for an observation: then its JSON is the text)."""
    properties = {k: v for k, v in schema.get("properties", {}).items() if k != "metadata"}
    if chosen is not None:
        if chosen not in properties:
            raise ValueError(
                f"--env openenv:{url}: the {what} has no field {chosen!r} (it has: {', '.join(properties)})"
            )
        return chosen
    strings = [k for k, v in properties.items() if v.get("type") == "string"]
    return strings[0] if len(strings) == 1 else None


def find_server(url: str, retries: Retries) -> Server:
    """The server at `url`, its action and observation fields read from GET /schema (a ValueError naming --env when
    no server answers after `retries`, or its action has no single text field)."""
    base, choices = parse_url(url)
    http = base.replace("ws://", "http://", 1).replace("wss://", "https://", 1)
    error: Exception | None = None
    for wait in retries.waits():
        time.sleep(wait)
        try:
            with httpx.Client(timeout=retries.connect_timeout_s) as client:
                schema = client.get(f"{http}/schema").raise_for_status().json()
            break
        except (httpx.HTTPError, ValueError) as err:  # unreachable, an error status, not JSON
            error = err
    else:
        raise ValueError(f"--env openenv:{url}: no OpenEnv server answers at {http}/schema ({describe(error)})")
    action = text_field(schema.get("action", {}), choices.get("action"), "action", url)
    if action is None:
        fields = ", ".join(k for k in schema.get("action", {}).get("properties", {}) if k != "metadata")
        raise ValueError(
            f"--env openenv:{url}: the action has no single text field ({fields}); name it: openenv:{base}#action=NAME"
        )
    observation = text_field(schema.get("observation", {}), choices.get("observation"), "observation", url)
    ws = base.replace("http://", "ws://", 1).replace("https://", "wss://", 1)
    return Server(base, f"{ws}/ws", action, observation)


def describe(error: BaseException | None) -> str:
    """An error in one line: its type and message."""
    return "no error" if error is None else f"{type(error).__name__}: {error}".splitlines()[0]


class OpenEnvSession:
    """An async Environment: one episode in a WebSocket session of its own on the server."""

    name = "openenv"

    def __init__(self, server: Server, max_turns: int, retries: Retries) -> None:
        self.server, self.max_turns, self.retries = server, max_turns, retries
        self._ws: ClientConnection | None = None

    async def reset(self, task: dict[str, Any]) -> str:
        """A fresh session reset with `task`'s entries, tried again on a fresh connection while the server is away."""
        error: BaseException | None = None
        for wait in self.retries.waits():
            await asyncio.sleep(wait)
            try:
                await self._connect()
                return self._text(await self._exchange("reset", dict(task)))
            except CONNECTION_ERRORS as err:
                error = err
                await self._drop()
        raise self._gone(error)

    async def step(self, action: str) -> EnvStep:
        try:
            data = await self._exchange("step", {self.server.action_field: action})
        except CONNECTION_ERRORS as err:
            await self._drop()
            await self._wait_for_server(err)
            raise ConnectionError(
                f"session lost ({describe(err)}); the server is back, the episode's state is not"
            ) from err
        return EnvStep(self._text(data), float(data.get("reward") or 0.0), bool(data.get("done")))

    async def close(self) -> None:
        """End the session on the server (it frees the server's slot for another episode)."""
        if self._ws is not None:
            try:
                await self._ws.send(json.dumps({"type": "close"}))
            except CONNECTION_ERRORS:
                pass  # gone already: nothing to free
            await self._drop()

    async def _connect(self) -> None:
        if self._ws is None:
            self._ws = await websockets.connect(
                self.server.ws_url, open_timeout=self.retries.connect_timeout_s, close_timeout=1, max_size=2**26
            )

    async def _drop(self) -> None:
        if self._ws is not None:
            ws, self._ws = self._ws, None
            try:
                await ws.close()
            except CONNECTION_ERRORS:
                pass

    async def _exchange(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        """Send one message, read its answer's data; an error answer raises RuntimeError with the server's message."""
        if self._ws is None:
            raise ConnectionError("no session: the episode was not reset")
        await self._ws.send(json.dumps({"type": kind, "data": data}))
        answer = json.loads(await self._ws.recv())
        if answer.get("type") == "error":
            error = answer.get("data", {})
            raise RuntimeError(f"the server refused the {kind}: {error.get('message')} ({error.get('code')})")
        return answer.get("data", {})

    async def _wait_for_server(self, error: BaseException) -> None:
        """Return once a connection opens again (closing it at once); EnvironmentUnavailable when none does."""
        for wait in self.retries.waits():
            await asyncio.sleep(wait)
            try:
                await self._connect()
                await self.close()
                return
            except CONNECTION_ERRORS as err:
                error = err
                await self._drop()
        raise self._gone(error)

    def _gone(self, error: BaseException | None) -> EnvironmentUnavailable:
        return EnvironmentUnavailable(
            f"OpenEnv server {self.server.url} unreachable after {self.retries.tries} tries: {describe(error)}"
        )

    def _text(self, data: dict[str, Any]) -> str:
        observation = data.get("observation", {})
        field = self.server.observation_field
        return str(observation.get(field, "")) if field else json.dumps(observation, sort_keys=True)


def seed_rows(settings: Any) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """--n-train-prompts training seeds 0, 1, ... and --n-eval-examples validation seeds from VALIDATION_SEEDS."""
    train = [{"seed": i} for i in range(getattr(settings, "n_train_prompts", 1024))]
    validation = [{"seed": VALIDATION_SEEDS + i} for i in range(getattr(settings, "n_eval_examples", 64))]
    return train, validation


def openenv_environment(url: str, settings: Any) -> EnvironmentDefinition:
    """`--env openenv:URL`: sessions on the server at `url` (checked now: a ValueError naming --env when none
    answers), seed rows, retries within --env-step-timeout-s and --env-max-turns turns (default 8)."""
    retries = Retries.within(getattr(settings, "env_step_timeout_s", 60.0))
    server = find_server(url, retries)
    max_turns = getattr(settings, "env_max_turns", None) or DEFAULT_MAX_TURNS
    return EnvironmentDefinition(make=functools.partial(OpenEnvSession, server, max_turns, retries), rows=seed_rows)
