"""TextArena's single-player games as environments: `--env textarena:GAME-ID` (e.g. GuessTheNumber-v0).

Each row is a seed, and an episode is the game reset on it: the game's own prompt (with its board) is the first user
turn, and after each model turn the game's new messages (what the move did, the board) are the next one. The model's
turn is the game's action as written: the game parses it (most want `[move]` in brackets) and scores invalid moves
its own way (a warning and another try, then the game ends with its score). The episode's reward is the game's at
its end (1 for a win; games such as GuessTheNumber and FrozenLake give partial credit). max_turns is the game's turn
limit unless --env-max-turns sets it, in which case the game is told that limit too (its prompt says it). At the
limit the game ends itself with its own score rather than being cut unscored (TextArena 0.7.4 checks its limit
before counting the move, which would accept one move more: the adapter gives the game's state N - 1). An invalid
move's retry is a model turn the game does not count, so an episode with retries can still reach max_turns first
(reward 0). The game is the bare one, without TextArena's observation wrappers, whose running transcripts would
repeat what the chat already holds.

Nothing is downloaded: a game that needs data this machine lacks (NLTK's word lists for the word games) is refused
when loaded, naming the resource. TextArena seeds Python's global `random`; each game here draws from a generator
state of its own, so games played side by side stay reproducible and the run's own random state is untouched.
"""

import contextlib
import difflib
import random
import re
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

from alignment.envs.base import EnvStep
from alignment.envs.definition import EnvironmentDefinition

T = TypeVar("T")
_RESOURCE = re.compile(r"Resource (?:\x1b\[\d+m)?'?([\w./-]+?)'?(?:\x1b\[0m)? not found")  # NLTK colours it
_DATA_FOLDERS = ("corpora", "taggers", "tokenizers", "chunkers", "misc", "models", "sentiment", "stemmers")


class MissingData(LookupError):
    """Data a game needs and this machine does not have (no download is attempted)."""


def _find_nltk(resource: str) -> bool:
    import nltk

    for folder in ("", *(f"{f}/" for f in _DATA_FOLDERS)):
        for suffix in ("", ".zip"):
            try:
                nltk.data.find(f"{folder}{resource}{suffix}")
                return True
            except LookupError:
                continue
    return False


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """NLTK's downloader replaced, while games are made and reset, by a check that its data is already here."""
    try:
        import nltk
    except ImportError:
        yield
        return

    def refuse(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        if isinstance(info_or_id, str) and _find_nltk(info_or_id):
            return True
        raise MissingData(f"NLTK data {info_or_id!r}")

    download, nltk.download = nltk.download, refuse
    try:
        yield
    finally:
        nltk.download = download


def _missing(error: LookupError) -> str:
    """What a LookupError from a game's data loading says is missing."""
    if isinstance(error, MissingData):
        return str(error)
    found = _RESOURCE.search(str(error))
    return f"NLTK data {found.group(1)!r}" if found else str(error).strip().splitlines()[0]


def _bare_game(game_id: str, turns: int | None) -> Any:
    """The game `game_id` without TextArena's default wrappers, told its turn limit `turns` when it takes one."""
    import textarena

    try:
        game = textarena.make(game_id, **({} if turns is None else {"max_turns": turns}))
    except TypeError:  # a game whose constructor has no turn limit; its state's is set at reset
        game = textarena.make(game_id)
    while isinstance(game, textarena.Wrapper):
        game = game.env
    return game


class TextArenaGame:
    """One episode of a single-player TextArena game on a row's seed."""

    def __init__(self, game_id: str, max_turns: int, game_turns: int | None = None) -> None:
        """`max_turns`: the game's turn limit, or the run's (--env-max-turns), which `game_turns` then gives the
        game."""
        self.game_id, self.max_turns, self.name = game_id, max_turns, f"textarena:{game_id}"
        self.game_turns = game_turns
        self.game: Any = None
        self.own_limit: int | None = None  # the game's turn limit as the game set it
        self.random_state: Any = None

    def _in_own_random(self, call: Callable[[], T]) -> T:
        """`call()` drawing from this game's random state, the caller's restored after."""
        outer = random.getstate()
        if self.random_state is not None:
            random.setstate(self.random_state)
        try:
            with _offline():
                return call()
        finally:
            self.random_state = random.getstate()
            random.setstate(outer)

    def _news(self) -> str:
        """The game's messages since the last turn, the model's own action left out."""
        from textarena import ObservationType

        _, messages = self.game.get_observation()
        return "\n".join(m for _, m, kind in messages if kind != ObservationType.PLAYER_ACTION).strip()

    def reset(self, task: dict[str, Any]) -> str:
        if not isinstance(task.get("seed"), int):
            raise ValueError(f"a TextArena game's rows are seeds, {{'seed': int}}; got {task}")
        self.random_state = None
        self.game = self._in_own_random(lambda: _bare_game(self.game_id, self.game_turns))
        self._in_own_random(lambda: self.game.reset(num_players=1, seed=task["seed"]))
        # TextArena checks its limit before counting the move, so a limit of N accepts N + 1 moves: N - 1 makes the
        # N-th move, the last the game's prompt promises and the runner plays, end the game with the game's score
        self.own_limit = self.game.state.max_turns
        if self.max_turns:  # 0: a probe, which leaves the game as it is
            self.game.state.max_turns = self.max_turns - 1
        return self._news()

    def step(self, action: str) -> EnvStep:
        done, _ = self._in_own_random(lambda: self.game.step(action))
        if not done:
            return EnvStep(self._news(), 0.0, False)
        rewards, game_info = self.game.close()
        reward = float((rewards or {}).get(0, 0.0))
        info = (game_info or {}).get(0, {})
        return EnvStep(
            "",
            reward,
            True,
            {"won": float(reward >= 1.0), "invalid_move": float(bool(info.get("invalid_move")))},
        )


def textarena_version() -> str:
    from importlib.metadata import version

    return version("textarena")


def textarena_environment(game_id: str, settings: Any) -> EnvironmentDefinition:
    """`--env textarena:GAME-ID`: the game, checked by making and resetting it once; rows are seeds. A ValueError in
    one line for a game that is not there, not single-player, or needs data this machine lacks."""
    from textarena.envs.registration import ENV_REGISTRY

    flag = f"--env textarena:{game_id}"
    if game_id not in ENV_REGISTRY:
        near = difflib.get_close_matches(game_id, list(ENV_REGISTRY), n=3)
        hint = f" (did you mean {', '.join(near)}?)" if near else " (e.g. GuessTheNumber-v0, TowerOfHanoi-v0)"
        raise ValueError(f"{flag}: TextArena {textarena_version()} has no game {game_id!r}{hint}")
    probe = TextArenaGame(game_id, 0)
    try:
        probe.reset({"seed": 0})
    except LookupError as error:
        raise ValueError(f"{flag}: the game needs {_missing(error)}, which this machine does not have") from None
    except AssertionError:
        raise ValueError(f"{flag}: not a single-player game (only those are environments here)") from None
    except Exception as error:  # the library's own bugs (a game module that does not import): one line, not a trace
        raise ValueError(f"{flag}: the game fails to start: {type(error).__name__}: {error}") from None
    game_turns = getattr(settings, "env_max_turns", None)
    max_turns = game_turns or probe.own_limit
    if not max_turns:
        raise ValueError(f"{flag}: the game sets no turn limit; give --env-max-turns")
    return EnvironmentDefinition(partial(TextArenaGame, game_id, max_turns, game_turns))
