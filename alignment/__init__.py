"""alignment: post-training language models with reinforcement learning on verified rewards.

The top of the package holds what the handouts (CS336 A5, UW CSE599-O A3, PKU NLPDL HW3) ask a student to write,
one concept per module, pure tensor and string functions where they can be (tests/adapters.py exposes them under
the handouts' `run_*` names, tests/adapters_cs336_2026.py under the 2026 CS336 edition's):

    advantages.py         rewards of rollouts (`compute_rollout_rewards`) and group advantages: `group_advantages`
                          (baseline x normalizer: GRPO, Dr. GRPO, RFT, MaxRL) under both CS336 editions' names
                          (`compute_group_normalized_rewards`, `compute_group_advantages`), RLOO, REINFORCE++
    losses.py             naive policy gradient, GRPO-Clip, GSPO, CISPO, `compute_policy_gradient_loss` (by loss type)
                          and `reweighted_policy_gradient_loss` (by CS336 2026's importance reweighting)
    masked.py             `masked_mean`, `masked_normalize`
    grpo_step.py          `grpo_microbatch_train_step` and the loss aggregations (`aggregate_loss_across_microbatch`)
    grpo_train_step.py    CS336 2026's `grpo_train_step`: graded text to one optimizer step, zero-advantage rows pruned
    rollout_correction.py importance weights for the rollout engine's log-prob mismatch (TIS / MIS)
    kl.py                 k1 / k3 KL estimators
    sft.py                `tokenize_prompt_and_output`, `sft_microbatch_train_step`
    logprobs.py           `compute_entropy`, `get_response_log_probs`
    dpo.py                the per-instance DPO loss
    grader.py             `r1_zero_reward_fn`, `question_only_reward_fn`, `grade_answer`
    evaluation.py         generate, grade, summarize into the handouts' categories; `evaluate_vllm`
    generation_log.py     `log_generations`
    pass_at_k.py          pass@k and Best@k estimators
    prompts.py            the prompt templates in prompts/
    distillation.py       on-policy distillation's per-token advantage (a frozen teacher's log-probs)

and the three training runs, each read top to bottom: `grpo_run.py` (`train_grpo`), `sft_run.py` (`train_sft`)
and `expert_iteration.py` (`expert_iteration`). Everything else lives in a folder per subsystem, each described
in its own `__init__.py`: grpo/, supervised/, rollout/, envs/, grading/, data/, models/, distributed/, ray/,
kissing/, run/, experiments/, config/, utils/. Imports run down only, never back up (docs/concepts/architecture.md).

Submodules are imported where used (torch is heavy; the grader's worker process imports none of it); the
handouts' functions that a student calls from their own script are also here, imported on first use:
`from alignment import evaluate_vllm` (CS336 A5 math_baseline).
"""

from typing import Any

__version__ = "0.1.0"
_EXPORTS = {"evaluate_vllm": "alignment.evaluation"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'alignment' has no attribute {name!r}")
