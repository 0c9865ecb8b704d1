"""GRPO on a Ray cluster of three nodes on one machine (a head and two worker nodes, each its own raylet, joined by
--ray-address): every strategy runs with the generators on the worker nodes and the learner on the head, and bad
cluster input (an unreachable address, too few of the resources asked for, a wrong token) fails in one line."""

import json
import socket

import pytest

from alignment.ray.driver import train_grpo_ray
from alignment.ray.env import ray
from alignment.ray.local_cluster import _reload_auth, local_cluster
from alignment.ray.run_events import RunEvents
from alignment.run.setup import PromptOrder
from tests.test_ray_strategies import TASK, check_rows, config_for, logged


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_where_no_head_answers_fails_in_one_line_before_any_model_loads(tiny_model_dir, tmp_path):
    if ray.is_initialized():  # the driver joins --ray-address only when not already connected
        ray.shutdown()
    config = config_for(tiny_model_dir, tmp_path, ray_address=f"127.0.0.1:{free_port()}")
    with pytest.raises(ValueError, match=r"^--ray-address 127\.0\.0\.1:\d+: no Ray head answers there") as err:
        train_grpo_ray(config, TASK, TASK)
    assert "\n" not in str(err.value)
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def three_nodes():
    if ray.is_initialized():  # the session's one-node cluster: this module runs its own
        ray.shutdown()
    with local_cluster(workers=2, head_cpus=1, worker_cpus=1) as cluster:
        yield cluster


STRATEGIES = {
    "colocated-sync": {},
    "colocated-multistep": {"multistep_k": 2, "loss_type": "grpo_clip"},
    "colocated-k-batches": {"multistep_k": 2, "loss_type": "grpo_clip", "checkpoint_every": 2},
    "disaggregated-one-behind": {},
    "replay-buffer": {"buffer_capacity": 4},
    "async": {"generators": 2, "max_staleness": 1},
}


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_runs_on_three_nodes_with_its_generators_spread(three_nodes, tiny_model_dir, tmp_path, strategy):
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy=strategy,
        n_grpo_steps=2,
        ray_address=three_nodes.address,
        **STRATEGIES[strategy],
    )
    rows = train_grpo_ray(config, TASK, TASK)
    assert {r["grpo_step"] for r in rows} == {1, 2}
    check_rows([r for r in logged(config) if "tokens_checksum_sent" in r], config.max_version_lag)
    placed = {e["actor"]: e for e in RunEvents(config.output_dir).read() if e["event"] == "placed"}
    workers = set(three_nodes.node_ids().values())
    learners = [a for a in placed if a.startswith(("Learner", "ColocatedWorker"))]
    generators = [a for a in placed if a.startswith("Generator")]
    assert learners and all(placed[a]["node_id"] not in workers for a in learners), placed  # on the head
    assert all("learner" in placed[a]["resources"] for a in learners)
    assert placed["Scorer"]["node_id"] not in workers  # beside the driver, on the head
    if strategy.startswith("colocated"):
        assert not generators
    else:
        assert generators and all(placed[a]["node_id"] in workers for a in generators), placed
        nodes = [placed[a]["node_id"] for a in generators]
        assert len(set(nodes)) == len(nodes)  # one generator per worker node
    assert not ray.is_initialized()  # the run joined the cluster and left it


@pytest.mark.slow
def test_too_few_generator_units_fail_in_one_line(three_nodes, tiny_model_dir, tmp_path):
    config = config_for(tiny_model_dir, tmp_path, strategy="async", generators=3, ray_address=three_nodes.address)
    with pytest.raises(
        ValueError,
        match=r"^3 generator\(s\) need a unit of the cluster's `generator` resource each; "
        r"its nodes offer 2 ",
    ) as err:
        train_grpo_ray(config, TASK, TASK)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_a_driver_without_the_cluster_token_fails_in_one_line(three_nodes, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN", "0" * 64)
    _reload_auth()
    try:
        config = config_for(tiny_model_dir, tmp_path, ray_address=three_nodes.address)
        with pytest.raises(ValueError, match="refused this process's authentication token") as err:
            train_grpo_ray(config, TASK, TASK)
        assert "\n" not in str(err.value) and str(err.value).startswith(f"--ray-address {three_nodes.address}: ")
    finally:
        monkeypatch.setenv("RAY_AUTH_TOKEN", three_nodes.token)
        _reload_auth()


def trained_groups(config) -> dict[int, list[dict]]:
    """The groups each update trained on (rollouts.jsonl), by step."""
    rows = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    by_step: dict[int, list[dict]] = {}
    for row in rows:
        if row["kind"] == "trained":
            by_step.setdefault(row["grpo_step"], []).append(row)
    return by_step


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["disaggregated-one-behind", "async"])
def test_a_generator_node_removed_mid_run_is_replaced_and_nothing_is_lost(
    three_nodes, tiny_model_dir, tmp_path, strategy
):
    """After step 2 the node running the (first) generator is taken away, as a preempted machine goes, and another
    joins: every step completes, each trained on whole groups of the planned prompts, within the lag bound, and the
    event (actor, groups re-issued, seconds) is in events.jsonl."""
    overrides = {"generators": 2, "max_staleness": 1} if strategy == "async" else {}
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy=strategy,
        n_grpo_steps=4,
        actor_restarts=1,
        ray_address=three_nodes.address,
        **overrides,
    )
    removed = {}

    def preempt(step, actors):
        if step == 2:
            name = "Generator" if "Generator" in actors.generators else "Generator 0"
            node = three_nodes.name_of(actors.nodes[name])
            removed.update(actor=name, node=node, node_id=actors.nodes[name])
            three_nodes.remove(node)
            three_nodes.add(f"{node} (replacement)")

    rows = train_grpo_ray(config, TASK, TASK, on_step=preempt)
    assert removed and {r["grpo_step"] for r in rows} == {1, 2, 3, 4}
    updates = [r for r in logged(config) if "tokens_checksum_sent" in r]
    if strategy == "async":
        assert all(0 <= r["staleness_max"] <= config.max_staleness for r in updates)
    else:
        check_rows(updates, config.max_version_lag)
    groups = trained_groups(config)
    assert sorted(groups) == [1, 2, 3, 4]
    for step, trained in groups.items():
        assert all(g["samples"] == config.group_size for g in trained), trained  # whole groups only
        assert len(trained) == config.n_prompts_per_rollout_batch
    if strategy != "async":  # the prompts planned for each step, lost or not
        n = config.n_prompts_per_rollout_batch
        for step, trained in groups.items():
            planned = PromptOrder(len(TASK.questions), config.seed, position=(step - 1) * n).take(n)
            assert [g["question"] for g in trained] == planned
    else:  # every group handed out is trained once, none lost
        tickets = [g["ticket"] for trained in groups.values() for g in trained]
        assert sorted(tickets) == list(range(8))
    events = RunEvents(config.output_dir).read()
    replaced = [e for e in events if e["event"] == "replaced"]
    assert len(replaced) == 1 and replaced[0]["actors"] == [removed["actor"]], events
    assert replaced[0]["replace_s"] > 0 and replaced[0]["nodes"][removed["actor"]]["node_id"] != removed["node_id"]


@pytest.mark.slow
def test_an_async_generator_whose_node_goes_with_no_room_left_is_dropped_and_the_survivor_finishes(
    three_nodes, tiny_model_dir, tmp_path
):
    """async with two generators, one restart allowed; after step 2 the first generator's node is removed and none
    joins: no `generator` unit is free for a replacement, so the run goes on with the survivor, re-issuing the lost
    groups whole to it, and every update completes."""
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="async",
        generators=2,
        max_staleness=1,
        n_grpo_steps=4,
        actor_restarts=1,
        ray_address=three_nodes.address,
    )
    removed = []

    def preempt(step, actors):
        if step == 2:
            removed.append(three_nodes.name_of(actors.nodes["Generator 0"]))
            three_nodes.remove(removed[0])

    try:
        rows = train_grpo_ray(config, TASK, TASK, on_step=preempt)
    finally:
        if removed:  # the module's cluster gets its node back
            three_nodes.add(f"{removed[0]} (back)")
    assert {r["grpo_step"] for r in rows} == {1, 2, 3, 4}
    updates = [r for r in logged(config) if "tokens_checksum_sent" in r]
    assert all(0 <= r["staleness_max"] <= config.max_staleness for r in updates)
    groups = trained_groups(config)
    assert sorted(groups) == [1, 2, 3, 4]
    assert all(g["samples"] == config.group_size for trained in groups.values() for g in trained)
    assert sorted(g["ticket"] for trained in groups.values() for g in trained) == list(range(8))
    events = RunEvents(config.output_dir).read()
    [dropped] = [e for e in events if e["event"] == "dropped"]
    assert dropped["actors"] == ["Generator 0"] and dropped["generators_left"] == ["Generator 1"], events
    assert dropped["reason"].startswith("no room on the cluster for a generator") and "1 generator" in dropped["reason"]
    assert not [e for e in events if e["event"] == "replaced"]


def policy_tensors(folder) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted((folder / "policy").glob("*.safetensors")) for k, v in load_file(f).items()}


@pytest.mark.slow
def test_a_learner_killed_mid_run_restarts_from_its_checkpoint_and_ends_as_an_uninterrupted_run(
    three_nodes, tiny_model_dir, tmp_path
):
    """colocated-sync, checkpoint every step; the worker (the learner) is killed after step 2 and every actor starts
    again from that checkpoint in the same call, as --resume would: the finished run's logged steps and its weights
    are those of a run never interrupted."""
    common = {"n_grpo_steps": 4, "ray_address": three_nodes.address, "eval_every": 2}
    plain = config_for(tiny_model_dir, tmp_path / "plain", **common)
    train_grpo_ray(plain, TASK, TASK)
    config = config_for(tiny_model_dir, tmp_path / "killed", actor_restarts=1, **common)
    kill = lambda step, actors: ray.kill(actors.learner) if step == 2 else None  # noqa: E731
    rows = train_grpo_ray(config, TASK, TASK, on_step=kill)
    assert [r["grpo_step"] for r in rows if "loss" in r] == [1, 2, 3, 4]
    events = [e for e in RunEvents(config.output_dir).read() if e["event"] == "restarted"]
    assert len(events) == 1 and events[0]["from_step"] == 2 and events[0]["lost"] == ["ColocatedWorker"]
    same = ("grpo_step", "loss", "train_reward", "tokens_checksum_sent", "tokens_checksum_trained")
    got = [{k: r.get(k) for k in same} for r in logged(config) if "loss" in r]
    want = [{k: r.get(k) for k in same} for r in logged(plain) if "loss" in r]
    assert [r["grpo_step"] for r in got] == [r["grpo_step"] for r in want]
    for a, b in zip(got, want):
        assert a["tokens_checksum_sent"] == b["tokens_checksum_sent"], (a, b)  # the same samples, step for step
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
    ours, theirs = policy_tensors(config.output_dir), policy_tensors(plain.output_dir)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name].float().allclose(theirs[name].float(), rtol=1e-4, atol=1e-6), name


@pytest.mark.slow
def test_a_dead_scorer_and_a_hung_generator_are_replaced(three_nodes, tiny_model_dir, tmp_path):
    """disaggregated-one-behind: the scorer is killed after step 1; after step 2 the generator's thread is kept busy
    (alive, silent) past --ray-timeout-s. Both are replaced, their batches launched again whole, and every step
    completes on the planned prompts."""
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="disaggregated-one-behind",
        n_grpo_steps=4,
        actor_restarts=2,
        ray_timeout_s=90.0,  # the actors' start must fit in it too, on a loaded machine
        ray_address=three_nodes.address,
    )

    def fail(step, actors):
        if step == 1:
            ray.kill(actors.scorer)
        if step == 2:
            actors.generator.__ray_call__.remote(lambda generator: __import__("time").sleep(3600))

    rows = train_grpo_ray(config, TASK, TASK, on_step=fail)
    assert {r["grpo_step"] for r in rows} == {1, 2, 3, 4}
    check_rows([r for r in logged(config) if "tokens_checksum_sent" in r], config.max_version_lag)
    groups = trained_groups(config)
    n = config.n_prompts_per_rollout_batch
    for step, trained in groups.items():
        assert all(g["samples"] == config.group_size for g in trained)
        planned = PromptOrder(len(TASK.questions), config.seed, position=(step - 1) * n).take(n)
        assert [g["question"] for g in trained] == planned
    replaced = [e for e in RunEvents(config.output_dir).read() if e["event"] == "replaced"]
    assert [e["actors"] for e in replaced] == [["Scorer"], ["Generator"]], replaced
    assert replaced[1]["error"] == "GetTimeoutError" and replaced[1]["restarts"] == 2
