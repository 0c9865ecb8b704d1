"""--strategy async with --env (alignment/ray/episode_stream.py): weights offered mid-episode are loaded between two
turns and each turn records the version and behaviour log-probs of the weights that sampled it; a group streams as
soon as its own episodes have ended while the rest of its unit plays on; the learner's off-policy correction divides
by each turn's own log-probs; a generator lost mid-unit keeps the groups it delivered and leaves the others, whole,
to the survivor; a group with an episode its environment failed is never trained, counted and replaced, and an
environment that fails every group stops the run in one line; a group handed out again is seeded by its place in
the rollout batch (the async loop on in-process generators and learner); on Ray, episodes stream to the learner
within the staleness bound, and a generator lost mid-episode leaves groups that are played again whole by the
survivor."""

import json
import math
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace

import pytest
import torch
from ray.exceptions import RayActorError
from transformers import AutoModelForCausalLM

from alignment.data.task import Task
from alignment.envs.base import EnvironmentUnavailable, EnvStep
from alignment.envs.episode import Episode
from alignment.envs.loading import scored_by_episodes
from alignment.envs.runner import play_episodes
from alignment.grpo.learner import GRPOLearner
from alignment.ray import async_driver
from alignment.ray.actors import Generator, Learner, Work
from alignment.ray.async_driver import AsyncLoop, Ticket, pick_batch, turn_versions
from alignment.ray.cluster import Actors
from alignment.ray.config import RayGRPOConfig, validate_ray
from alignment.ray.driver import train_grpo_ray
from alignment.ray.env import ray
from alignment.ray.episode_stream import EpisodeUnit, FinishedEpisodes, TurnEngine, stream_episodes
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.streaming import StreamFeed
from alignment.run.setup import PromptOrder
from tests.test_ray_cluster import three_nodes  # noqa: F401 (the module's three-node cluster)
from tests.test_ray_strategies import config_for, logged

SAMPLING = SamplingConfig(max_tokens=4, min_tokens=4, stop=(), seed=5)


class ThreeTurns:
    """Answers every turn with a fixed observation and ends after the third; `on_step(turn)` runs as each turn is
    answered (the test offers weights there, as the learner would while the episode is under way)."""

    name, max_turns, stop = "three_turns", 3, ()

    def __init__(self, on_step=lambda turn: None) -> None:
        self.turn, self.on_step = 0, on_step

    def reset(self, task):
        return task["question"]

    def step(self, action: str) -> EnvStep:
        self.turn += 1
        self.on_step(self.turn)
        return EnvStep("Go on.", float(len(action) % 2), self.turn == 3)


def perturbed(policy) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return {k: v + 0.5 * torch.randn_like(v) if v.is_floating_point() else v for k, v in policy.state_dict().items()}


def scored(policy, episode: Episode) -> torch.Tensor:
    """The policy's log-prob of each token of the episode after its prompt."""
    ids = torch.tensor([episode.prompt_ids + episode.token_ids])
    with torch.no_grad():
        log_probs = torch.log_softmax(policy(ids).logits[0, :-1].float(), -1)
    return log_probs.gather(-1, ids[0, 1:, None]).squeeze(-1)[len(episode.prompt_ids) - 1 :]


@pytest.mark.parametrize("between_turns", [True, False])
def test_weights_offered_mid_episode_load_between_turns_and_each_turn_keeps_its_version(
    tokenizer, tiny_model_dir, between_turns
):
    """Version 1 is offered while the first turn is answered: with partial rollouts turns 2 and 3 are sampled by it
    (their behaviour log-probs are version 1's, turn 1's version 0's); without, the whole unit stays on version 0
    and the next unit starts on version 1."""
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    old = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    new_weights = perturbed(policy)
    engine = HFRolloutEngine(policy, tokenizer, progress=False)
    feed = StreamFeed()
    turns = TurnEngine(engine, feed, lambda state_dict, version: engine.load_policy_weights(state_dict), between_turns)
    offer = lambda turn: feed.offer(new_weights, 1) if turn == 1 else None  # noqa: E731

    def play(questions, unit, places):
        rows = [{"question": q} for q in ("Hi", "What is 2 + 2?")]
        env = lambda: ThreeTurns(offer)  # noqa: E731
        for i, group in play_episodes(
            turns, tokenizer, env, [rows[q] for q in questions], 2, SAMPLING, 256, places=places
        ):
            yield i, group, [{"reward": e.reward} for e in group]

    feed.submit([EpisodeUnit((7, 8), (0, 1), 0, (0, 1)), EpisodeUnit((9,), (0,), 1, (0,))])
    stream = stream_episodes(feed, turns, play)
    first = [next(stream), next(stream)]
    assert [g.key for g in first] == [7, 8] and all(isinstance(g, FinishedEpisodes) for g in first)
    late = 1 if between_turns else 0
    for group in first:
        assert [e.prompt_index for e in group.episodes] == [0, 0] and len(group.scores) == 2
        for e in group.episodes:
            assert e.turns == 3 and len(e.versions) == sum(e.sampled_mask) == 12
            assert e.versions == [0] * 4 + [late] * 8 and turn_versions(e) == [0, late, late]
            sampled = torch.tensor(e.sampled_mask, dtype=torch.bool)
            behaviour = torch.tensor(e.logprobs)[sampled]
            expected = torch.cat([scored(old, e)[sampled][:4], scored(policy, e)[sampled][4:]])
            if not between_turns:  # loaded only once the unit ended: every turn was version 0's
                expected = scored(old, e)[sampled]
            assert torch.allclose(behaviour, expected, atol=1e-4)
    [after] = [next(stream)]
    assert all(e.versions == [1] * 12 for e in after.episodes)  # the next unit starts on the newest weights
    feed.stop()
    assert next(stream, None) is None


class EndsAtTurn:
    """Ends its episode at the turn its row names (row["turns"]), each step logged in `log` as (question, turn)."""

    name, max_turns, stop = "ends_at_turn", 3, ()

    def __init__(self, log: list | None = None) -> None:
        self.log = [] if log is None else log

    def reset(self, row):
        self.row, self.turn = row, 0
        return row["question"]

    def step(self, action: str) -> EnvStep:
        self.turn += 1
        self.log.append((self.row["question"], self.turn))
        return EnvStep("Go on.", float(len(action) % 2), self.turn == self.row["turns"])


SHORT_AND_LONG = [{"question": "Hi", "turns": 1}, {"question": "What is 2 + 2?", "turns": 3}]


class Recorded:
    """An engine passed through, the number of prompts of each call recorded."""

    def __init__(self, engine) -> None:
        self.engine, self.calls = engine, []

    def generate(self, prompts, n, sampling, positions=None):
        self.calls.append(len(prompts))
        return self.engine.generate(prompts, n, sampling, positions)

    def load_policy_weights(self, state_dict) -> None:
        self.engine.load_policy_weights(state_dict)


def test_a_group_streams_as_soon_as_its_episodes_end_while_the_unit_plays_on(tokenizer, tiny_model_dir):
    """One unit of a three-turn question and a one-turn one (listed second): the short group is yielded after the
    first turn, before any second turn is sampled or stepped; weights offered as it arrives (as a learner training on
    it would publish them) sample the long group's turns 2 and 3, its two episodes still stepped together; both
    groups whole, each turn with the version and behaviour log-probs of the weights that sampled it."""
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    old = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    new_weights = perturbed(policy)
    engine = Recorded(HFRolloutEngine(policy, tokenizer, progress=False))
    feed, log = StreamFeed(), []
    turns = TurnEngine(engine, feed, lambda state_dict, version: engine.load_policy_weights(state_dict), True)

    def play(questions, unit, places):
        rows = [SHORT_AND_LONG[q] for q in questions]
        for i, group in play_episodes(turns, tokenizer, lambda: EndsAtTurn(log), rows, 2, SAMPLING, 256, places=places):
            yield i, group, [{"reward": e.reward} for e in group]

    feed.submit([EpisodeUnit((7, 8), (1, 0), 0, (0, 1))])  # ticket 7 asks the long question, 8 the short one
    stream = stream_episodes(feed, turns, play)
    short = next(stream)
    assert short.key == 8 and engine.calls == [4] and turns.calls == 1  # no second turn sampled yet
    assert sorted(log) == [("Hi", 1)] * 2 + [("What is 2 + 2?", 1)] * 2  # nor stepped
    feed.offer(new_weights, 1)
    long = next(stream)
    assert long.key == 7 and engine.calls == [4, 2, 2]  # the long group's two episodes, together on each turn
    assert sorted(log) == [("Hi", 1)] * 2 + [("What is 2 + 2?", t) for t in (1, 1, 2, 2, 3, 3)]
    for group, n_turns in ((short, 1), (long, 3)):
        assert len(group.episodes) == len(group.scores) == 2
        for e in group.episodes:
            assert e.prompt_index == 0 and e.turns == n_turns and e.stopped_by == "done"
            assert len(e.versions) == sum(e.sampled_mask) == 4 * n_turns
            assert turn_versions(e) == [0, 1, 1][:n_turns] and e.versions == [0] * 4 + [1] * 4 * (n_turns - 1)
            sampled = torch.tensor(e.sampled_mask, dtype=torch.bool)
            expected = torch.cat([scored(old, e)[sampled][:4], scored(policy, e)[sampled][4:]])
            assert torch.allclose(torch.tensor(e.logprobs)[sampled], expected, atol=1e-4)
    feed.stop()
    assert next(stream, None) is None


@pytest.mark.parametrize(
    "correction,cap,weight_mean,masked",
    [("token_tis", None, 0.75, 0.0), ("token_mask", 1.5, 0.5, 0.5)],
)
def test_the_learner_weighs_each_turn_by_its_own_behaviour_log_probs(
    tokenizer, tiny_model_dir, tmp_path, correction, cap, weight_mean, masked
):
    """An episode whose first turn was sampled at version 0 and second at version 1, trained by the learner at
    version 1 under the decoupled objective: each token's weight is exp(proximal - behaviour) with its own turn's
    behaviour log-probs: 1/2 on turn 1's (set to the proximal log-prob + log 2), 1 on turn 2's (the learner's own
    version: behaviour = proximal). Uncapped TIS averages 0.75 over the sampled tokens; a mask bounded by 1.5 drops
    turn 1's tokens and keeps turn 2's. Observation tokens are in neither."""
    config = RayGRPOConfig(
        model=str(tiny_model_dir),
        strategy="async",
        rollout_batch_size=2,
        group_size=2,
        train_batch_size=2,
        gradient_accumulation_steps=1,
        rollout_correction=correction,
        tis_cap=cap,
        output_dir=tmp_path,
    )
    validate_ray(config)
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    task = Task(["Hi"], [""], "{question}", lambda response, truth: {"reward": 0.0})
    learner = GRPOLearner(config.learner_config(), policy, tokenizer, task, objective=config.learner_objective())
    prompt = tokenizer("Q: Hi\nA:")["input_ids"]
    turn1, observation, turn2 = [306, 1032, 42], [198, 77], [512, 88, 19]
    episodes = [
        Episode(
            0,
            "",
            turn1 + observation + turn2,
            [0.0] * 8,
            "stop",
            versions=[0, 0, 0, 1, 1, 1],
            prompt_ids=prompt,
            sampled_mask=[1, 1, 1, 0, 0, 1, 1, 1],
            reward=reward,
            turn_starts=[0, 5],
        )
        for reward in (0.0, 1.0)
    ]
    scores = [{"reward": e.reward} for e in episodes]
    proximal = learner.old_log_probs(learner.make_batch([0], episodes, scores))  # version 1's, before the update
    start = len(prompt) - 1  # where the response's labels begin
    for row, e in enumerate(episodes):
        p = proximal[row, start : start + 8].tolist()
        e.logprobs = [x + math.log(2) for x in p[:3]] + [0.0, 0.0] + p[5:]
    batch = learner.make_batch([0], episodes, scores)
    for row, e in enumerate(episodes):  # the behaviour log-probs the learner holds are each turn's, in place
        assert batch.rollout_log_probs[row, start : start + 8].tolist() == pytest.approx(e.logprobs)
        assert batch.response_mask[row, start : start + 8].tolist() == [bool(m) for m in e.sampled_mask]
    [row] = learner.update(batch)
    assert row["tis_weight_mean"] == pytest.approx(weight_mean, abs=1e-5)
    assert row["rollout_masked_fraction"] == pytest.approx(masked, abs=1e-6)


def test_async_with_an_environment_is_accepted_and_its_kv_setting_refused():
    base = RayGRPOConfig(
        strategy="async",
        env="kissing",
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
    )
    validate_ray(base)
    with pytest.raises(ValueError, match="--inflight-kv keep with --env: weights load between two turns"):
        validate_ray(replace(base, inflight_kv="keep"))


def test_a_checkpointed_group_of_episodes_comes_back_as_episodes():
    e = Episode(0, "a", [1, 2, 3], [-1.0, 0.0, -2.0], "stop", [4, 5], [9], [1, 0, 1], 1.0, [0.0, 1.0], [0, 2])
    back = Ticket.from_record(json.loads(json.dumps(Ticket(3, 1, 4, None, [e], [{"reward": 1.0}]).record())))
    assert back.rollouts == [e] and back.start == 4 and turn_versions(back.rollouts[0]) == [4, 5]


class InProcess:
    """A Generator run in this process behind the calls the async loop makes on an actor handle
    (`handle.method.options(...).remote(...)`): each call runs the method at once and returns what it returns."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator

    def __getattr__(self, method: str):
        call = getattr(self.generator, method)

        class Method:
            def options(self, **_):
                return self

            def remote(self, *args):
                return call(*args)

        return Method()


class Dropping:
    """The supervisor of a run without restarts: a lost generator is dropped, the groups handed out again noted."""

    restarts = 0

    def __init__(self, actors: Actors) -> None:
        self.actors, self.reissued = actors, []

    def recover(self, err, waited_on, doing, reissued=(), can_drop=False) -> list[str]:
        assert can_drop
        for name in waited_on:
            del self.actors.generators[name]
        self.reissued.append(list(reissued))
        return []


class RunLog:
    """The metrics rows and rollout records a run logs."""

    def __init__(self) -> None:
        self.rows, self.rollouts = [], []

    def log(self, row: dict) -> None:
        self.rows.append(row)

    def log_rollouts(self, step: int, kind: str, records: list[dict]) -> None:
        self.rollouts += [{"grpo_step": step, "kind": kind} | record for record in records]


class InProcessSync:
    """WeightSync.offer in this process: the learner's weights offered to every generator."""

    def __init__(self, learner: Learner, generators: list[Generator]) -> None:
        self.learner, self.generators = learner, generators

    def offer(self, version: int) -> None:
        weights = self.learner.weights(True)
        for generator in self.generators:
            generator.offer_weights(weights, version)


@dataclass
class InProcessDriver:
    """What the async loop reads of the Driver, its actors being in-process generators (`get` has nothing to wait
    for) and, when given, an in-process learner."""

    config: RayGRPOConfig
    actors: Actors
    n_questions: int
    supervisor: Dropping
    step: int = 0
    doing: str = ""
    sync: InProcessSync | None = None
    log: RunLog = field(default_factory=RunLog)

    def get(self, refs, doing: str):
        return refs

    def commit(self, rows: list[dict]) -> list[dict]:
        for row in rows:
            self.log.log(row)
        self.step = rows[0]["grpo_step"]
        return rows

    def elapsed(self) -> float:
        return 1.0


def lost_mid_unit():
    """The stream of a generator whose process died: its next item raises."""
    raise RayActorError()
    yield


def async_env_config(tiny_model_dir, tmp_path, env: str, **overrides) -> RayGRPOConfig:
    """An async run on one of this module's environments, played in process: 4 tokens a turn, 256 an episode."""
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="async",
        env=f"tests.test_ray_async_env:{env}",
        env_max_tokens=256,
        sampling_max_tokens=4,
        sampling_min_tokens=4,
        **overrides,
    )
    validate_ray(config)
    return config


def test_a_generator_lost_mid_unit_keeps_its_delivered_groups_and_leaves_the_others_whole(
    tokenizer, tiny_model_dir, tmp_path, monkeypatch
):
    """The async loop hands one unit (a one-turn and a three-turn question) to Generator 0, which streams the short
    group after its first turn and is lost inside the long one: the short group stays delivered (never handed out
    again), only the long one is (the dropped event's groups_reissued), whole, to Generator 1, which plays it from
    its first turn; each ticket is then trained once, in one batch."""
    monkeypatch.setitem(sys.modules, "tests.test_ray_async_env", sys.modules[__name__])
    config = async_env_config(tiny_model_dir, tmp_path, "EndsAtTurn", n_grpo_steps=1, max_staleness=0, generators=2)
    rows = [dict(row) for row in SHORT_AND_LONG]
    task = Task([r["question"] for r in rows], rows, "{question}", scored_by_episodes)
    generators = {
        name: InProcess(Generator(config, task, task, "cpu", 1, name)) for name in ("Generator 0", "Generator 1")
    }
    actors = Actors(None, None, None, 0.0, generators=dict(generators))
    driver = InProcessDriver(config, actors, len(rows), Dropping(actors))
    loop = AsyncLoop(driver, None)
    loop.start()
    loop.admit()  # the rollout batch's two tickets, to the least loaded generator
    assert loop.assigned == {"Generator 0": {0, 1}, "Generator 1": set()}
    short, long = sorted(loop.tickets, key=lambda number: rows[loop.question(number)]["turns"])
    assert loop.received("Generator 0") == "graded"
    assert loop.tickets[short].rollouts is not None and loop.assigned["Generator 0"] == {long}
    assert generators["Generator 0"].generator.turns.calls == 1  # inside the unit: the long group's turn 2 unsampled
    loop.streams["Generator 0"] = lost_mid_unit()
    assert loop.received("Generator 0") == "restarted"
    assert driver.supervisor.reissued == [[long]] and list(loop.redo) == [long]
    assert "Generator 0" not in loop.streams and sorted(loop.tickets) == [short]  # delivered: kept, not redone
    loop.admit()
    assert loop.assigned == {"Generator 1": {long}} and not loop.redo
    assert loop.received("Generator 1") == "graded"
    for number, n_turns in ((short, 1), (long, 3)):
        ticket = loop.tickets[number]
        assert len(ticket.rollouts) == len(ticket.scores) == config.group_size and ticket.generator is None
        assert [(e.turns, e.stopped_by) for e in ticket.rollouts] == [(n_turns, "done")] * config.group_size
        assert all(turn_versions(e) == [0] * n_turns for e in ticket.rollouts) and ticket.start == 0
    assert sorted(t.number for t in pick_batch(loop.tickets.values(), 0, 2, 0)) == [0, 1]
    for handle in generators.values():
        handle.generator.stop_stream()


class FailsOn:
    """One-turn episodes whose step raises as the row's "fail" says: "one" (one episode of each group of two: every
    other step of the question, whichever of the two steps first), "all", or None (never)."""

    name, max_turns, stop = "fails_on", 1, ()
    lock, steps = threading.Lock(), Counter()

    def reset(self, row):
        self.row = row
        return row["question"]

    def step(self, action: str) -> EnvStep:
        question, fail = self.row["question"], self.row["fail"]
        with FailsOn.lock:
            FailsOn.steps[question] += 1
            odd = FailsOn.steps[question] % 2 == 1
        if fail == "all" or (fail == "one" and odd):
            raise RuntimeError(f"tool crashed on {question!r}")
        return EnvStep("", float(len(action) % 2), True)


def in_process_run(tiny_model_dir, tmp_path, rows, monkeypatch, **overrides):
    """The async loop over an in-process generator and learner on FailsOn's `rows` (two groups of two per update,
    --max-staleness 0), Ray's wait answered by whatever is ready in this process: the learner's update once under
    way, else the stream of a generator with work."""
    monkeypatch.setitem(sys.modules, "tests.test_ray_async_env", sys.modules[__name__])
    FailsOn.steps.clear()
    config = async_env_config(tiny_model_dir, tmp_path, "FailsOn", n_grpo_steps=2, max_staleness=0, **overrides)
    task = Task([r["question"] for r in rows], rows, "{question}", scored_by_episodes)
    generator = Generator(config, task, task, "cpu", 1, "Generator 0")
    learner = Learner(config, task, "cpu", 1)
    actors = Actors(None, InProcess(learner), None, 0.0, generators={"Generator 0": InProcess(generator)})
    driver = InProcessDriver(config, actors, len(rows), Dropping(actors), sync=InProcessSync(learner, [generator]))
    loop = AsyncLoop(driver, None)

    def wait(waitables, num_returns, timeout):
        if loop.learning is not None:
            return [loop.learning.ref], []
        return [next(loop.streams[name] for name in loop.streams if loop.assigned[name])], []

    monkeypatch.setattr(async_driver.ray, "wait", wait)
    return config, loop, driver


def test_a_group_with_an_episode_its_environment_failed_is_never_trained_and_is_replaced(
    tokenizer, tiny_model_dir, tmp_path, monkeypatch
):
    """The first ticket's question fails one of its two episodes: that group streams, is dropped whole (never in a
    trained batch), counted in train_env_groups_dropped of the first update, and replaced by the next ticket of the
    prompt order, so both updates train two groups: tickets 1, 2 and 3, 4, none asking the failing question."""
    rows = [{"question": f"Question {i}?", "fail": None} for i in range(6)]
    failing = PromptOrder(len(rows), 3).take(1)[0]  # ticket 0's question in a run of seed 3
    rows[failing]["fail"] = "one"
    config, loop, driver = in_process_run(tiny_model_dir, tmp_path, rows, monkeypatch, seed=3)
    assert loop.question(0) == failing
    updates = [loop.next_step() for _ in range(config.n_grpo_steps)]
    loop.drain()
    assert loop.env_dropped == {0} and loop.next_ticket == loop.total == 5 and not loop.tickets
    assert [row["train_env_groups_dropped"] for rows in updates for row in rows] == [1, 0]
    assert [row["grpo_step"] for rows in updates for row in rows] == [1, 2] and driver.step == 2
    trained = [r for r in driver.log.rollouts if r["kind"] == "trained"]
    assert [(r["grpo_step"], r["ticket"]) for r in trained] == [(1, 1), (1, 2), (2, 3), (2, 4)]
    assert failing not in {r["question"] for r in trained}
    assert all(r["stopped_by"] == ["done", "done"] for r in trained)
    assert FailsOn.steps[rows[failing]["question"]] == 2  # played once, one of its two episodes failed
    assert loop.state_dict()["env_dropped"] == [0]


def test_an_environment_failing_every_group_stops_the_run_in_one_line(tokenizer, tiny_model_dir, tmp_path, monkeypatch):
    """Every episode's step raises: as many groups dropped in a row as a rollout batch holds (two) stop the run
    before any update, one line naming --env and the environment's error."""
    rows = [{"question": f"Question {i}?", "fail": "all"} for i in range(4)]
    config, loop, driver = in_process_run(tiny_model_dir, tmp_path, rows, monkeypatch)
    with pytest.raises(EnvironmentUnavailable) as stopped:
        loop.next_step()
    message = str(stopped.value)
    assert message.startswith("--env tests.test_ray_async_env:FailsOn: the last 2 groups") and "\n" not in message
    assert message.endswith("RuntimeError: tool crashed on " + repr(rows[loop.question(1)]["question"]))
    assert loop.env_dropped == {0, 1} and driver.step == 0 and loop.learning is None and not driver.log.rows


def played(generator: Generator, stream, work: Work) -> dict[int, list[list[int]]]:
    """Each ticket of `work` (one rollout batch's) played by the generator: its episodes' tokens."""
    generator.submit([work])
    groups = [next(stream) for _ in work.tickets]
    return {g.ticket: [e.token_ids for e in g.rollouts] for g in groups}


@pytest.mark.parametrize("one_row_per_batch", [True, False])
def test_a_reissued_group_samples_by_its_place_in_the_rollout_batch(
    tokenizer, tiny_model_dir, tmp_path, monkeypatch, one_row_per_batch
):
    """Tickets 0 and 1 of rollout batch 0 ask the same three-turn question; ticket 1 handed out again alone is
    seeded by its place in the batch, not by its position in the engine's call: on an engine that seeds each
    episode on its own (hf with one row per batch, as vLLM seeds each request) it samples exactly what it sampled
    in the whole batch; on hf's default batching (a batch's rows take their keys in turn from its first prompt's
    seed) numbers of its own. Either way never ticket 0's (which it drew before: the same position in the call)."""
    monkeypatch.setitem(sys.modules, "tests.test_ray_async_env", sys.modules[__name__])
    config = async_env_config(tiny_model_dir, tmp_path, "EndsAtTurn")
    rows = [dict(SHORT_AND_LONG[1])]
    task = Task([r["question"] for r in rows], rows, "{question}", scored_by_episodes)
    generator = Generator(config, task, task, "cpu", 1)
    if one_row_per_batch:
        generator.engine.memory_budget_bytes = 1  # below one row's need: each episode is a batch of its own
    stream = generator.stream()
    whole = played(generator, stream, Work(0, (0, 1), (0, 0), 0))
    again = played(generator, stream, Work(0, (1,), (0,), 0))
    generator.stop_stream()
    assert whole[0] != whole[1] and all(len(tokens) > 8 for tokens in whole[1])  # two draws; three turns each
    assert again[1] != whole[0]
    if one_row_per_batch:
        assert again[1] == whole[1]


def trained(config) -> list[dict]:
    rows = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    return [row for row in rows if row["kind"] == "trained"]


KISSING = dict(env="kissing", env_max_turns=3, env_max_tokens=400, sampling_max_tokens=4, sampling_min_tokens=4)


def check_episodes(config, rows) -> list[dict]:
    """Every update within the bound; every trained group whole, each episode ended by its environment, every turn's
    version at most --max-staleness behind the update that trained it."""
    updates = [row for row in rows if "loss" in row]
    assert [row["grpo_step"] for row in updates] == list(range(1, config.n_grpo_steps + 1))
    for row in updates:
        assert row["tokens_checksum_trained"] == row["tokens_checksum_sent"]
        assert 0 <= row["staleness_max"] <= config.max_staleness
    groups = trained(config)
    assert sorted(g["ticket"] for g in groups) == list(range(config.n_grpo_steps * config.n_prompts_per_rollout_batch))
    for g in groups:
        assert g["samples"] == config.group_size and g["turns"] == [3] * config.group_size  # whole and complete
        assert g["stopped_by"] == ["done"] * config.group_size
        for versions in g["turn_versions"]:
            assert len(versions) == 3 and versions == sorted(versions)
            assert g["grpo_step"] - 1 - versions[0] <= config.max_staleness
    return groups


@pytest.mark.slow  # about a minute of actors starting; the episode stream and the correction are tested above
def test_async_streams_episodes_to_the_learner(cluster, tiny_model_dir, tmp_path):
    """One node, two updates of the kissing environment's three-turn episodes (the tiny model writes no program,
    so each episode takes all three turns), validation playing episodes too."""
    config = config_for(
        tiny_model_dir, tmp_path, strategy="async", n_grpo_steps=2, max_staleness=1, eval_every=2, **KISSING
    )
    train_grpo_ray(config)
    rows = logged(config)
    check_episodes(config, rows)
    assert [row["grpo_step"] for row in rows if "eval_reward" in row] == [0, 2]


@pytest.mark.slow  # a minute or more on 2 loaded cores
def test_an_update_forced_mid_episode_trains_episodes_of_two_versions(cluster, tiny_model_dir, tmp_path):
    """From update 1 on, the generator's engine holds each unit's second turn until new weights are offered (at
    most 20 s): the third turn then loads them, so the episodes trained carry two versions, each turn within the
    bound, and the learner's rows say so (version_span_max, partial_fraction)."""
    config = config_for(
        tiny_model_dir, tmp_path, strategy="async", n_grpo_steps=4, max_staleness=1, eval_every=100, **KISSING
    )

    def hold_second_turns(generator):  # runs in the generator's process (shipped by value)
        import time

        inner, feed = generator.turns.engine, generator.feed

        class Holding:
            model = getattr(inner, "model", None)

            def generate(self, prompts, n, sampling, positions=None):
                if generator.turns.calls == 2:  # the second turn: sampled on the unit's weights, then wait
                    deadline = time.monotonic() + 20
                    while not feed.has_weights() and time.monotonic() < deadline:
                        time.sleep(0.05)
                return inner.generate(prompts, n, sampling, positions)

            def load_policy_weights(self, state_dict):
                inner.load_policy_weights(state_dict)

        generator.turns.engine = Holding()

    def install(step, actors):
        if step == 1:
            ray.get(actors.generator.__ray_call__.options(concurrency_group="control").remote(hold_second_turns))

    train_grpo_ray(config, on_step=install)
    rows = logged(config)
    groups = check_episodes(config, rows)
    spanning = [v for g in groups for v in g["turn_versions"] if len(set(v)) > 1]
    assert spanning and all(v[2] == v[0] + 1 for v in spanning)  # turns 1, 2 on one version, turn 3 on the next
    updates = [row for row in rows if "loss" in row]
    assert max(row["version_span_max"] for row in updates) == 1 and max(row["partial_fraction"] for row in updates) > 0


@pytest.mark.slow  # several minutes on 2 loaded cores: three raylets, two generators
def test_a_generator_lost_mid_episode_on_three_nodes_leaves_its_groups_to_the_survivor(
    three_nodes,  # noqa: F811 (the fixture imported above)
    tiny_model_dir,
    tmp_path,
):
    """Two generators on the worker nodes, no restarts allowed. After update 1, as soon as the first generator is
    inside a unit's episodes (a turn sampled, the unit not yet streamed), it is killed: the run finishes on the
    survivor, the lost unit's groups are handed out again whole (the `dropped` event lists them), and every group
    trained is whole with every episode ended by its environment."""
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="async",
        generators=2,
        max_staleness=1,
        n_grpo_steps=3,
        eval_every=100,
        ray_address=three_nodes.address,
        **KISSING,
    )
    killed: dict[str, int] = {}

    def kill_mid_episode(first) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            control = first.__ray_call__.options(concurrency_group="control")
            calls = ray.get(control.remote(lambda generator: generator.turns.calls), timeout=60)
            if calls >= 1:  # inside a unit's episodes
                killed["calls"] = calls
                ray.kill(first)
                return
            time.sleep(0.02)

    threads = []

    def start_killer(step, actors):
        if step == 1:
            threads.append(threading.Thread(target=kill_mid_episode, args=(actors.generators["Generator 0"],)))
            threads[0].start()

    train_grpo_ray(config, on_step=start_killer)
    threads[0].join()
    assert killed["calls"] >= 1
    rows = logged(config)
    check_episodes(config, rows)
    from alignment.ray.run_events import RunEvents

    [dropped] = [e for e in RunEvents(config.output_dir).read() if e["event"] == "dropped"]
    assert dropped["actors"] == ["Generator 0"] and dropped["generators_left"] == ["Generator 1"]
    assert dropped["groups_reissued"]  # it was inside episodes: unfinished groups, played again whole
