"""An SFT warm start before GRPO, in the same command: a few SFT steps on the training split's worked solutions (as
r1_zero traces, alignment/data/sft_examples.py) teach a small model the answer format, then GRPO starts from that
policy. The warm start is its own SFT run in `<output_dir>/warm_start/` (its metrics, its policy/), evaluated on
the GRPO run's held-out questions with the GRPO run's evaluation settings before and after, so its gain is
reported apart from GRPO's, which counts from GRPO's own step-0 validation.
"""

from dataclasses import dataclass, replace
from pathlib import Path
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


def warm_start_config(config: Any):
    """The SFT run the warm start is: --model on warm_start_sft_steps batches of --dataset's training split,
    validated on the GRPO run's held-out questions at its evaluation settings, at the start and the end."""
    from alignment.supervised.config import SFTConfig  # the SFT side loads only when a warm start is asked for

    steps, batch = config.warm_start_sft_steps, config.warm_start_sft_batch_size
    return SFTConfig(
        model=config.model,
        dataset=config.dataset,
        dataset_split=config.dataset_split,
        validation_dataset=config.validation_dataset,
        data_format="gsm8k",
        n_examples=steps * batch,
        prompt=config.prompt,
        grader=config.grader,
        seed=config.seed,
        learning_rate=config.warm_start_sft_learning_rate,
        batch_size=batch,
        gradient_accumulation_steps=1,
        max_seq_length=512,
        epochs=1,
        eval_every=steps + 1,  # at the start and after the last step only
        checkpoint_every=steps,
        n_eval_examples=config.n_eval_examples,
        eval_max_tokens=config.eval_max_tokens or config.sampling_max_tokens,
        eval_temperature=config.sampling_temperature if config.eval_temperature is None else config.eval_temperature,
        eval_top_p=config.sampling_top_p,
        backend=config.backend,
        grader_workers=config.grader_workers,
        torch_threads=config.torch_threads,
        allow_validation_overlap=config.allow_validation_overlap,
        output_dir=config.output_dir / WARM_START_DIR,
        overwrite=config.overwrite,
    )


def warm_start(config: Any) -> tuple[Any, str | None]:
    """Run the warm start when asked for: (the GRPO config now starting from its policy, a line with its gain).
    Without one: (config, None)."""
    check_warm_start(config)
    if config.warm_start_sft_steps == 0:
        return config, None
    from alignment.experiments.plotting import read_rows
    from alignment.sft_run import train_sft

    sft = warm_start_config(config)
    train_sft(sft)
    evals = [row for row in read_rows(sft.output_dir / "metrics.jsonl") if "eval_reward" in row]
    first, last = evals[0], evals[-1]
    line = (
        f"warm start (SFT, {config.warm_start_sft_steps} step{'s' * (config.warm_start_sft_steps != 1)} of "
        f"{config.warm_start_sft_batch_size}): held-out "
        f"reward {first['eval_reward']:.3f} -> {last['eval_reward']:.3f} "
        f"({100 * (last['eval_reward'] - first['eval_reward']):+.1f} points), format reward "
        f"{first.get('eval_format_reward', float('nan')):.3f} -> {last.get('eval_format_reward', float('nan')):.3f}, "
        f"{last['time_elapsed_s']:.0f} s"
    )
    return replace(config, model=str(Path(sft.output_dir) / "policy")), line
