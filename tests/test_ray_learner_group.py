"""The learner as 2 Ray actors sharing the policy (FSDP2 over gloo, alignment/ray/learner_group.py) gives the update of
1 Learner, and saves and restores its shards. (A whole run with it: test_ray_strategies.py's replay-buffer test.)

Tolerance: on a fixed batch (12 rollouts, 2 AdamW steps at lr 1e-3 of 3 microbatches each, so that rank 1 runs an
empty turn each step), 2 learner actors against 1 differ by at most 6.5e-6 in any weight (measured, the same on
every run: float32 sums in another order, which AdamW's normalization amplifies where an element's gradient is
small: that element moved 1.7e-4 in 2 steps), where a step moves weights by up to 1e-3; the test allows 2e-5. As
in tests/test_sharding.py, the steps' loss and gradient norm are compared too: Adam's update barely changes
when every gradient is scaled alike. The single learner is the same Learner class run in the test's process,
which saves starting a third actor, with one thread like each actor: run on two threads, it ends 1.0e-4 away from
the pair (measured), fifteen times what sharding alone does.
"""

from dataclasses import replace

import pytest
import torch

from alignment.grpo.sampler import rollout_sampling
from alignment.models.loading import load_model_and_tokenizer
from alignment.prompts import format_prompt
from alignment.ray.actors import Learner, spawn
from alignment.ray.cluster import ActorFailure
from alignment.ray.driver import train_grpo_ray
from alignment.ray.env import ray
from alignment.ray.learner_group import LearnerGroup
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.run.cpu_allocator import started_retaining
from tests.test_ray_strategies import TASK, check_rows, config_for, logged

QUESTIONS = [0, 1, 2, 3]


def fixed_batch(config) -> tuple[list, list]:
    """Rollouts sampled once by an unsharded copy of the model, half marked stopped by EOS; and their scores."""
    model, tokenizer = load_model_and_tokenizer(config.model)
    engine = HFRolloutEngine(model.eval(), tokenizer, progress=False)
    prompts = [format_prompt(TASK.template, TASK.questions[q]) for q in QUESTIONS]
    rollouts = engine.generate(prompts, config.group_size, rollout_sampling(config, 0))
    rollouts = [replace(r, finish_reason="stop") if i % 2 else r for i, r in enumerate(rollouts)]
    return rollouts, [TASK.reward_fn(r.text, "") for r in rollouts]


@pytest.mark.slow  # 40-90 s: two FSDP2 learner actors and a generator; FSDP2 equivalence runs by default in
# tests/test_sharding.py, a colocated Ray run in tests/test_ray_strategies.py
def test_two_learner_actors_update_as_one_and_restore_their_shards(cluster, tiny_model_dir, tmp_path):
    config = config_for(
        tiny_model_dir,
        tmp_path,
        learning_rate=1e-3,
        rollout_batch_size=12,
        group_size=3,
        train_batch_size=6,
        gradient_accumulation_steps=3,
        loss_type="grpo_clip",
        seed=3,
        loss_aggregation="token_mean",
        mask_truncated=True,
        strategy="disaggregated-one-behind",
    )
    group = LearnerGroup.spawn(replace(config, learner_processes=2), TASK, "cpu", 1, 0, 1)  # starts while we sample
    rollouts, scores = fixed_batch(config)
    threads = torch.get_num_threads()
    learner = Learner(config, TASK, "cpu", 1)  # one thread, as each actor (see above)
    one_learned, one = learner.learn(QUESTIONS, rollouts, scores), learner.weights(on_cpu=True)
    torch.set_num_threads(threads)
    try:
        ray.get([h.ping.remote() for h in group.ranks], timeout=120)
        group.start([], timeout_s=120)
        learned = ray.get(group.learn.remote(QUESTIONS, rollouts, scores), timeout=120)
        two = ray.get(group.weights.remote(True), timeout=120)
        saved_step = ray.get(group.save.remote(config.output_dir, {"elapsed_s": 0.0}), timeout=120)
        saved = ray.get(group.digest.remote(), timeout=120)
        ray.get(group.learn.remote(QUESTIONS, rollouts, scores), timeout=120)  # moves the weights on
        moved = ray.get(group.digest.remote(), timeout=120)
        restored_state = ray.get(group.restore.remote(config.output_dir), timeout=120)
        restored = ray.get(group.digest.remote(), timeout=120)
    finally:
        for handle in group.ranks:
            ray.kill(handle)
        group.close()

    initial = load_model_and_tokenizer(str(tiny_model_dir))[0].state_dict()
    assert one.keys() == two.keys() == initial.keys()
    assert all(t.shape == initial[k].shape for k, t in two.items())  # gathered whole, not rank 0's shards
    assert max((one[k] - two[k]).abs().max().item() for k in one) < 2e-5
    assert max((one[k] - initial[k]).abs().max().item() for k in one) > 1e-4  # the weights did move
    assert learned.checksum == one_learned.checksum and learned.version == one_learned.version == 1
    assert len(learned.rows) == len(one_learned.rows) == 2
    for a, b in zip(one_learned.rows, learned.rows):
        assert a["grad_norm"] > 0
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-3, abs=1e-7)

    assert saved_step == 1 and restored_state["step"] == 1 and restored_state["elapsed_s"] == 0.0
    assert moved != saved and restored == saved  # every rank read back its shards, bit for bit


@pytest.mark.slow  # 37 s on 2 quiet cores (66 s shared): two runs of a generator and two learner actors
def test_a_dead_learner_rank_stops_the_run_and_it_resumes(cluster, tiny_model_dir, tmp_path):
    config = config_for(tiny_model_dir, tmp_path, strategy="disaggregated-one-behind", learner_processes=2)

    def kill_rank_1(step, actors):
        if step == 1:
            ray.kill(actors.names["Learner 1"])

    # rank 0's next collective fails on the lost peer; the run names the dead rank and the last checkpoint
    with pytest.raises(
        ActorFailure,
        match=r"actor Learner 1 died while Learner: learn on batch 1 .*; the last "
        r"checkpoint is step 1 in .*--resume",
    ):
        train_grpo_ray(config, TASK, TASK, on_step=kill_rank_1)
    resumed = train_grpo_ray(config, TASK, TASK, resume=True)
    assert [row["grpo_step"] for row in resumed] == [2, 3]
    rows = [row for row in logged(config) if "loss" in row]
    assert [row["grpo_step"] for row in rows] == [1, 2, 3]
    check_rows(rows, max_lag=1)


@pytest.mark.slow  # its own Ray cluster's start-up is most of its 26 s on 2 quiet cores
def test_a_cpu_actor_starts_with_the_allocator_settings_so_never_calls_mallopt(cluster):
    """glibc's mallopt is MT-Unsafe, and an actor's process runs Ray's and gloo's threads before any policy loads:
    an actor holding no GPU (a learner rank on the CPU) has the settings from its start-up environment instead."""

    class Probe:  # defined in here, Ray ships it by value
        def started(self) -> bool:
            return started_retaining()

    actor = spawn(Probe, 0, 0)
    try:
        assert ray.get(actor.started.remote(), timeout=120) is True
    finally:
        ray.kill(actor)
    assert started_retaining() is False  # the test's own process was started without them
