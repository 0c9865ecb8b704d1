"""Expert iteration (CS336 A5 §5): sample, keep what the grader accepts, fine-tune on it, repeat.

Each EI step takes `questions_per_step` (Db) questions in seeded order, samples `rollouts_per_question` (G)
answers to each with the current policy (at least `sampling_min_tokens` tokens, stopping at `</answer>`, kept),
keeps the correct ones and runs `sft_epochs` (E) epochs of SFT steps on them. Logged per step: the kept
fraction, the entropy of the step's rollouts (`token_entropy`, exact and averaged as GRPO logs it), the SFT loss
and entropy (`sft_token_entropy`, on the kept rollouts), and the held-out summary of log_generations. Under torchrun
(alignment/run/setup.py's learner_group) each rank samples and grades its share of the questions with the hf
backend, every rank gets all the rollouts and scores, and the SFT steps train the policy sharded over the ranks.
"""

import statistics
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from alignment.data.sft_examples import SFTExample
from alignment.distributed.sharding import ShardGroup
from alignment.grpo.batch import collate
from alignment.grpo.scoring import mean_token_entropy
from alignment.models.loading import load_tokenizer
from alignment.prompts import chat_renderer, format_prompt
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.run.setup import PromptOrder, learner_group
from alignment.run.training_settings import check_output_dir
from alignment.supervised.config import EIConfig, validate
from alignment.supervised.session import SFTRun, open_run, sft_steps
from alignment.tasks.building import needs_chat_template, run_tasks, task_stop


def correct_examples(
    prompts: list[str],
    truths: list[Any],
    rollouts: list[Rollout],
    scores: list[dict[str, float]],
    threshold: float = 1.0,
) -> list[SFTExample]:
    """The rollouts whose reward reaches `threshold` (math's: 1, a correct answer), as SFT examples on the prompts
    that produced them."""
    return [
        SFTExample(prompts[r.prompt_index], r.text, truths[r.prompt_index])
        for r, s in zip(rollouts, scores)
        if s["reward"] >= threshold
    ]


def ei_step(run: SFTRun, config: EIConfig, questions: list[str], truths: list[Any]) -> dict[str, Any]:
    """One EI step on these questions; returns its metrics row (without the evaluation)."""
    template = run.validation.template
    prompts = [format_prompt(template, q) for q in questions]
    sampling = SamplingConfig(
        temperature=config.sampling_temperature,
        max_tokens=config.sampling_max_tokens,
        min_tokens=min(config.sampling_min_tokens, config.sampling_max_tokens),
        stop=task_stop(config),
        # a function of the step alone, so a resumed run samples the same; + 1: never the validations' seed (the run's)
        seed=config.seed * 1_000_003 + 1 + run.step,
    )
    run.trainer.policy.eval()
    run.sync_engine()
    rollouts = run.engine.generate(prompts, config.rollouts_per_question, sampling)
    scores = run.grader([r.text for r in rollouts], [truths[r.prompt_index] for r in rollouts])
    logged = [run.validation.logged_truth(t) for t in truths]  # a row's answer field: what an SFT example keeps
    kept = correct_examples(prompts, logged, rollouts, scores, config.ei_reward_threshold)
    row: dict[str, Any] = {
        "n_rollouts": len(rollouts),
        "n_kept": len(kept),
        "kept_fraction": len(kept) / len(rollouts),
        "rollout_format_reward": statistics.fmean(s.get("format_reward", 0.0) for s in scores),
        "rollout_response_length": statistics.fmean(len(r.token_ids) for r in rollouts),
        "token_entropy": rollout_entropy(
            run.trainer.policy, run.trainer.tokenizer, prompts, rollouts, config.micro_batch_size
        ),
    }
    if kept:
        steps = sft_steps(run, kept, config.sft_epochs, config.seed + run.step)
        row |= {
            "sft_steps": len(steps),
            "loss": statistics.fmean(s["loss"] for s in steps),
            "sft_token_entropy": statistics.fmean(s["token_entropy"] for s in steps),
        }
    return row


def rollout_entropy(
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    rollouts: list[Rollout],
    micro_batch_size: int,
) -> float:
    """The entropy of the policy's responses over training, the handout's EI deliverable, as GRPO logs it
    (`token_entropy`, alignment/grpo/scoring.py): exact, over every rollout's sampled tokens, before the SFT steps
    (on-policy GRPO's is of the policy that sampled too), so that the two runs' curves compare."""
    batch = collate(
        [tokenizer(p)["input_ids"] for p in prompts],
        rollouts,
        torch.zeros(len(rollouts)),
        torch.zeros(len(rollouts)),
        tokenizer.pad_token_id,
    )
    return mean_token_entropy(policy, batch, micro_batch_size)


def expert_iteration(config: EIConfig, resume: bool = False) -> list[dict[str, Any]]:
    """Run (or resume) expert iteration; returns the metrics rows of this invocation's EI steps. Under torchrun,
    one policy sharded over the processes (learner_group)."""
    validate(config)
    with learner_group(config) as group:
        return _expert_iteration(config, resume, group)


def _expert_iteration(config: EIConfig, resume: bool, group: ShardGroup | None) -> list[dict[str, Any]]:
    check_output_dir(config, resume)
    train, validation = run_tasks(config)  # the data and rewards checked before any model loads
    if needs_chat_template(config):  # the tokenizer alone, for the model's chat turn
        train, validation = run_tasks(config, chat_renderer(load_tokenizer(config.model)), check=False)
    run = open_run(
        config, resume, [SFTExample(format_prompt(train.template, q), "") for q in train.questions], validation, group
    )
    pool = list(zip(train.questions, train.truths))
    order = PromptOrder(len(pool), config.seed, run.state.get("order_position", 0))
    rows: list[dict[str, Any]] = []
    try:
        if run.step == 0 and config.eval_at_start:
            run.evaluate()
        for _ in tqdm(range(run.step, config.n_ei_steps), desc="expert iteration", unit="step", disable=not run.main):
            picked = [pool[i] for i in order.take(config.questions_per_step)]
            row = ei_step(run, config, [q for q, _ in picked], [t for _, t in picked])
            run.step += 1
            row |= {"grpo_step": run.step, "time_elapsed_s": run.elapsed()}
            run.log.log(row)
            rows.append(row)
            if run.step % config.eval_every == 0 or run.step == config.n_ei_steps:
                run.evaluate()
            if run.step % config.checkpoint_every == 0 or run.step == config.n_ei_steps:
                run.checkpoint({"order_position": order.position})
        run.finish()
    finally:
        run.close()
    return rows
