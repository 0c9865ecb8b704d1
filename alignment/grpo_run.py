"""GRPO end to end (Algorithm 1 of the handouts): the loop `scripts/train_grpo.py` runs. Read it top to bottom.

Each step the sampler (alignment/grpo/sampler.py) draws questions, generates group_size answers to each and grades
them; the learner (alignment/grpo/learner.py) turns rewards into advantages and takes its optimizer steps; the new
weights go to the rollout engine. Which objective those steps optimize is the objective's settings
(alignment/grpo/objective.py), which engine samples is the rollout interface's (alignment/rollout/), and LoRA,
sharding and precision enter at model loading (alignment/run/setup.py), the optimizer, checkpoints and weight export:
none is a branch here. Around the loop: validation, logging, checkpoints and resume, the trained policy/ at the end.
The run's clock (alignment/run/time_budget.py) times it; with --time-budget it is part of the loop's condition.

Under torchrun every process runs this loop with a shard of the policy (alignment/distributed/sharding.py); rank 0
alone prints, writes the run folder's files and logs.
"""

import random
from collections.abc import Callable
from contextlib import closing
from typing import Any

import torch
from tqdm.auto import tqdm

from alignment.config.settings import write_run_settings
from alignment.data.task import Task
from alignment.distributed.sharding import ShardGroup
from alignment.envs.loading import environment_tasks
from alignment.grading.parallel import ParallelGrader
from alignment.grpo.config import GRPOConfig, validate
from alignment.grpo.episode_sampler import EpisodeSampler
from alignment.grpo.learner import GRPOLearner, rollout_forward_tape
from alignment.grpo.sampler import Drawn, GRPOSampler, validation_sampling
from alignment.models.loading import check_model_source
from alignment.models.policy_folder import push_weights
from alignment.prompts import chat_renderer, format_prompt
from alignment.rollout.interface import RolloutEngine
from alignment.run.checkpoint import export_policy, load_checkpoint, save_checkpoint
from alignment.run.metrics_log import MetricsLog
from alignment.run.setup import (
    PhaseTimer,
    build_engine,
    check_gpu_memory,
    devices,
    learner_group,
    load_policy,
    make_grader,
    model_dtype,
)
from alignment.run.threads import use_torch_threads
from alignment.run.time_budget import RunClock, budget_validations
from alignment.run.training_settings import check_output_dir
from alignment.tasks.building import needs_chat_template, run_tasks
from alignment.utils.atomic import check_writable_dir


def train_grpo(
    config: GRPOConfig, task: Task | None = None, validation: Task | None = None, resume: bool = False
) -> list[dict]:
    """Run (or resume) GRPO; returns the metrics rows of this invocation. Tasks default to the settings' data."""
    validate(config)
    with learner_group(config) as group:
        return _train(config, task, validation, resume, group)


def grpo_step(
    sampler: GRPOSampler | EpisodeSampler,
    learner: GRPOLearner,
    engine: RolloutEngine,
    on_drawn: Callable[[Drawn], None] | None = None,
) -> list[dict[str, float]]:
    """One GRPO step: sample and grade groups, update the policy on them, hand the new weights to the engine.
    `on_drawn` sees the graded groups before the update (to log them). Returns one metrics row per optimizer step."""
    timer = PhaseTimer()
    drawn = sampler.draw(learner.step, timer)
    if on_drawn is not None:
        on_drawn(drawn)
    rows = learner.update(learner.make_batch(drawn.questions, drawn.rollouts, drawn.scores), timer)
    with timer("weight_sync"):
        push_weights(engine, learner.policy)
    shared = drawn.stats | {f"time_{phase}_s": seconds for phase, seconds in timer.seconds.items()}
    return [{"grpo_step": learner.step} | shared | row for row in rows]


def train_examples(task: Task, drawn: Drawn) -> list[dict[str, Any]]:
    """Every rollout of a step with its question, ground truth and rewards, as rollouts.jsonl holds them."""
    truths = task.truths_for(drawn.questions, [r.prompt_index for r in drawn.rollouts])
    return [
        {
            "question": task.logged_question(drawn.questions[r.prompt_index]),
            "response": r.text,
            "ground_truth": task.logged_truth(truth),
        }
        | {key: None if value != value else value for key, value in score.items()}  # NaN (a reward's None): null
        for r, truth, score in zip(drawn.rollouts, truths, drawn.scores)
    ]


def sampler_and_learner(
    config: GRPOConfig, policy: torch.nn.Module, tokenizer, engine: RolloutEngine, task: Task, grader: ParallelGrader
) -> tuple[GRPOSampler | EpisodeSampler, GRPOLearner]:
    """The run's sampler over `engine` and its learner of `policy`, sharing the forward tape when the learner may
    replay the sampler's forward (--reuse-rollout-forward). With --env the sampler plays the environment's
    episodes, which the learner trains on as it trains on rollouts."""
    if config.env is not None:
        return EpisodeSampler(config, engine, task, tokenizer), GRPOLearner(config, policy, tokenizer, task)
    longest_prompt = max(len(tokenizer(format_prompt(task.template, q))["input_ids"]) for q in task.questions)
    tape = rollout_forward_tape(config, policy, engine, longest_prompt)
    return GRPOSampler(config, engine, task, grader, tape), GRPOLearner(config, policy, tokenizer, task, tape)


def _train(
    config: GRPOConfig, task: Task | None, validation: Task | None, resume: bool, group: ShardGroup | None
) -> list[dict]:
    main = group is None or group.main
    check_writable_dir(check_output_dir(config, resume))
    chat_pending = False  # prompts in the model's chat turn are built once its tokenizer is known
    if task is None or validation is None:  # data and reward errors surface before any model loads
        if config.env is not None:
            task, validation = environment_tasks(config.env, config)
        else:
            task, validation = run_tasks(config)
            chat_pending = needs_chat_template(config)
    check_model_source(config.model)  # a model folder not there, or one the hub cannot give: before the run folder
    if group is not None:
        group.barrier()  # every rank has looked at the folder before rank 0 writes to it
    if not resume and main:  # before any model loads: an output folder that cannot be written fails here
        write_run_settings(config)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    policy_device, rollout_device = devices(config)
    vllm_share = None
    if torch.device(policy_device).type == "cuda":
        vllm_share = check_gpu_memory(config, task, policy_device, rollout_device, 1 if group is None else group.size)
    use_torch_threads(config.torch_threads, main)
    policy, tokenizer = load_policy(config, policy_device, model_dtype(config, policy_device), shard=group is not None)
    if chat_pending:
        task, validation = run_tasks(config, chat_renderer(tokenizer), False)
    periodic, final = budget_validations(validation, config.n_eval_examples, config.time_budget is not None)
    engine = build_engine(config, policy, tokenizer, rollout_device, policy_device, vllm_share, group)
    grader = make_grader(task, config.grader_workers, group)
    sampler, learner = sampler_and_learner(config, policy, tokenizer, engine, task, grader)
    state: dict = {}
    if resume:
        state = load_checkpoint(config.output_dir, config, policy, learner.optimizer)
        learner.step = state["step"]
        sampler.load_state(state)
        push_weights(engine, policy)
        if main:
            write_run_settings(config)  # the resumable settings this continuation changed
    clock = RunClock(config.time_budget_s, state.get("elapsed_s", 0.0))
    log = MetricsLog(
        config.output_dir, config.to_json(), config.wandb_project, config.wandb_mode, learner.step, enabled=main
    )

    def validate_now(on: Task) -> float:
        policy.eval()
        with clock.timing_validation(len(on.questions)):
            summary, examples = sampler.evaluate(on, validation_sampling(config))
        log.log(
            {"grpo_step": learner.step}
            | summary
            | {"eval_examples": len(on.questions), "time_elapsed_s": clock.elapsed()}
        )
        log.log_rollouts(learner.step, "eval", examples)
        return summary["eval_reward"]

    def checkpoint(stopped_by: str | None = None) -> None:
        loop = {"step": learner.step, "elapsed_s": clock.elapsed()} | sampler.state()
        with clock.timing_checkpoint():
            save_checkpoint(
                config.output_dir, config, policy, tokenizer, learner.optimizer, loop | {"stopped_by": stopped_by}
            )

    def another_step() -> bool:
        """The step count says whether the loop goes on; with --time-budget, the clock too: whether the next step,
        the validation and checkpoint due after it and the final validation fit."""
        upcoming = learner.step + 1
        validating = len(periodic.questions) if upcoming % config.eval_every == 0 else 0
        return learner.step < config.n_grpo_steps and clock.room_for_step(
            validating + len(final.questions), checkpoint=upcoming % config.checkpoint_every == 0
        )

    def log_train_rollouts(drawn: Drawn) -> None:
        """--log-train-rollouts-every N: the rollouts of every Nth step, before the update (kind "train")."""
        upcoming = learner.step + 1
        if config.log_train_rollouts_every and upcoming % config.log_train_rollouts_every == 0:
            log.log_rollouts(upcoming, "train", train_examples(task, drawn))

    rows: list[dict] = []
    # the log records a divergence (Diverged: NaN, or a loss past its bound) in the run folder as the run stops
    with log, closing(grader):
        eval_reward = validate_now(periodic) if learner.step == 0 else float("nan")
        with tqdm(total=config.n_grpo_steps, initial=learner.step, desc="GRPO", unit="step", disable=not main) as bar:
            while another_step():
                with clock.timing_step():
                    step_rows = grpo_step(sampler, learner, engine, log_train_rollouts)
                for row in step_rows:
                    row["time_elapsed_s"] = clock.elapsed()
                    log.log(row)
                rows += step_rows
                ending = not another_step()  # the last step validates and checkpoints below, as the run ends
                if learner.step % config.eval_every == 0 and not ending:
                    eval_reward = validate_now(periodic)
                if learner.step % config.checkpoint_every == 0 and not ending:
                    checkpoint()
                last = step_rows[-1]
                bar.set_postfix(
                    reward=f"{last['train_reward']:.2f}",
                    eval=f"{eval_reward:.2f}",
                    rollout=f"{last.get('time_rollout_s', 0):.1f}s",
                    train=f"{last.get('time_train_s', 0):.1f}s",
                )
                bar.update(1)
        # a resumed run that had ended has validated, unless resumed at step 0, where its logs start again
        if rows or learner.step == 0 or state.get("stopped_by") is None:
            validate_now(final)
            checkpoint("n_grpo_steps" if learner.step >= config.n_grpo_steps else "time_budget")
        if main:
            export_policy(config.output_dir)
    return rows
