"""What expert iteration's exact rollout entropy (`token_entropy`, as GRPO logs it) costs per EI step on the CPU EI
demo's shape: SmolLM2-135M scoring Db x G = 32 x 4 rollouts of about 116 tokens after GSM8K r1_zero prompts, in
microbatches of 4 (configs/ei_gsm8k_demo.toml), where the -log p estimate it replaced was free (the sampler's own
log-probs).

    uv run python bench/ei_entropy.py [--data data/gsm8k/train.jsonl] [--repeats 3]
"""

import statistics
import time
from pathlib import Path

import torch
import typer

from alignment.data.math_datasets import load_math_examples
from alignment.expert_iteration import rollout_entropy
from alignment.models.loading import load_model_and_tokenizer
from alignment.prompts import format_prompt, load_prompt
from alignment.rollout.interface import Rollout


def main(
    data: Path = typer.Option(Path("data/gsm8k/train.jsonl"), help="GSM8K train.jsonl (the prompts)."),
    questions: int = typer.Option(32, help="Db"),
    rollouts_per_question: int = typer.Option(4, help="G"),
    response_tokens: int = typer.Option(116, help="Tokens per rollout (the demo's mean)."),
    micro_batch_size: int = typer.Option(4, help="Rows per scoring pass."),
    repeats: int = typer.Option(3, help="Timed passes (the median is reported)."),
    threads: int = typer.Option(
        1, help="torch threads: with 1, CPU seconds are what the pass costs a core however busy"
    ),
) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    policy, tokenizer = load_model_and_tokenizer("smollm2-135m", "cpu", torch.float32)
    policy.eval()
    template = load_prompt("r1_zero")
    examples = load_math_examples(str(data))[:questions]
    prompts = [format_prompt(template, e.question) for e in examples]
    rollouts = [
        Rollout(i, "", torch.randint(0, len(tokenizer), (response_tokens,)).tolist(), [-1.0] * response_tokens, "stop")
        for i in range(questions)
        for _ in range(rollouts_per_question)
    ]
    cpu, wall = [], []
    for _ in range(repeats):
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        entropy = rollout_entropy(policy, tokenizer, prompts, rollouts, micro_batch_size)
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    tokens = sum(len(tokenizer(p)["input_ids"]) for p in prompts) + len(rollouts) * response_tokens
    typer.echo(
        f"{len(rollouts)} rollouts x {response_tokens} tokens after {len(prompts)} prompts ({tokens} tokens scored "
        f"or shared), microbatch {micro_batch_size}, {threads} thread(s): exact entropy pass "
        f"{statistics.median(cpu):.1f} CPU s, {statistics.median(wall):.1f} s wall (medians of {repeats}); "
        f"token_entropy {entropy:.3f}"
    )


if __name__ == "__main__":
    typer.run(main)
