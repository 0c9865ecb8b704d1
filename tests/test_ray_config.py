"""RayGRPOConfig: each bad Ray flag is refused naming it, before any actor starts; and the script's flags."""

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from alignment.config.settings import write_run_settings
from alignment.ray.config import RayGRPOConfig, validate_ray
from alignment.run.checkpoint import fingerprint
from scripts import train_grpo_ray as script

BASE = RayGRPOConfig(rollout_batch_size=8, group_size=4, train_batch_size=8, gradient_accumulation_steps=4)


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"strategy": "fully-async"}, "--strategy 'fully-async' is not one of colocated-sync, colocated-multistep"),
        ({"multistep_k": 0}, "--multistep-k must be >= 1"),
        (
            {"multistep_k": 4},
            "--multistep-k (4) applies only to --strategy colocated-multistep or colocated-k-batches",
        ),
        (
            {"strategy": "colocated-k-batches", "multistep_k": 2},
            "trains each batch against old log-probs stored from the version that sampled it: pass --loss-type "
            "grpo_clip",
        ),
        (
            {"strategy": "colocated-k-batches", "multistep_k": 2, "loss_type": "grpo_clip", "train_batch_size": 4},
            "--strategy colocated-k-batches takes one optimizer step per rollout batch",
        ),
        (
            {"strategy": "colocated-k-batches", "multistep_k": 4, "loss_type": "grpo_clip", "checkpoint_every": 6},
            "--checkpoint-every (6) must be a multiple of --multistep-k (4)",
        ),
        (
            {"strategy": "colocated-multistep", "multistep_k": 2},
            "pass --loss-type grpo_clip (got 'reinforce_with_baseline')",
        ),
        (
            {
                "strategy": "colocated-multistep",
                "multistep_k": 2,
                "loss_type": "grpo_clip",
                "epochs_per_rollout_batch": 2,
            },
            "keep --epochs-per-rollout-batch 1",
        ),
        (
            {"strategy": "replay-buffer", "buffer_capacity": 1},
            "--buffer-capacity (1) must hold at least one rollout batch (2 groups",
        ),
        ({"buffer_policy": "lifo"}, "--buffer-policy 'lifo' is not one of uniform, newest, fifo"),
        ({"weight_sync": "rdma"}, "--weight-sync 'rdma' is not one of object_store, nccl, gloo"),
        ({"weight_sync": "nccl"}, "--weight-sync nccl needs two actors; --strategy colocated-sync"),
        ({"ray_timeout_s": 0}, "--ray-timeout-s must be > 0"),
        (
            {"group_size": 3},
            "--rollout-batch-size (8) must be divisible by --group-size (3)",
        ),  # GRPOConfig's own checks too
        (
            {"dynamic_sampling": True, "loss_type": "grpo_clip"},
            "--dynamic-sampling is not available with --strategy colocated-sync",
        ),
        (
            {"loss_type": "gspo", "loss_aggregation": "token_mean"},
            "--loss-type gspo is a per-sequence objective: --loss-aggregation token_mean",
        ),
        ({"learner_processes": 0}, "--learner-processes must be >= 1, got 0"),
        (
            {"learner_processes": 2},
            "--learner-processes 2 needs learner actors of their own: use --strategy "
            "disaggregated-one-behind or replay-buffer (--strategy colocated-sync",
        ),
        (
            {"learner_processes": 2, "strategy": "replay-buffer", "lora_rank": 4},
            "--learner-processes 2 with --lora-rank 4",
        ),
        (
            {"learner_processes": 2, "strategy": "replay-buffer", "backend": "transformer_lm"},
            "--learner-processes 2 shards a transformers model; --backend transformer_lm",
        ),
    ],
)
def test_bad_flags_are_named(overrides, message):
    with pytest.raises(ValueError) as info:
        validate_ray(replace(BASE, **overrides))
    assert message in str(info.value)


def test_multistep_runs_k_passes_and_resuming_may_change_transport_and_timeout():
    multistep = replace(BASE, strategy="colocated-multistep", multistep_k=4, loss_type="grpo_clip")
    validate_ray(multistep)
    assert multistep.learner_config().epochs_per_rollout_batch == 4 and multistep.learner_config().off_policy
    k_batches = replace(BASE, strategy="colocated-k-batches", multistep_k=4, loss_type="grpo_clip", checkpoint_every=8)
    validate_ray(k_batches)  # one step per batch: the learner is the on-policy one, fed old log-probs by the driver
    assert k_batches.learner_config() == k_batches and not k_batches.off_policy and k_batches.max_version_lag == 3
    assert BASE.learner_config() is BASE
    moved = replace(BASE, strategy="disaggregated-one-behind", weight_sync="gloo", ray_timeout_s=5.0)
    assert fingerprint(moved) == fingerprint(replace(moved, weight_sync="object_store", ray_timeout_s=600.0))
    assert fingerprint(moved) != fingerprint(replace(moved, strategy="replay-buffer"))
    assert fingerprint(moved) != fingerprint(replace(moved, learner_processes=2))  # a checkpoint is sharded or not


def test_script_reads_ray_settings_from_file_and_flags(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(
        script, "train_grpo_ray", lambda config, resume=False: seen.update(config=config, resume=resume)
    )
    monkeypatch.setattr(script, "report", lambda output_dir: None)
    path = tmp_path / "run.toml"
    path.write_text('strategy = "replay-buffer"\nbuffer_policy = "uniform"\ngroup_size = 4\n')
    result = CliRunner().invoke(
        script.app,
        [
            "--config",
            str(path),
            "--buffer-capacity",
            "16",
            "--output-dir",
            str(tmp_path / "r"),
            "--learner-processes",
            "2",
            "--ray-address",
            "auto",
        ],
    )
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.strategy, config.buffer_policy, config.buffer_capacity, config.group_size) == (
        "replay-buffer",
        "uniform",
        16,
        4,
    )
    assert (config.learner_processes, config.ray_address) == (2, "auto")
    assert seen["resume"] is False
    write_run_settings(config)
    result = CliRunner().invoke(
        script.app, ["--resume", str(tmp_path / "r"), "--ray-timeout-s", "5", "--weight-sync", "gloo"]
    )
    assert result.exit_code == 0, result.output
    assert seen["resume"] is True and seen["config"] == replace(config, ray_timeout_s=5.0, weight_sync="gloo")
    result = CliRunner().invoke(script.app, ["--resume", str(tmp_path / "r"), "--buffer-capacity", "8"])
    assert result.exit_code != 0 and "--buffer-capacity was 16, now 8" in result.output
    path.write_text("buffer_size = 3\n")
    result = CliRunner().invoke(script.app, ["--config", str(path)])
    assert result.exit_code != 0 and "unknown settings buffer_size" in result.output


def test_actor_restarts_bound_every_strategy_and_read_a_saved_generator_restarts(tmp_path):
    from alignment.config.settings import typed_values

    validate_ray(RayGRPOConfig(strategy="disaggregated-one-behind", actor_restarts=2))  # no longer async-only
    with pytest.raises(ValueError, match="--actor-restarts must be >= 0, got -1"):
        validate_ray(RayGRPOConfig(actor_restarts=-1))
    # a replaced generator joins a direct transport's group formed again; a learner group's gloo world cannot take it
    for transport in ("gloo", "nccl"):
        validate_ray(RayGRPOConfig(strategy="replay-buffer", actor_restarts=1, weight_sync=transport))
        validate_ray(RayGRPOConfig(strategy="async", actor_restarts=1, weight_sync=transport))
    validate_ray(RayGRPOConfig(strategy="replay-buffer", actor_restarts=1, learner_processes=2))
    two_learners = RayGRPOConfig(strategy="replay-buffer", actor_restarts=1, weight_sync="gloo", learner_processes=2)
    with pytest.raises(ValueError) as err:
        validate_ray(two_learners)
    assert str(err.value).startswith("--actor-restarts with --weight-sync gloo and --learner-processes 2: ")
    assert "use --weight-sync object_store, or --learner-processes 1" in str(err.value) and "\n" not in str(err.value)
    values = typed_values(RayGRPOConfig, {"generator_restarts": 3}, tmp_path / "settings.json")
    assert values["actor_restarts"] == 3 and "generator_restarts" not in values
