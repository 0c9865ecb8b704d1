"""Reductions over the positions a mask selects (response tokens, usually)."""

import torch


def masked_mean(tensor: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(tensor * mask) / sum(mask) over `dim` (every element when None).

    No clamping: a slice with no selected element gives NaN, exactly as torch's mean of nothing does.
    tensor, mask: same shape; mask is 0/1 (bool or numeric). Returns a scalar, or `tensor` reduced over `dim`.
    """
    mask = mask.to(tensor.dtype)
    if dim is None:
        return (tensor * mask).sum() / mask.sum()
    return (tensor * mask).sum(dim=dim) / mask.sum(dim=dim)


def masked_normalize(
    tensor: torch.Tensor,
    mask: torch.Tensor,
    dim: int | None = None,
    normalize_constant: float = 1.0,
) -> torch.Tensor:
    """sum(tensor * mask) / normalize_constant over `dim` (every element when None).

    With a constant such as the maximum generation length this is Dr. GRPO's length-unbiased aggregation.
    """
    masked = tensor * mask.to(tensor.dtype)
    total = masked.sum() if dim is None else masked.sum(dim=dim)
    return total / normalize_constant
