"""Every strategy on a 2-CPU Ray cluster with the tiny model: the lag bound, the tokens trained on, identical
weights after each sync (object store, and gloo direct transport from a learner of two FSDP2 actors), and dead
actors (error, checkpoint, resume)."""

import json
import sys
from dataclasses import replace

import pytest

from alignment.data.task import Task
from alignment.models.loading import load_model_and_tokenizer
from alignment.ray.actors import weights_digest
from alignment.ray.cluster import ActorFailure
from alignment.ray.config import RayGRPOConfig
from alignment.ray.driver import train_grpo_ray
from alignment.ray.env import ray
from alignment.run.divergence import read_marker
from tests.test_grpo_loop import QUESTIONS

PHASES = {"time_rollout_s", "time_grading_s", "time_train_s", "time_weight_sync_s", "time_step_s"}


def make_task() -> Task:
    def distinct_words(response: str, truth: str) -> dict[str, float]:
        # defined in here, Ray ships it by value: the scorer process imports no test module (and no torch)
        reward = len(set(response.split())) % 3 / 2
        return {"format_reward": 1.0, "answer_reward": reward, "reward": reward}

    return Task(QUESTIONS, [""] * len(QUESTIONS), "Q: {question}\nA:", distinct_words)


TASK = make_task()


def config_for(model_dir, tmp_path, **overrides) -> RayGRPOConfig:
    base = RayGRPOConfig(
        model=str(model_dir),
        n_grpo_steps=3,
        learning_rate=1e-2,
        rollout_batch_size=4,
        group_size=2,
        train_batch_size=4,
        gradient_accumulation_steps=2,
        sampling_max_tokens=6,
        sampling_min_tokens=2,
        eval_every=1,
        n_eval_examples=4,
        checkpoint_every=1,
        grader_workers=1,
        backend="hf",
        output_dir=tmp_path / "run",
        prompt="question_only",
        ray_timeout_s=300.0,  # the actors must start within it, on a loaded 2-core machine too
    )
    return replace(base, **overrides)


def logged(config: RayGRPOConfig) -> list[dict]:
    return [json.loads(line) for line in (config.output_dir / "metrics.jsonl").read_text().splitlines()]


def check_rows(rows: list[dict], max_lag: int) -> None:
    for row in rows:
        assert PHASES <= set(row) and row["samples_per_s"] > 0 and row["device_hours"] > 0
        assert row["tokens_checksum_trained"] == row["tokens_checksum_sent"]  # trained on exactly what was sent
        assert 0 <= row["version_lag"] <= max_lag and row["weights_version"] == row["grpo_step"]
    assert len({row["tokens_checksum_sent"] for row in rows}) == len(
        {row["grpo_step"] for row in rows}
    )  # new data each step


def test_colocated_sync_a_light_scorer_and_a_dead_learner(cluster, tiny_model_dir, tmp_path):
    config = config_for(tiny_model_dir, tmp_path, kl_reference=True, kl_prev_step=True)
    scorer_imports = []

    def look_then_kill_worker(step, actors):
        if step == 1:
            scorer_imports.append(
                ray.get(
                    actors.scorer.__ray_call__.remote(
                        lambda scorer: [m for m in ("torch", "transformers") if m in sys.modules]
                    ),
                    timeout=60,
                )
            )
        if step == 2:
            ray.kill(actors.learner)

    with pytest.raises(
        ActorFailure, match=r"actor ColocatedWorker died while .*; the last checkpoint is step 2 in .*--resume"
    ):
        train_grpo_ray(config, TASK, TASK, on_step=look_then_kill_worker)
    assert scorer_imports == [[]]  # the scorer's process starts without torch
    rows = [row for row in logged(config) if "loss" in row]
    assert [row["grpo_step"] for row in rows] == [1, 2]
    check_rows(rows, max_lag=0)
    assert all(row["kl_ref_k1"] is not None for row in rows)  # the worker's frozen reference model
    # UW v2 problem 6's KL to the previous step's policy (a copy one update behind), from the second step on
    assert "kl_prev_step_k1_sum" not in rows[0] and rows[1]["kl_prev_step_k1_sum"] != 0
    assert all(row["time_weight_sync_s"] > 0 for row in rows)  # the generation copy takes the learner's weights
    assert [row["grpo_step"] for row in logged(config) if "eval_reward" in row] == [0, 1, 2]


@pytest.mark.slow  # 15 s on 2 quiet cores, most of it the worker actor's start
def test_colocated_multistep_takes_k_steps_per_batch(cluster, tiny_model_dir, tmp_path):
    """Its parts run by default: test_colocated_sync_a_light_scorer_and_a_dead_learner (the colocated worker end to
    end), tests/test_ray_config.py::test_multistep_runs_k_passes_and_resuming_may_change_transport_and_timeout (k
    passes make the learner off-policy) and tests/test_grpo_loop.py::test_one_step_for_every_loss (the off-policy
    learner's epochs over one rollout batch)."""
    config = config_for(
        tiny_model_dir, tmp_path, strategy="colocated-multistep", multistep_k=2, loss_type="grpo_clip", n_grpo_steps=2
    )
    rows = train_grpo_ray(config, TASK, TASK)
    assert [row["grpo_step"] for row in rows] == [1, 1, 2, 2]  # k optimizer steps per rollout batch
    check_rows(rows, max_lag=0)
    assert all("clip_fraction" in row and row["time_old_logprob_s"] > 0 for row in rows)  # old log-probs stored once


@pytest.mark.slow  # 18 s; colocated sync runs end to end by default
def test_colocated_k_batches_samples_a_round_with_one_version_and_steps_once_per_batch(
    cluster, tiny_model_dir, tmp_path
):
    """UW v2 problem 7's Variant B, k = 2: batches 1-2 sampled by version 0, batches 3-4 by version 2; each batch's
    old log-probs are the sampler's (scored by that version before the round's first update); one optimizer step
    per batch, so the round's second batch trains off-policy (ratios away from 1: clipped at a tiny clip range)."""
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="colocated-k-batches",
        multistep_k=2,
        loss_type="grpo_clip",
        cliprange=1e-4,
        n_grpo_steps=4,
        checkpoint_every=2,
        eval_every=3,  # step 3 is mid-round: the engine gets the weights first
    )
    rows = train_grpo_ray(config, TASK, TASK)
    assert [row["grpo_step"] for row in rows] == [1, 2, 3, 4]  # one optimizer step per rollout batch
    check_rows(rows, max_lag=1)
    sampled_by = [row["weights_version"] - 1 - row["version_lag"] for row in rows]
    assert sampled_by == [0, 0, 2, 2] and [row["old_logprob_version"] for row in rows] == [0, 0, 2, 2]
    # old log-probs = the sampler's own (temperature 1, the worker's hf engine samples the policy): version v's
    assert all(row["rollout_logprob_diff_max"] < 1e-4 for row in rows)
    # trained by v, then by v + 1: clipped where the batch has an advantage to clip (a batch whose groups each
    # agree has none: no gradient, nothing clipped), and at least one of the round's second batches has one
    learns = [row["grad_norm"] > 0 for row in rows]
    assert [row["clip_fraction"] > 0 for row in rows] == [False, learns[1], False, learns[3]] and learns[1] | learns[3]
    assert [row["time_weight_sync_s"] > 0 for row in rows] == [False, True, False, True]  # one hand-over per round
    assert [row["grpo_step"] for row in logged(config) if "eval_reward" in row] == [0, 3, 4]


@pytest.mark.slow  # 15 s; the single-process divergence record is tested by default in tests/test_metrics_log.py
def test_a_divergence_in_the_learner_actor_is_recorded_in_the_run_folder(cluster, tiny_model_dir, tmp_path):
    config = config_for(tiny_model_dir, tmp_path, n_grpo_steps=2, divergence_loss_bound=1e-9, n_eval_examples=2)
    with pytest.raises(FloatingPointError, match="GRPO step 1: loss .* past --divergence-loss-bound"):
        train_grpo_ray(config, TASK, TASK)  # Ray's RayTaskError, typed as its cause too
    assert read_marker(config.output_dir)["grpo_step"] == 1
    assert logged(config)[-1] == {"grpo_step": 1, "diverged": 1}


@pytest.mark.slow  # 45 s: a generator killed and the run resumed; colocated sync runs end to end by default
def test_one_behind_lag_sync_and_a_dead_generator_then_resume(cluster, tiny_model_dir, tmp_path):
    config = config_for(tiny_model_dir, tmp_path, strategy="disaggregated-one-behind")
    initial = weights_digest(load_model_and_tokenizer(str(tiny_model_dir))[0])
    digests = []

    def check_sync_then_kill(step, actors):
        digests.append(ray.get([actors.learner.digest.remote(), actors.generator.digest.remote()], timeout=60))
        ray.kill(actors.generator)

    with pytest.raises(ActorFailure, match=r"actor Generator died while .*; checkpoint of step 2 saved in .*--resume"):
        train_grpo_ray(config, TASK, TASK, on_step=check_sync_then_kill)
    [(learner, generator)] = digests
    assert learner == generator != initial  # after the step-1 sync, both hold the updated weights bit for bit
    assert json.loads((config.output_dir / "checkpoint" / "COMPLETE").read_text()) == 2

    resumed = train_grpo_ray(config, TASK, TASK, resume=True)
    assert [row["grpo_step"] for row in resumed] == [3]
    rows = [row for row in logged(config) if "loss" in row]
    assert [row["grpo_step"] for row in rows] == [1, 2, 3]
    check_rows(rows, max_lag=1)
    assert [row["version_lag"] for row in rows] == [0, 1, 0]  # batch 1 overlapped learning on batch 0; resumed fresh


@pytest.mark.slow  # 40 s under load; the refusal with a learner group runs by default in tests/test_ray_config.py
def test_a_generator_killed_mid_run_over_gloo_joins_a_group_formed_again(cluster, tiny_model_dir, tmp_path):
    """disaggregated-one-behind over the gloo direct transport; the generator is killed after step 2. Its replacement
    joins a collective group formed again over the learner and it, gets the learner's weights over it, and the run
    completes every step on the planned prompts, the replacement holding the learner's weights after each sync."""
    from alignment.ray.run_events import RunEvents
    from alignment.run.setup import PromptOrder

    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="disaggregated-one-behind",
        weight_sync="gloo",
        actor_restarts=1,
        n_grpo_steps=4,
    )
    digests = []

    def check_sync_then_kill(step, actors):
        digests.append(ray.get([actors.learner.digest.remote(), actors.generator.digest.remote()], timeout=60))
        if step == 2:
            ray.kill(actors.generator)

    rows = train_grpo_ray(config, TASK, TASK, on_step=check_sync_then_kill)
    assert [row["grpo_step"] for row in rows if "loss" in row] == [1, 2, 3, 4]
    check_rows([row for row in logged(config) if "loss" in row], max_lag=1)
    assert len(digests) == 4 and all(learner == generator for learner, generator in digests)  # after 3, the new one
    assert len({learner for learner, _ in digests}) == 4
    replaced = [e for e in RunEvents(config.output_dir).read() if e["event"] == "replaced"]
    assert len(replaced) == 1 and replaced[0]["actors"] == ["Generator"] and replaced[0]["restarts"] == 1
    assert replaced[0]["groups_reissued"] == PromptOrder(len(TASK.questions), config.seed, position=6).take(2)
    n = config.n_prompts_per_rollout_batch
    trained = [json.loads(line) for line in (config.output_dir / "rollouts.jsonl").read_text().splitlines()]
    for step in range(1, 5):
        groups = [row for row in trained if row["kind"] == "trained" and row["grpo_step"] == step]
        assert all(g["samples"] == config.group_size for g in groups)
        planned = PromptOrder(len(TASK.questions), config.seed, position=(step - 1) * n).take(n)
        assert [g["question"] for g in groups] == planned


@pytest.mark.slow  # 30 s: three Ray actors and two FSDP2 ranks; the buffer's policy and the two-actor learner
# are tested by default in tests/test_replay_buffer.py and tests/test_ray_learner_group.py
def test_replay_buffer_over_the_gloo_direct_transport_from_a_learner_of_two_actors(cluster, tiny_model_dir, tmp_path):
    config = config_for(
        tiny_model_dir,
        tmp_path,
        strategy="replay-buffer",
        buffer_capacity=3,
        buffer_policy="uniform",
        weight_sync="gloo",
        learner_processes=2,
    )
    digests = []
    rows = train_grpo_ray(
        config,
        TASK,
        TASK,
        on_step=lambda step, actors: digests.append(
            ray.get([actors.learner.digest.remote(), actors.generator.digest.remote()], timeout=60)
        ),
    )
    assert [row["grpo_step"] for row in rows] == [1, 2, 3]
    # the learner's two FSDP2 ranks saved their shards each step; each sync sent the whole weights from rank 0
    assert json.loads((config.output_dir / "checkpoint" / "state.json").read_text())["processes"] == 2
    check_rows(rows, max_lag=1)
    assert all(learner == generator for learner, generator in digests) and len({d for d, _ in digests}) == 3
    assert [row["buffer_size"] for row in rows] == [2, 3, 3] and rows[-1]["buffer_evicted"] == 3  # 2 groups per batch
    assert all(0 <= row["staleness_mean"] <= row["staleness_max"] <= 2 for row in rows)
    assert all(row["time_weight_sync_s"] > 0 for row in rows)


@pytest.mark.slow  # about a minute each on 2 loaded cores
@pytest.mark.parametrize(
    ("strategy", "max_lag"), [("colocated-sync", 0), ("disaggregated-one-behind", 1), ("replay-buffer", 1)]
)
def test_episodes_of_an_environment_train_on_every_synchronous_strategy(
    cluster, tiny_model_dir, tmp_path, strategy, max_lag
):
    """--env on Ray: the generator plays the calculator's episodes (their rewards pass the scorer unchanged), the
    learner trains on their ids and masks, validation plays episodes too; one behind and from the replay buffer
    as in lockstep."""
    config = config_for(
        tiny_model_dir,
        tmp_path,
        env="calculator_arithmetic",
        n_train_prompts=8,
        env_max_tokens=400,
        n_grpo_steps=2,
        strategy=strategy,
    )
    train_grpo_ray(config)
    rows = [row for row in logged(config) if "loss" in row]
    assert [row["grpo_step"] for row in rows] == [1, 2]
    check_rows(rows, max_lag=max_lag)
    evals = [row for row in logged(config) if "eval_reward" in row]
    assert [row["grpo_step"] for row in evals] == [0, 1, 2] and all("eval_tool_calls_rate" in row for row in evals)
