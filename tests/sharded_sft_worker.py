"""SFT and expert iteration end to end on a tiny policy, run plainly (one unsharded process) or under
`torchrun --nproc-per-node N -m tests.sharded_sft_worker` (the policy sharded with FSDP2).

    python -m tests.sharded_sft_worker MODEL_DIR DATA_DIR OUT [--expert-iteration]

SFT (`sft_config`): 10 examples, 1 epoch in batches of 6 (3 microbatches of 2), so 2 optimizer steps: the first
of 3 microbatches (with 2 ranks, rank 1 runs one and an empty turn), the second of the last 4 examples in 2
microbatches (one each). It evaluates 2 held-out questions before and after, and checkpoints the last step.
With --expert-iteration, one EI step follows (`ei_config`): 3 questions (a share of 2 and of 1), 2 rollouts each,
graded by `hash_reward`, and SFT on the ones it accepts.
"""

import json
import sys
import zlib
from pathlib import Path

import torch.distributed as dist

from alignment.distributed.sharding import launched, start_group
from alignment.expert_iteration import expert_iteration
from alignment.grader import REWARD_FNS
from alignment.sft_run import train_sft
from alignment.supervised.config import EIConfig, SFTConfig

QUESTIONS = ["Name a fruit.", "Count to three.", "Say hello.", "Add 3 and 4.", "Double 5.", "Halve 8."]
HELD_OUT = ["What is 10 - 7?", "What is 3 * 3?"]


def write_data(folder: Path) -> None:
    """What the configs below read: sft.jsonl (10 prompt / response records, the question_only template being the
    question alone), and GSM8K-style questions.jsonl (for expert iteration) and held_out.jsonl (for evaluation)."""
    folder.mkdir(parents=True, exist_ok=True)
    sft = [{"prompt": f"What is {i} + 1?", "response": f" It is {i + 1}, one more than {i}."} for i in range(10)]
    (folder / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sft))
    for name, questions in (("questions", QUESTIONS), ("held_out", HELD_OUT)):
        records = [{"question": q, "answer": f"#### {i}"} for i, q in enumerate(questions)]
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def shared_settings(model_dir: str, output_dir: Path) -> dict:
    return dict(
        model=model_dir,
        prompt="question_only",
        learning_rate=1e-3,
        backend="hf",
        precision="fp32",
        n_eval_examples=2,
        eval_max_tokens=4,
        grader_workers=1,
        seed=3,
        output_dir=output_dir,
    )


def sft_config(model_dir: str, data: Path, output_dir: Path) -> SFTConfig:
    return SFTConfig(
        **shared_settings(model_dir, output_dir),
        dataset=str(data / "sft.jsonl"),
        data_format="sft",
        validation_dataset=str(data / "held_out.jsonl"),
        batch_size=6,
        gradient_accumulation_steps=3,
    )


def hash_reward(response: str, truth: str) -> dict[str, float]:
    r = float(zlib.crc32(response.encode()) % 2)  # accepts about half of the rollouts
    return {"format_reward": 1.0, "answer_reward": r, "reward": r}


def ei_config(model_dir: str, data: Path, output_dir: Path) -> EIConfig:
    return EIConfig(
        **shared_settings(model_dir, output_dir),
        dataset=str(data / "questions.jsonl"),
        validation_dataset=str(data / "held_out.jsonl"),
        n_ei_steps=1,
        questions_per_step=3,
        rollouts_per_question=2,
        sampling_max_tokens=6,
        sampling_min_tokens=1,
        batch_size=2,
        gradient_accumulation_steps=2,
        eval_at_start=False,
    )


def main(model_dir: str, data: Path, out: Path, with_expert_iteration: bool) -> None:
    if launched():
        start_group("cpu")  # the runs' own group, which they leave to us: one group cannot be joined twice
    train_sft(sft_config(model_dir, data, out / "sft"))
    if with_expert_iteration:
        REWARD_FNS["question_only"] = hash_reward  # the prompt's reward, read when the run builds its task
        expert_iteration(ei_config(model_dir, data, out / "ei"))
    if launched():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), "--expert-iteration" in sys.argv[4:])
