"""On-policy distillation's advantage (Agarwal et al. 2024, GKD; the per-token reverse-KL recipe of Thinking
Machines' "On-Policy Distillation"): the student samples, a frozen teacher scores the student's tokens, and each
sampled token o_t is rewarded by how much likelier the teacher finds it than the student does,

    A_t = w * A_task + (log pi_teacher(o_t) - log pi_student(o_t))

the second term being minus the per-token sample of the reverse KL, KL(pi_student || pi_teacher), whose expectation
over the student's samples is the KL itself. Each token's term is its own (no sum over later tokens, Thinking
Machines' discount 0): a policy-gradient step on it lowers the student's reverse KL to the teacher token by token
(mode-seeking: the student learns what the teacher would say, not an average of everything it might say).
A_task is the task reward's advantage of the rollout (group-normalized, the estimator's), the same on every token of
it, and w (--distill-reward-weight) its weight: w = 0 is pure distillation, w > 0 adds the task's signal at that
scale beside the teacher's, whose coefficient is 1 (as the Tinker cookbook mixes them).

Shapes: log-probs and masks (batch, seq); task advantages (batch, 1).
"""

import torch


def distillation_advantages(
    teacher_log_probs: torch.Tensor,
    student_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    task_advantages: torch.Tensor | None = None,
    reward_weight: float = 0.0,
) -> torch.Tensor:
    """(batch, seq) per-token advantages: reward_weight * task_advantages + (teacher - student) on response tokens,
    0 elsewhere. The log-probs carry no gradient into the advantage (they are rewards, not the objective)."""
    mask = response_mask.bool()
    distill = torch.where(mask, (teacher_log_probs - student_log_probs).detach().float(), 0.0)
    if task_advantages is None or reward_weight == 0:
        return distill
    return distill + torch.where(mask, reward_weight * task_advantages.float(), 0.0)
