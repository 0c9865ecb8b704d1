"""The async strategy (alignment/ray/async_driver.py): its batch rule on hand-made tables, then on a 2-CPU Ray cluster
with the tiny model: ETA = 0 is colocated-sync's update bit for bit, ETA = 2 with partial rollouts keeps every
group within 2 versions while responses span versions, generators killed mid-stream are replaced or stop the run,
which then resumes without training any group twice."""

import json
from dataclasses import replace

import pytest

from alignment.data.task import Task
from alignment.ray.async_driver import Ticket, keep_on_resume, pick_batch
from alignment.ray.config import RayGRPOConfig, validate_ray
from alignment.ray.driver import train_grpo_ray
from alignment.ray.env import ray
from alignment.rollout.interface import Rollout
from tests.test_grpo_loop import QUESTIONS
from tests.test_ray_strategies import TASK, config_for, logged


@pytest.fixture(scope="module")
def cluster():
    """One CPU in Ray's accounting (the OS still runs the actors side by side on its cores): the colocated worker
    and each disaggregated actor then all run torch with one thread. With two, the colocated worker's two threads
    sum in another order than the learner actor's one: measured here, the same tokens and weights 1e-7 apart after
    one step (loss 0.0 against -4.5e-8); with one each, bit for bit."""
    if ray.is_initialized():  # the session's shared cluster (conftest.py), started by a module run before this one
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=200 * 1024**2, log_to_driver=False)
    yield
    ray.shutdown()


ASYNC = RayGRPOConfig(
    rollout_batch_size=8, group_size=4, train_batch_size=8, gradient_accumulation_steps=4, strategy="async"
)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"strategy": "replay-buffer", "max_staleness": 2}, "--max-staleness applies only to --strategy async"),
        ({"strategy": "colocated-sync", "partial_rollouts": False}, "--partial-rollouts applies only to"),
        ({"max_staleness": -1}, "--max-staleness must be >= 0, got -1"),
        ({"generators": 0}, "--generators must be >= 1, got 0"),
        ({"sampling_temperature": 0.7}, "--off-policy-objective decoupled weighs each token by pi_prox / pi_behav"),
        ({"rollout_correction": "token_mask"}, "--rollout-correction token_mask under the decoupled objective needs"),
        ({"loss_type": "gspo", "loss_aggregation": "sequence_mean"}, "the decoupled objective's weight needs"),
        ({"off_policy_objective": "naive", "tis_cap": 2.0}, "--off-policy-objective naive trains stale samples"),
        ({"backend": "transformer_lm"}, "our TransformerLM's sampler does not stream"),
        ({"backend": "vllm", "lora_rank": 4}, "--partial-rollouts with --lora-rank on --backend vllm"),
    ],
)
def test_bad_async_flags_are_named(overrides, message):
    with pytest.raises(ValueError) as info:
        validate_ray(replace(ASYNC, **overrides))
    assert message in str(info.value)


def test_the_async_learner_trains_with_the_off_policy_objective():
    validate_ray(ASYNC)
    assert ASYNC.learner_objective().off_policy == "decoupled"
    assert replace(ASYNC, strategy="replay-buffer").learner_objective().off_policy is None
    naive = replace(ASYNC, off_policy_objective="naive", sampling_temperature=0.7)
    validate_ray(naive)  # no weight: any temperature
    assert naive.learner_objective().correction_cap is None


def ticket(number: int, floor: int, start: int | None = None, graded: bool = True) -> Ticket:
    """A group handed out at version `floor`; streamed with its oldest token of version `start` (None: unfinished)."""
    rollouts = None if start is None else [Rollout(0, "", [1, 2], [-1.0, -1.0], "stop", [start, start + 1])]
    return Ticket(number, number, floor, None, rollouts, [{"reward": 0.0}] if graded and start is not None else None)


def numbers(batch):
    return None if batch is None else sorted(t.number for t in batch)


def test_eta_0_trains_exactly_the_batch_of_its_version():
    batch = [ticket(n, 3, 3) for n in range(4)]
    assert numbers(pick_batch(batch, 3, 4, 0)) == [0, 1, 2, 3]
    assert pick_batch(batch[:3] + [ticket(3, 3)], 3, 4, 0) is None  # one still sampling: the learner waits


def test_the_oldest_graded_groups_go_first_and_the_learner_waits_for_one_due_now():
    # eta 2, B 2, learner at 4: group 0 started at 2 is due now (4 = 2 + 2); 1, 2 later; 3 unfinished (floor 3, due 5)
    table = [ticket(0, 2, 2, graded=False), ticket(1, 3, 3), ticket(2, 3, 4), ticket(3, 3)]
    assert pick_batch(table, 4, 2, 2) is None  # 1 and 2 are ready, but leaving 0 would train it too late
    table[0] = ticket(0, 2, 2)
    assert numbers(pick_batch(table, 4, 2, 2)) == [0, 1]
    # nothing due now: the two graded ones, whatever is still sampling
    assert numbers(pick_batch([ticket(0, 3, 4), ticket(1, 3, 3), ticket(2, 3), ticket(3, 3)], 4, 2, 2)) == [0, 1]


def test_a_batch_that_would_leave_a_later_version_too_much_due_is_refused():
    # eta 2, B 1, learner at 2: groups 0 and 1 still sampling (handed out at 1: due by 3), group 2 graded (started
    # at 2: due by 4). Training 2 now would leave two groups due by 3 for the one update of version 3
    table = [ticket(0, 1), ticket(1, 1), ticket(2, 2, 2)]
    assert pick_batch(table, 2, 1, 2) is None
    table[1] = ticket(1, 1, 2)  # group 1 done (started at 2 on the newer weights: due by 4)
    assert numbers(pick_batch(table, 2, 1, 2)) == [1]  # either fits; the lower number of the same deadline
    table[1] = ticket(1, 1, 1)  # done, started at 1: due by 3, it goes first
    assert numbers(pick_batch(table, 2, 1, 2)) == [1]


def test_a_resumed_run_keeps_the_groups_it_can_still_train_in_time():
    graded = [ticket(0, 1, 1), ticket(1, 2, 2), ticket(2, 3, 3), ticket(3, 3, 3)]
    kept, dropped = keep_on_resume(graded, 4, 2, 2)  # at 4, started at 1: 3 behind
    assert numbers(kept) == [1, 2, 3] and numbers(dropped) == [0]
    kept, dropped = keep_on_resume(graded, 4, 2, 1)  # a lower bound: 2 behind is too old; 3, 3 due by 4 and 4
    assert numbers(kept) == [2, 3] and numbers(dropped) == [0, 1]
    # B 1: two due by 4 (started at 3) but one update at 4; the third, started at 4, is due by 5
    kept, dropped = keep_on_resume(graded[2:] + [ticket(4, 4, 4)], 4, 1, 1)
    assert numbers(kept) == [3, 4] and numbers(dropped) == [2]


def trained_tickets(config) -> list[int]:
    rows = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    return [row["ticket"] for row in rows if row["kind"] == "trained"]


def check_async_rows(rows: list[dict], eta: int, steps: int, size: int) -> None:
    updates = {row["grpo_step"]: row for row in rows if "loss" in row}
    assert sorted(updates) == list(range(1, steps + 1))
    for row in updates.values():
        assert row["tokens_checksum_trained"] == row["tokens_checksum_sent"]
        assert 0 <= row["staleness_mean"] <= row["staleness_max"] == row["version_lag"] <= eta
        assert (row["stale_groups"] > 0) == (row["staleness_max"] > 0)
        assert 0 <= row["token_lag_mean"] <= eta and 0 <= row["learner_idle_fraction"] <= 1
        assert row["time_rollout_s"] >= 0 and 0 <= row["generator_idle_fraction"] <= 1


@pytest.mark.slow  # 1.5 minutes under load: two runs
def test_eta_0_is_the_synchronous_update_bit_for_bit(cluster, tiny_model_dir, tmp_path):
    # the same objective on both sides: the decoupled weight pi_prox / pi_behav is colocated-sync's --tis-cap
    # correction when every token is of the learner's version
    common = dict(n_grpo_steps=3, tis_cap=2.0, loss_type="grpo_clip", eval_every=100)
    digests = {}
    for strategy in ("colocated-sync", "async"):
        extra = {"max_staleness": 0} if strategy == "async" else {}
        config = config_for(tiny_model_dir, tmp_path / strategy, strategy=strategy, **common, **extra)
        digests[strategy] = []
        train_grpo_ray(
            config,
            TASK,
            TASK,
            on_step=lambda step, actors, d=digests[strategy]: d.append(
                ray.get(actors.learner.digest.remote(), timeout=60)
            ),
        )
        if strategy == "async":
            rows = logged(config)
            check_async_rows(rows, 0, 3, 2)
            assert all(row["partial_fraction"] == 0 for row in rows if "loss" in row)
            assert trained_tickets(config) == list(range(6))  # the prompt order's groups, in order, once each
    assert digests["async"] == digests["colocated-sync"]


LONG = dict(sampling_max_tokens=48, sampling_min_tokens=48, n_grpo_steps=4, eval_every=2, max_staleness=2)


@pytest.mark.slow  # 50 s each with the cluster's start; by default the batch rule, admission and resume run on fakes
@pytest.mark.parametrize("transport", ["object_store", "gloo"])
def test_eta_2_partial_rollouts_and_a_generator_killed_mid_stream(cluster, tiny_model_dir, tmp_path, transport):
    """Long responses (48 tokens; the learner's update is shorter): weights arrive while a unit is decoding. The
    generator is killed after update 1 (once update 1's weights reached it) and replaced (over gloo, in a group
    formed again, its first weights sent over it); its unfinished groups are sampled again, none trained twice."""
    config = config_for(tiny_model_dir, tmp_path, strategy="async", actor_restarts=1, weight_sync=transport, **LONG)

    def kill(step, actors):
        if step == 1:
            # a transfer cut by the death would take the learner too (Ray kills both ends of a failed one)
            ray.get(actors.generator.__ray_call__.options(concurrency_group="control").remote(lambda g: None))
            ray.kill(actors.generator)

    train_grpo_ray(config, TASK, TASK, on_step=kill)
    rows = logged(config)
    check_async_rows(rows, 2, 4, 2)
    updates = [row for row in rows if "loss" in row]
    assert max(row["partial_fraction"] for row in updates) > 0 and max(row["version_span_max"] for row in updates) >= 1
    assert max(row["staleness_max"] for row in updates) >= 1  # it did run ahead of the learner
    assert [row["actor_restarts"] for row in updates] == [0, 1, 1, 1]
    assert sorted(trained_tickets(config)) == list(range(8))
    evals = [row["grpo_step"] for row in rows if "eval_reward" in row]
    # the one asked after update 2 runs on the weights the generator holds then: version 2, or 3 if it got them first
    assert evals[0] == 0 and evals[1] in (2, 3) and evals[2:] == [4]


def events_of(config, kind: str) -> list[dict]:
    from alignment.ray.run_events import RunEvents

    return [e for e in RunEvents(config.output_dir).read() if e["event"] == kind]


@pytest.mark.slow  # 70 s under load
def test_a_generator_lost_past_the_restarts_leaves_the_survivor_to_finish_the_run(cluster, tiny_model_dir, tmp_path):
    """Two generators, weights over the gloo direct transport, no restarts allowed; the first dies after update 2
    (once its weights have arrived). The run goes on with the second, in a gloo group formed again without the
    first: every update completes, every group handed out is trained once and whole, and the validation queued on
    the dead generator runs on the survivor."""
    config = config_for(tiny_model_dir, tmp_path, strategy="async", generators=2, weight_sync="gloo", **LONG)

    def kill(step, actors):
        if step == 2:
            first = actors.generators["Generator 0"]
            # its control thread took update 2's weights (their transfer done) and the validation queued before this
            ray.get(first.__ray_call__.options(concurrency_group="control").remote(lambda generator: None), timeout=60)
            ray.kill(first)

    train_grpo_ray(config, TASK, TASK, on_step=kill)
    rows = logged(config)
    check_async_rows(rows, 2, 4, 2)
    assert sorted(trained_tickets(config)) == list(range(8))  # none lost, none trained twice
    trained = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    assert all(row["samples"] == config.group_size for row in trained if row["kind"] == "trained")
    evals = [row["grpo_step"] for row in rows if "eval_reward" in row]
    # the one asked after update 2 runs on the weights the generator holds then: version 2, or 3 if it got them first
    assert evals[0] == 0 and evals[1] in (2, 3) and evals[2:] == [4]
    assert [row["actor_restarts"] for row in rows if "loss" in row] == [0, 0, 0, 0]
    [dropped] = events_of(config, "dropped")
    assert dropped["actors"] == ["Generator 0"] and dropped["generators_left"] == ["Generator 1"]
    assert dropped["reason"] == "past --actor-restarts 0" and not events_of(config, "replaced")


def slow_constant_task(marker):
    """Every response scores 1 after a short wait; the scorer's process exits mid-grading once `marker` exists."""

    def reward(response: str, truth: str) -> dict[str, float]:
        import os
        import time

        if os.path.exists(marker):
            os.remove(marker)
            os._exit(1)
        time.sleep(0.05)
        return {"format_reward": 1.0, "answer_reward": 1.0, "reward": 1.0}

    return Task(QUESTIONS, [""] * len(QUESTIONS), "Q: {question}\nA:", reward)


@pytest.mark.slow  # 40 s under load
def test_a_scorer_lost_mid_grading_is_replaced_and_regrades_the_groups_in_flight(cluster, tiny_model_dir, tmp_path):
    """After update 1 the scorer's process dies while it grades a group. The replacement grades every group that
    was in flight again: each update trains on groups that all scored 1 (none scored as zero), and every group is
    trained once (none dropped)."""
    marker = tmp_path / "die-while-grading"
    task = slow_constant_task(str(marker))
    config = config_for(tiny_model_dir, tmp_path, strategy="async", actor_restarts=1, **LONG)
    train_grpo_ray(config, task, task, on_step=lambda step, actors: marker.touch() if step == 1 else None)
    assert not marker.exists()  # the scorer did die grading
    rows = logged(config)
    check_async_rows(rows, 2, 4, 2)
    assert all(row["train_reward"] == 1.0 for row in rows if "loss" in row)
    assert sorted(trained_tickets(config)) == list(range(8))
    [replaced] = events_of(config, "replaced")
    assert replaced["actors"] == ["Scorer"] and replaced["error"] == "ActorDiedError" and replaced["groups_reissued"]


@pytest.mark.slow  # 3 minutes under load: four runs of the real command line
@pytest.mark.parametrize(
    "fault,message",
    [
        ("ray_step:2", None),  # kill -9 of the driver right after update 2 is logged and checkpointed
        ("async_stream:5", "actor Generator died"),  # the generator, as it streams its 5th group: the run stops
    ],
)
def test_killed_then_resumed_from_the_command_line_trains_every_group_once(tiny_model_dir, tmp_path, fault, message):
    import signal

    from tests.test_fault_cli import STEPS, checkpoint_step, ok, resume, train, write_config

    config = write_config(tiny_model_dir, tmp_path, strategy="async", max_staleness=2, sampling_max_tokens=24)
    run = tmp_path / "run"
    stopped = train("train_grpo_ray.py", config, run, "--ray-timeout-s", "120", fault=fault)
    if message is None:
        assert stopped.returncode == -signal.SIGKILL, stopped.stderr[-3000:]
    else:
        assert stopped.returncode == 1 and message in stopped.stderr and "--resume" in stopped.stderr, stopped.stderr
    assert 1 <= (checkpoint_step(run) or 0) < STEPS
    ok(resume("train_grpo_ray.py", run))
    assert checkpoint_step(run) == STEPS
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    check_async_rows(rows, 2, STEPS, 2)
    trained = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    tickets = [row["ticket"] for row in trained if row["kind"] == "trained"]
    assert sorted(tickets) == list(range(STEPS * 2))  # none lost, none trained twice
