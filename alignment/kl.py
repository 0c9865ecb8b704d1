"""KL estimators between the policy and a reference, from log-probs of tokens the policy sampled.

With r = log pi_ref(o_t) - log pi(o_t) for tokens o_t ~ pi::

  k1 = -r               (unbiased for KL(pi || pi_ref), high variance, can be negative per token)
  k3 = exp(r) - r - 1   (unbiased, always >= 0; Schulman, "Approximating KL divergence", 2020)

Both are reported as means per response token; `k1_sum` is the UW handout's Eq. 8 (v2 problem 6, v1 problem 15):
k1 summed over each response's tokens, then averaged over the N responses, (1/N) sum_i sum_t -r_it: the KL of
whole responses, which grows with their length where the per-token means do not.
"""

import torch

from alignment.masked import masked_mean, masked_normalize


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Per-token k3 from r = log pi_other - log pi_sampler: exp(r) - r - 1 (>= 0).

    Written as expm1(r) - r: near r = 0 (a rollout engine against its trainer) the plain form loses to
    rounding and can come out negative.
    """
    return torch.expm1(log_ratio) - log_ratio


def kl_estimates(
    policy_log_probs: torch.Tensor, reference_log_probs: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """Mean k1 and k3 of KL(policy || reference) over response tokens, and k1_sum, Eq. 8's sum over each response's
    tokens averaged over responses. Inputs: (batch, seq).

    The tokens must have been sampled from the policy side (the first argument).
    """
    log_ratio = (reference_log_probs - policy_log_probs).float()
    return {
        "k1": masked_mean(-log_ratio, response_mask).item(),
        "k3": masked_mean(k3(log_ratio), response_mask).item(),
        "k1_sum": masked_normalize(-log_ratio, response_mask, dim=-1).mean().item(),
    }
