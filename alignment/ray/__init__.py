"""GRPO on Ray: a driver that schedules actors wrapping the library's sampler, grader and learner.

driver.py         the driver and its strategies (colocated-sync, colocated-multistep, colocated-k-batches,
                  disaggregated-one-behind, replay-buffer): lag and checksum checks, logging, checkpoints
async_driver.py   the async strategy's loop the driver runs: streams, admission, batches within --max-staleness
episode_stream.py --env under async: episodes played turn by turn, weights loaded between turns, versions per turn
actors.py         Generator (streaming too), Learner (a GRPOLearner), ColocatedWorker
learner_group.py  the learner as N actors sharing the policy with FSDP2 (--learner-processes)
scorer.py         the torch-free Scorer actor
cluster.py        starting actors, turning a dead one into a clear error and a checkpoint
config.py         RayGRPOConfig: GRPO's settings plus the strategy's
weight_sync.py    learner -> generator weights over the object store, NCCL or gloo, timed
replay_buffer.py  a bounded buffer of scored groups tagged with their policy version
env.py            import Ray through here (uv run's runtime env switched off)

Importing any module of this package runs this file first, so the switch below comes before each module's own
`ray` imports, whichever of them a script or test imports first.
"""

import os

# Ray reads this once, when it is first imported: under `uv run`, Ray would otherwise build a second virtual
# environment for its workers (in its session folder, where their checkpoints would then land)
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
