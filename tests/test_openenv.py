"""`--env openenv:URL`: episodes against a real openenv-core server (examples/openenv_guess_server.py, served by
uvicorn in a thread on 127.0.0.1), a GRPO run on a tiny random model against it, the server lost mid-run (the run
stops with one line, before any update) and a server back within the retries (the run goes on).

Importing openenv-core's server loads its web interface (gradio), 10-45 s on the loaded 2-core machine: the tests
that start a server are under -m slow and share one; the default suite checks the address, the fields and a server
that is not there."""

import asyncio
import functools
import importlib.util
import json
import random
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from alignment.envs.base import EnvironmentUnavailable
from alignment.envs.definition import EnvironmentDefinition
from alignment.envs.loading import environment_tasks
from alignment.envs.openenv import (
    VALIDATION_SEEDS,
    OpenEnvSession,
    Retries,
    Server,
    openenv_environment,
    parse_url,
    text_field,
)
from alignment.envs.runner import run_episodes
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.learner import GRPOLearner
from alignment.grpo_run import grpo_step, train_grpo
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig
from tests.test_env_concurrency import Repeater
from tests.test_envs import env_config, small_policy
from tests.test_grpo_loop import tiny_config

ROOT = Path(__file__).resolve().parents[1]
LOSES_THE_SERVER = "tests.test_openenv:loses_the_server"  # the --env source of loses_the_server below


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- no server needed --------------------------------------------------------------------------------------------


def test_the_address_and_the_text_fields():
    assert parse_url("http://127.0.0.1:8011/") == ("http://127.0.0.1:8011", {})
    assert parse_url("ws://h:1#action=code&observation=stdout") == (
        "ws://h:1",
        {"action": "code", "observation": "stdout"},
    )
    for bad, message in [("127.0.0.1:8011", "give the server's address"), ("http://h:1#act=x", "unknown choice act")]:
        with pytest.raises(ValueError, match=message):
            parse_url(bad)
    action = {"properties": {"metadata": {"type": "object"}, "guess": {"type": "string"}}}
    assert text_field(action, None, "action", "u") == "guess"  # the one string field, metadata aside
    two = {"properties": {"code": {"type": "string"}, "lang": {"type": "string"}, "n": {"type": "integer"}}}
    assert text_field(two, None, "action", "u") is None and text_field(two, "lang", "action", "u") == "lang"
    with pytest.raises(ValueError, match="the action has no field 'cmd'"):
        text_field(two, "cmd", "action", "u")


def test_the_retries_fit_in_half_the_deadline():
    for deadline in (0.5, 2.0, 60.0, 600.0):
        r = Retries.within(deadline)
        assert r.tries == 4 and sum(r.waits()) + r.tries * r.connect_timeout_s <= deadline / 2 + 1e-9
    assert Retries.within(60.0).waits() == [0.0, 0.5, 1.0, 2.0]


def test_no_server_is_one_error_naming_the_url_within_the_retries(tokenizer):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"--env openenv:{url}: no OpenEnv server answers at {url}/schema \(Connect"):
        openenv_environment(url, SimpleNamespace(env_step_timeout_s=2.0))
    session = OpenEnvSession(Server(url, url.replace("http", "ws") + "/ws", "guess", None), 4, Retries.within(2.0))
    with pytest.raises(EnvironmentUnavailable, match=rf"OpenEnv server {url} unreachable after 4 tries: Connection"):
        run_episodes(NeverCalled(), tokenizer, lambda: session, [{"seed": 1}], 1, SamplingConfig(), 64)
    assert time.monotonic() - start < 4  # two retry schedules of at most 1 s each, and no more


class NeverCalled:
    """An engine never called: the episodes end at their reset."""

    def generate(self, prompts, n, sampling):
        raise AssertionError("no episode got past its reset")


# --- a real server -----------------------------------------------------------------------------------------------


def guess_module():
    spec = importlib.util.spec_from_file_location("openenv_guess_server", ROOT / "examples" / "openenv_guess_server.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LiveServer:
    """The example server under uvicorn in a thread on 127.0.0.1:`port`; `stop()` takes it away (its connections
    closed), `start()` brings it back on the same port."""

    def __init__(self, app, port: int) -> None:
        self.app, self.port, self.url = app, port, f"http://127.0.0.1:{port}"

    def start(self) -> "LiveServer":
        import uvicorn

        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="error")
        config.timeout_graceful_shutdown = 1
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        for _ in range(600):  # 30 s at most
            if self.server.started or not self.thread.is_alive():
                break
            time.sleep(0.05)
        assert self.server.started, f"the test server did not start on port {self.port}"
        return self

    def stop(self) -> None:
        self.server.should_exit = self.server.force_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive()


def counted(environment: type) -> type:
    """`environment` counting its open instances (a session's, until the server closes it) in `.open`."""
    lock = threading.Lock()

    class Counted(environment):
        open = 0

        def __init__(self) -> None:
            super().__init__()
            with lock:
                Counted.open += 1

        def close(self) -> None:
            with lock:
                Counted.open -= 1

    return Counted


@pytest.fixture(scope="module")
def guess():
    module = guess_module()
    environment = counted(module.GuessEnvironment)
    app = module.create_app(environment, module.GuessAction, module.GuessObservation, max_concurrent_envs=16)
    server = LiveServer(app, free_port()).start()
    server.environment = environment
    yield server
    if server.thread.is_alive():
        server.stop()


@pytest.fixture
def live(guess):
    """The module's server, running at the test's start (a test may have stopped it)."""
    if not guess.thread.is_alive():
        guess.start()
    return guess


def target(seed: int) -> int:
    return random.Random(seed).randint(1, 10)  # the example server's rule


@pytest.mark.slow
def test_episodes_play_against_the_server(tokenizer, live):
    definition = openenv_environment(live.url, SimpleNamespace(env_step_timeout_s=30.0, env_max_turns=3))
    session = definition.make()
    assert (session.server.action_field, session.server.observation_field, session.max_turns) == ("guess", "prompt", 3)
    seeds = [s for s in range(40) if target(s) == 7][:1] + [s for s in range(40) if target(s) == 3][:1]
    episodes = run_episodes(
        Repeater(tokenizer),
        tokenizer,
        definition.make,
        [{"seed": s} for s in seeds],
        2,
        SamplingConfig(max_tokens=8),
        512,
    )
    assert live.environment.open == 0  # every session was closed on the server as the batch ended
    right, wrong = episodes[0], episodes[2]  # "guess 7" at even positions of each call
    assert tokenizer.decode(right.prompt_ids).count("I picked a whole number from 1 to 10") == 1
    assert right.stopped_by == "done" and right.turn_rewards == [1.0] and right.text == "guess 7"
    # target 3: "guess 7" is 4 away, "guess 77" is past 10 (0); the server says lower each time, the runner stops at 3
    assert wrong.stopped_by == "max_turns" and wrong.turn_rewards == pytest.approx(
        [0.5 * (1 - 4 / 9), 0.0, 0.5 * (1 - 4 / 9)]
    )
    assert wrong.text.count("user\nLower.") == 2
    train, validation = definition.rows(SimpleNamespace(n_train_prompts=3, n_eval_examples=2))
    assert train == [{"seed": 0}, {"seed": 1}, {"seed": 2}] and validation[0] == {"seed": VALIDATION_SEEDS}


@pytest.mark.slow
def test_a_grpo_run_trains_a_tiny_model_against_the_server(tiny_model_dir, tmp_path, live):
    config = tiny_config(
        tiny_model_dir,
        tmp_path,
        env="openenv:" + live.url,
        env_max_turns=2,
        env_max_tokens=256,
        n_train_prompts=8,
        n_eval_examples=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        env_step_timeout_s=30.0,
    )
    rows = train_grpo(config)
    assert len(rows) == 1 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    assert rows[0]["train_env_groups_dropped"] == 0 and rows[0]["time_env_s"] > 0
    assert rows[0]["train_stopped_by_env_error"] == 0 and rows[0]["train_turns_mean"] >= 1
    assert (config.output_dir / "policy" / "model.safetensors").is_file()


class Dies:
    """An engine over a policy that takes the server away at its `at`-th call (a turn after the first: every episode
    has a session open), optionally bringing it back `back_after` seconds later."""

    def __init__(self, engine, server: LiveServer, at: int, back_after: float | None = None) -> None:
        self.engine, self.server, self.at, self.back_after, self.calls = engine, server, at, back_after, 0

    def generate(self, prompts, n, sampling):
        self.calls += 1
        if self.calls == self.at:
            self.server.stop()
            if self.back_after is not None:
                threading.Timer(self.back_after, self.server.start).start()
        return self.engine.generate(prompts, n, sampling)

    def load_policy_weights(self, state_dict) -> None:
        self.engine.load_policy_weights(state_dict)


def openenv_parts(tokenizer, tmp_path, live, **overrides):
    config = env_config(tmp_path, env="openenv:" + live.url, env_max_turns=3, sampling_max_tokens=8, **overrides)
    task, _ = environment_tasks(config.env, replace(config, n_train_prompts=4, n_eval_examples=1))
    policy = small_policy(tokenizer)
    engine = HFRolloutEngine(policy, tokenizer, progress=False)
    return config, policy, engine, task


@pytest.mark.slow
def test_a_server_lost_mid_step_stops_it_before_the_update(tokenizer, tmp_path, live):
    config, policy, engine, task = openenv_parts(tokenizer, tmp_path, live, env_step_timeout_s=4.0)
    dying = Dies(engine, live, at=2)
    sampler, learner = EpisodeSampler(config, dying, task, tokenizer), GRPOLearner(config, policy, tokenizer, task)
    before = [p.detach().clone() for p in policy.parameters()]
    with pytest.raises(EnvironmentUnavailable, match=rf"^OpenEnv server {live.url} unreachable after 4 tries: "):
        grpo_step(sampler, learner, dying)
    assert dying.calls == 2 and learner.step == 0  # lost at the second turn; no update
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))


@pytest.mark.slow
def test_a_server_back_within_the_retries_lets_the_run_go_on(tokenizer, tmp_path, live):
    config, policy, engine, task = openenv_parts(tokenizer, tmp_path, live, env_step_timeout_s=30.0)
    sampler, learner = EpisodeSampler(config, engine, task, tokenizer), GRPOLearner(config, policy, tokenizer, task)
    grpo_step(sampler, learner, engine)
    first = live.server
    live.stop()  # gone between steps (the resets find no server); back 0.3 s later, within the retries' 0.5 + 1 + 2 s
    threading.Timer(0.3, live.start).start()
    rows = grpo_step(sampler, learner, engine)
    assert (
        live.server is not first
        and learner.step == 2
        and rows[0]["train_env_groups_dropped"] == 0
        and rows[0]["train_stopped_by_env_error"] == 0
    )


class LosesTheServer(OpenEnvSession):
    """A session that takes the test's server away at the first training episode's second step (`live`: the server,
    `lost`: whether it has; set by the test)."""

    live: LiveServer | None = None
    lost: list[bool] = []

    async def reset(self, task):
        self.seed, self.steps = task["seed"], 0
        return await super().reset(task)

    async def step(self, action):
        self.steps += 1
        if self.seed < VALIDATION_SEEDS and self.steps == 2 and not self.lost:
            self.lost.append(True)
            await asyncio.to_thread(self.live.stop)
        return await super().step(action)


def loses_the_server(settings) -> EnvironmentDefinition:
    """`--env openenv:URL` of the test's server, its sessions LosesTheServer."""
    definition = openenv_environment(LosesTheServer.live.url, settings)
    return replace(definition, make=functools.partial(LosesTheServer, *definition.make.args))


@pytest.mark.slow
def test_the_script_stops_with_one_line_when_the_server_is_lost_mid_run(tiny_model_dir, tmp_path, live, monkeypatch):
    import scripts.train_grpo as script

    # LOSES_THE_SERVER loads this very module (pytest imports it by its file's name): the class the test sets up
    monkeypatch.setitem(sys.modules, LOSES_THE_SERVER.split(":")[0], sys.modules[__name__])
    monkeypatch.setattr(LosesTheServer, "live", live)
    monkeypatch.setattr(LosesTheServer, "lost", [])
    output_dir = tmp_path / "run"
    flags = ["--model", str(tiny_model_dir), "--output-dir", str(output_dir), "--env", LOSES_THE_SERVER]
    flags += ["--n-grpo-steps", "2", "--rollout-batch-size", "4", "--group-size", "2", "--train-batch-size", "4"]
    flags += ["--gradient-accumulation-steps", "2", "--sampling-max-tokens", "6", "--n-eval-examples", "2"]
    flags += ["--n-train-prompts", "8", "--env-max-turns", "3", "--env-step-timeout-s", "4", "--grader-workers", "1"]
    flags += ["--backend", "hf", "--env-max-tokens", "256", "--sampling-min-tokens", "6"]
    result = CliRunner().invoke(script.app, flags)
    assert result.exit_code == 1 and LosesTheServer.lost, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[-1].startswith(f"stopped: OpenEnv server {live.url} unreachable after 4 tries: ")
    assert not any(line.startswith("Traceback") for line in lines)
    metrics = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in metrics if "eval_reward" in r] and not [
        r for r in metrics if "loss" in r
    ]  # validated, no update
