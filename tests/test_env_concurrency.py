"""Environment calls at once with a deadline: the calls' order, concurrency (sync in threads, async on one loop), the
deadline abandoning a hung call, failed episodes flagged and their groups dropped from training, a service gone
stopping the step before any update, and the seconds spent in the environments."""

import asyncio
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from alignment.data.task import Task
from alignment.envs.base import EnvironmentUnavailable, EnvStep
from alignment.envs.calls import CallTimeout, EnvCalls
from alignment.envs.episode import intact_groups
from alignment.envs.runner import play_episodes, run_episodes, task_major
from alignment.grpo.config import validate
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.learner import GRPOLearner
from alignment.grpo_run import grpo_step
from alignment.rollout.interface import Rollout, SamplingConfig
from tests.test_envs import env_config, small_policy

ROOT = Path(__file__).resolve().parents[1]
FLAKY = "tests.test_env_concurrency:Flaky"  # the --env source of Flaky below

# --- the calls ---------------------------------------------------------------------------------------------------


def test_sync_calls_run_at_once_and_answer_in_call_order():
    barrier = threading.Barrier(4, timeout=10)  # passes only when all four calls wait at once

    def call(i: int) -> int:
        barrier.wait()
        return i * i

    with EnvCalls(30) as calls:
        assert calls([(call, (i,)) for i in range(4)]) == [0, 1, 4, 9]


def test_concurrency_one_calls_one_after_another():
    at_once, most = 0, 0
    lock = threading.Lock()

    def call(i: int) -> int:
        nonlocal at_once, most
        with lock:
            at_once += 1
            most = max(most, at_once)
        threading.Event().wait(0.01)
        with lock:
            at_once -= 1
        return i

    with EnvCalls(30, concurrency=1) as calls:
        assert calls([(call, (i,)) for i in range(5)]) == list(range(5))
    assert most == 1
    with EnvCalls(30, concurrency=0) as calls:
        calls([(call, (i,)) for i in range(5)])
    assert most > 1


def test_a_hung_call_is_abandoned_at_its_deadline_and_the_others_answer():
    release = threading.Event()

    def hang() -> str:
        release.wait(60)
        return "late"

    def fail() -> str:
        raise KeyError("no such state")

    with EnvCalls(0.2) as calls:
        results = calls([(str.upper, ("a",)), (hang, ()), (fail, ())])
    # the batch came back while the hung call still waits: nothing waited for its thread
    assert not release.is_set() and results[0] == "A"
    assert isinstance(results[1], CallTimeout) and isinstance(results[2], KeyError)
    release.set()


def test_the_process_ends_with_a_hung_call_still_blocked():
    """Nothing waits for an abandoned call's thread, not even the interpreter's exit."""
    code = (
        "import threading\n"
        "from alignment.envs.calls import EnvCalls\n"
        "with EnvCalls(0.2) as calls:\n"
        "    print(type(calls([(threading.Event().wait, ())])[0]).__name__)\n"  # waits forever
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == "CallTimeout", done.stderr


def test_async_calls_share_one_loop_run_at_once_and_a_late_one_is_cancelled():
    loops, cancelled = set(), []
    barrier = asyncio.Barrier(3)

    async def call(i: int) -> int:
        loops.add(id(asyncio.get_running_loop()))
        await asyncio.wait_for(barrier.wait(), 10)
        return i + 1

    async def late() -> int:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return 0

    with EnvCalls(0.5) as calls:
        assert calls([(call, (i,)) for i in range(3)]) == [1, 2, 3]
        result = calls([(late, ())])[0]
        assert isinstance(result, CallTimeout)
        assert calls([(call, (0,)), (call, (1,)), (call, (2,))]) == [1, 2, 3]  # the loop goes on serving
    assert len(loops) == 1
    for _ in range(100):  # the cancellation lands on the loop's thread
        if cancelled:
            break
        threading.Event().wait(0.01)
    assert cancelled == [True]


# --- episodes ----------------------------------------------------------------------------------------------------


class Repeater:
    """A trivial engine: at an even position of its call it samples "guess 7", at an odd one "guess 77"."""

    def __init__(self, tokenizer) -> None:
        self.replies = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in ("guess 7", "guess 77")]
        self.texts = [tokenizer.decode(ids) for ids in self.replies]

    def generate(self, prompts: Sequence[Sequence[int]], n: int, sampling: SamplingConfig) -> list[Rollout]:
        return [
            Rollout(i, self.texts[i % 2], list(self.replies[i % 2]), [-0.5] * len(self.replies[i % 2]), "stop")
            for i in range(len(prompts))
        ]

    def load_policy_weights(self, state_dict) -> None:
        pass


class Flaky:
    """Two turns; rows may ask it to raise or hang at a turn (the episode's whole environment, not the batch).
    Rewards differ by the action's length, so that a group's episodes have advantages to train on."""

    name, max_turns, stop = "flaky", 3, ()
    release = threading.Event()  # what a hung step waits for (set at each test's end)

    def reset(self, task: dict) -> str:
        self.task, self.turn = task, 0
        if task.get("fail") == "reset":
            raise RuntimeError("cannot start")
        return f"Row {task['id']}: guess."

    def step(self, action: str) -> EnvStep:
        self.turn += 1
        if self.task.get("fail") == "raise" and self.turn == 2:
            raise ConnectionResetError("tool crashed")
        if self.task.get("fail") == "hang" and self.turn == 1:
            self.release.wait(60)
        if self.task.get("fail") == "gone":
            raise EnvironmentUnavailable("the tool server at http://127.0.0.1:9 is gone")
        return EnvStep("again", float(len(action)), self.turn == 2)


@pytest.fixture(autouse=True)
def hung_steps_released():
    Flaky.release = threading.Event()
    yield
    Flaky.release.set()


def rows(*fails: str | None) -> list[dict]:
    return [{"id": i} | ({"fail": f} if f else {}) for i, f in enumerate(fails)]


def test_failed_episodes_end_flagged_and_the_others_are_as_without_them(tokenizer):
    sampling = SamplingConfig(max_tokens=8)
    clean = run_episodes(Repeater(tokenizer), tokenizer, Flaky, rows(None, None, None, None), 2, sampling, 256)
    mixed = run_episodes(
        Repeater(tokenizer), tokenizer, Flaky, rows(None, "raise", "hang", "reset"), 2, sampling, 256, 0.3
    )
    assert [e.stopped_by for e in mixed] == ["done"] * 2 + ["env_error"] * 2 + ["env_timeout"] * 2 + ["env_error"] * 2
    assert [e.prompt_index for e in mixed] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert mixed[2].info["env_error"] == "ConnectionResetError: tool crashed" and mixed[2].turns == 2
    assert mixed[4].info["env_error"].startswith("CallTimeout: no answer within 0.3 s") and mixed[4].turns == 1
    assert mixed[6].info["env_error"] == "RuntimeError: cannot start" and mixed[6].token_ids == []
    for a, b in zip(clean[:2], mixed[:2]):  # the intact group is exactly what it is in a run without failures
        assert (a.token_ids, a.turn_rewards, a.prompt_ids) == (b.token_ids, b.turn_rewards, b.prompt_ids)
    assert intact_groups(mixed, 2) == [True, False, False, False]


class Staggered:
    """Answers after a delay that shrinks with the row: with every call at once, the last episode answers first."""

    name, max_turns, stop = "staggered", 3, ()

    def reset(self, task: dict) -> str:
        self.id, self.turn = task["id"], 0
        return f"Row {self.id}."

    def step(self, action: str) -> EnvStep:
        threading.Event().wait(0.01 * (8 - self.id))
        self.turn += 1
        return EnvStep(
            f"Turn {self.turn} of row {self.id}.", float(len(action) + self.id), self.turn == 1 + self.id % 3
        )


def test_episodes_do_not_depend_on_which_environment_answered_first(tokenizer):
    tasks = [{"id": i} for i in range(8)]
    play = [
        run_episodes(Repeater(tokenizer), tokenizer, Staggered, tasks, 2, SamplingConfig(max_tokens=8), 256, 30, n)
        for n in (0, 1, 3)  # all at once (reversed finishing order), one after another, three at a time
    ]
    for episodes in play[1:]:
        assert [(e.token_ids, e.turn_rewards, e.stopped_by) for e in episodes] == [
            (e.token_ids, e.turn_rewards, e.stopped_by) for e in play[0]
        ]
    assert [e.turns for e in play[0]][::2] == [1, 2, 3, 1, 2, 3, 1, 2]


class ClosedAtItsEnd(Staggered):
    """Staggered, logging its row's id in `closed` when closed."""

    closed: list[int] = []

    def close(self) -> None:
        self.closed.append(self.id)


def test_each_group_is_handed_over_closed_as_soon_as_its_last_episode_ends(tokenizer):
    """Rows 0, 3, 6 end at turn 1, 1, 4, 7 at turn 2, 2, 5 at turn 3: their groups come in that order, each with its
    environments closed and no environment of a group still playing closed; together they are run_episodes's."""
    tasks, sampling = [{"id": i} for i in range(8)], SamplingConfig(max_tokens=8)
    ClosedAtItsEnd.closed = []
    handed = []
    for i, group in play_episodes(Repeater(tokenizer), tokenizer, ClosedAtItsEnd, tasks, 2, sampling, 256):
        handed.append((i, group))
        assert [e.prompt_index for e in group] == [i, i] and [e.turns for e in group] == [1 + i % 3] * 2
        assert all(e.stopped_by == "done" for e in group)
        # closed: the environments of every group ended by this one's last turn (those of one turn close together)
        assert sorted(ClosedAtItsEnd.closed) == [j for j in range(8) for _ in range(2) if j % 3 <= i % 3]
    assert [i for i, _ in handed] == [0, 3, 6, 1, 4, 7, 2, 5]
    together = run_episodes(Repeater(tokenizer), tokenizer, Staggered, tasks, 2, sampling, 256)
    assert [(e.token_ids, e.turn_rewards, e.prompt_index) for e in task_major(handed)] == [
        (e.token_ids, e.turn_rewards, e.prompt_index) for e in together
    ]


def test_the_deadline_and_concurrency_settings_are_checked(tmp_path):
    with pytest.raises(ValueError, match="--env-step-timeout-s must be > 0, got 0"):
        validate(env_config(tmp_path, env_step_timeout_s=0.0))
    with pytest.raises(ValueError, match="--env-concurrency must be >= 0"):
        validate(env_config(tmp_path, env_concurrency=-1))


def test_a_service_gone_stops_the_batch(tokenizer):
    with pytest.raises(EnvironmentUnavailable, match="http://127.0.0.1:9 is gone"):
        run_episodes(Repeater(tokenizer), tokenizer, Flaky, rows(None, "gone"), 2, SamplingConfig(max_tokens=8), 256)


@pytest.fixture
def flaky_env(monkeypatch):
    """FLAKY loads this very module (pytest imports it by its file's name), so that its Flaky is the one whose hung
    steps the test releases."""
    monkeypatch.setitem(sys.modules, FLAKY.split(":")[0], sys.modules[__name__])


def test_a_step_trains_on_intact_groups_only_and_logs_what_it_dropped(tokenizer, tmp_path, flaky_env):
    config = env_config(tmp_path, env=FLAKY, env_step_timeout_s=0.3, rollout_batch_size=8, train_batch_size=8)
    validate(config)
    task_rows = rows(None, "raise", None, "hang")
    train = Task([str(r) for r in task_rows], task_rows, "{question}", lambda r, t: {"reward": 0.0})
    policy, engine = small_policy(tokenizer), Repeater(tokenizer)
    sampler, learner = EpisodeSampler(config, engine, train, tokenizer), GRPOLearner(config, policy, tokenizer, train)
    assert type(sampler.make_env()) is Flaky  # --env FLAKY, loaded by its source
    sampler.order.take = lambda n: [0, 1, 2, 3][:n]  # this step's groups: rows 0..3 in order
    made = []
    make_batch = learner.make_batch
    learner.make_batch = lambda q, r, s: made.append((q, r)) or make_batch(q, r, s)
    before = [p.detach().clone() for p in policy.parameters()]
    step_rows = grpo_step(sampler, learner, engine)
    ((questions, episodes),) = made
    assert questions == [0, 2] and [e.prompt_index for e in episodes] == [0, 0, 1, 1]
    assert all(e.stopped_by == "done" for e in episodes)
    row = step_rows[0]
    assert row["train_env_groups_dropped"] == 2 and row["train_stopped_by_env_error"] == 0.25
    assert row["train_stopped_by_env_timeout"] == 0.25 and row["time_env_s"] >= 0.3  # it waited for the deadline
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))


def test_a_step_whose_every_group_failed_stops_before_the_update(tokenizer, tmp_path, flaky_env):
    config = replace(env_config(tmp_path, env=FLAKY), rollout_batch_size=2, train_batch_size=2)
    task_rows = rows("raise")
    train = Task(["x"], task_rows, "{question}", lambda r, t: {"reward": 0.0})
    policy = small_policy(tokenizer)
    sampler = EpisodeSampler(config, Repeater(tokenizer), train, tokenizer)
    learner = GRPOLearner(config, policy, tokenizer, train)
    with pytest.raises(EnvironmentUnavailable, match="every group of GRPO step 1 .* tool crashed"):
        grpo_step(sampler, learner, Repeater(tokenizer))
    assert learner.step == 0
