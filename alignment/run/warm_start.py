"""An SFT warm start before GRPO, in the same command: a few SFT steps on the training split's worked solutions (as
r1_zero traces, alignment/data/sft_examples.py) teach a small model the answer format, then GRPO starts from that
policy. The warm start is its own SFT run in `<output_dir>/warm_start/` (its metrics, its policy/), evaluated on
the GRPO run's held-out questions with the GRPO run's evaluation settings before and after, so its gain is
reported apart from GRPO's, which counts from GRPO's own step-0 validation.

Here: the settings GRPOConfig mixes in and their checks. The SFT run itself is `alignment.sft_run.warm_start`, beside
`train_sft`, which it calls.
"""

from dataclasses import dataclass
from typing import Any

from alignment.config.settings import setting

WARM_START_DIR = "warm_start"


@dataclass
class WarmStartSettings:
    warm_start_sft_steps: int = setting(
        0,
        "SFT optimizer steps on --dataset's worked solutions (GSM8K-shaped records: the reasoning, then #### N) before "
        "GRPO starts, from --model; GRPO then trains the warm-started policy (<output-dir>/warm_start/policy). 0: "
        "none.",
    )
    warm_start_sft_batch_size: int = setting(16, "Examples per warm-start SFT step.")
    warm_start_sft_learning_rate: float = setting(1e-4, "AdamW learning rate of the warm-start SFT steps.")


def check_warm_start(config: Any) -> None:
    """The warm start's settings, each error naming its flag (before any model loads)."""
    if config.warm_start_sft_steps < 0:
        raise ValueError(f"--warm-start-sft-steps must be >= 0, got {config.warm_start_sft_steps}")
    if config.warm_start_sft_batch_size < 1:
        raise ValueError(f"--warm-start-sft-batch-size must be >= 1, got {config.warm_start_sft_batch_size}")
    if config.warm_start_sft_steps and config.task != "math":
        raise ValueError("--warm-start-sft-steps needs --task math (worked solutions to train on)")
    if config.warm_start_sft_steps and config.backend not in ("auto", "hf", "vllm"):
        raise ValueError(f"--warm-start-sft-steps samples its evaluations with auto, hf or vllm, not {config.backend}")
