"""Everything around the GRPO loop: data, models, devices, evaluation, logging, checkpoints and resume."""

import contextlib
import os
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from alignment.atomic import check_writable_dir
from alignment.checkpoint import export_policy, load_checkpoint, save_checkpoint
from alignment.cpu_allocator import retain_freed_memory
from alignment.data import MathExample
from alignment.data_splits import run_data
from alignment.grader import REWARD_FNS
from alignment.grpo_config import GRPOConfig, validate
from alignment.grpo_trainer import GRPOTrainer, evaluate, progress
from alignment.hf_rollout import HFRolloutEngine
from alignment.keyword_dataset import load_keyword_dataset
from alignment.keywords import DEFAULT_KEYWORDS, keyword_tasks, load_keywords
from alignment.lm_checkpoint import load_transformer_lm
from alignment.lm_rollout import TransformerLMRolloutEngine
from alignment.metrics_log import MetricsLog
from alignment.memory_plan import ASSUMED_PROMPT_TOKENS, OWN_GPU_SHARE, GiB, Machine, grpo_workload, model_shape, report
from alignment.models import load_model_and_tokenizer, load_tokenizer
from alignment.parallel_grading import ParallelGrader
from alignment.policy_folder import push_weights
from alignment.prompts import chat_template, format_prompt, load_prompt
from alignment.rollout import RolloutEngine, SamplingConfig
from alignment.rollout_backends import make_rollout_engine, resolve_backend
from alignment.settings import write_run_settings
from alignment.sharded_rollout import ShardedGrader, ShardedRollouts
from alignment.sharding import ShardGroup, launched, shard_policy, start_group
from alignment.task import Task


def math_task(examples: Sequence[MathExample], prompt: str) -> Task:
    """Questions and answers with the prompt's template and reward function."""
    if prompt not in REWARD_FNS:
        raise ValueError(f"--prompt {prompt!r} is not one of {', '.join(REWARD_FNS)}")
    return Task([e.question for e in examples], [e.answer for e in examples], load_prompt(prompt), REWARD_FNS[prompt])


def math_tasks(config: GRPOConfig) -> tuple[Task, Task]:
    """Training and validation tasks from MATH-style or GSM8K data; prints what was chosen and the overlap."""
    data = run_data(config.dataset, config.dataset_split, config.validation_dataset, config.n_eval_examples,
                    config.allow_validation_overlap)
    for note in data.notes:
        print(note)
    return math_task(data.train, config.prompt), math_task(data.validation, config.prompt)


def devices(config: GRPOConfig) -> tuple[str, str]:
    """(policy, rollout): two GPUs when there are two, one shared GPU, or the CPU; under torchrun, GPU LOCAL_RANK."""
    gpus = torch.cuda.device_count()
    if launched():
        device = config.policy_device or (f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if gpus else "cpu")
        return device, device
    policy = config.policy_device or ("cuda:0" if gpus else "cpu")
    rollout = config.rollout_device or ("cuda:1" if gpus >= 2 and policy == "cuda:0" else policy)
    return policy, rollout


def keyword_run_tasks(config: GRPOConfig, template: str) -> tuple[Task, Task]:
    """Keyword tasks from a built dataset folder (--keywords-dataset) or generated from --keywords-file."""
    if config.keywords_dataset is not None:
        train, validation = load_keyword_dataset(config.keywords_dataset, template)
        n = config.n_eval_examples
        return train, replace(validation, questions=validation.questions[:n], truths=validation.truths[:n])
    words = load_keywords(config.keywords_file or DEFAULT_KEYWORDS)
    return keyword_tasks(template, words, config.n_train_prompts, config.n_eval_examples, config.keywords_per_prompt, config.seed)


def check_sharded(config: Any) -> None:
    """What a learner sharded over torchrun's processes (GRPO, SFT, expert iteration) cannot do yet, refused before
    any model loads."""
    if config.backend not in ("auto", "hf"):
        raise ValueError(f"--backend {config.backend} under torchrun: the sharded learner samples with --backend hf, "
                         "each rank its share of the prompts (vLLM's in-process engine would join the learner's process "
                         "group); run without torchrun to sample with vLLM, or use scripts/train_grpo_ray.py, whose "
                         "vLLM generators run beside a sharded learner")
    if config.lora_rank > 0:
        raise ValueError("--lora-rank > 0 under torchrun: LoRA runs in one process (its adapters are small enough "
                         "not to need sharding); use --lora-rank 0 or run without torchrun")
    if getattr(config, "reuse_rollout_forward", "off") == "on":
        raise ValueError("--reuse-rollout-forward on needs one process (torchrun shards the policy)")


@contextlib.contextmanager
def learner_group(config: Any) -> Iterator[ShardGroup | None]:
    """Under torchrun: the checks above, this process in the group (None otherwise), stdout silenced on ranks other
    than 0 (their progress bars are off), and the group left at the end unless the caller had joined it (a group
    cannot be joined again once left: runs one after the other in one launch share the caller's)."""
    if not launched():
        yield None
        return
    check_sharded(config)
    joined = not torch.distributed.is_initialized()
    group = start_group(torch.device(devices(config)[0]).type)
    try:
        with contextlib.ExitStack() as stack:
            if not group.main:
                stack.enter_context(contextlib.redirect_stdout(stack.enter_context(open(os.devnull, "w"))))
            yield group
    finally:
        if joined:
            torch.distributed.destroy_process_group()


def load_policy(config: GRPOConfig, device: str, dtype: torch.dtype, shard: bool = False,
                group: torch.distributed.ProcessGroup | None = None):
    """(policy, tokenizer): our own TransformerLM for --backend transformer_lm, else a transformers model; with
    `shard`, sharded as it is built over every process of `group` (default: all of them; alignment/sharding.py).

    A policy on the CPU first switches the process to glibc settings that keep freed memory for reuse
    (alignment.cpu_allocator): a third off the CPU train phase on a VM slow to fault pages in.
    """
    if torch.device(device).type == "cpu":
        retain_freed_memory()
    if resolve_backend(config.backend) == "transformer_lm":  # type: ignore[arg-type]
        return load_transformer_lm(config.model, device, dtype)
    # sharded: the whole model only ever in CPU memory; fully_shard moves each rank's shards to its device
    policy, tokenizer = load_model_and_tokenizer(config.model, device, dtype, lora=config, place=not shard)
    return (shard_policy(policy, torch.device(device).type, group) if shard else policy), tokenizer


def build_engine(config: GRPOConfig, policy, tokenizer, rollout_device: str, policy_device: str,
                 vllm_share: float | None = None, group: ShardGroup | None = None) -> RolloutEngine:
    """An in-process backend on the policy's own device samples from the policy object itself: no weight copies.

    vLLM on the policy's own GPU takes `vllm_share` of it (the memory plan's) and sleeps while the policy trains.
    A sharded policy's ranks each sample their share of the prompts with the hf backend (alignment/sharded_rollout.py).
    """
    if group is not None:
        engine = HFRolloutEngine(policy, tokenizer, progress=group.main)
        return ShardedRollouts(engine, group)  # type: ignore[return-value]
    backend = resolve_backend(config.backend)  # type: ignore[arg-type]
    if backend == "transformer_lm" and rollout_device == policy_device:
        return TransformerLMRolloutEngine(policy, tokenizer)
    if backend == "hf" and rollout_device == policy_device:
        return HFRolloutEngine(policy, tokenizer)
    shared_gpu = rollout_device == policy_device and torch.device(policy_device).type == "cuda"
    share = vllm_share or config.gpu_memory_utilization or OWN_GPU_SHARE
    return make_rollout_engine(config.model, backend, rollout_device, gpu_memory_utilization=share, seed=config.seed,
                               sleep=shared_gpu)


def check_gpu_memory(config: GRPOConfig, task: Task | None, policy_device: str, rollout_device: str,
                     processes: int = 1) -> float | None:
    """Print the run's memory plan for its GPUs and return vLLM's share; ValueError naming the flags that would make
    it fit when it does not. Reads config.json and the tokenizer only: no model has loaded yet. Under torchrun,
    `processes` GPUs each hold a shard of the learner."""
    tokenizer = load_tokenizer(config.model)
    prompt_tokens = ASSUMED_PROMPT_TOKENS if task is None else max(  # keyword tasks are built after the model loads
        len(tokenizer(format_prompt(task.template, q))["input_ids"]) for q in task.questions)
    gpus = processes if processes > 1 else 1 if torch.device(rollout_device) == torch.device(policy_device) else 2
    machine = Machine(gpus, torch.cuda.get_device_properties(torch.device(policy_device)).total_memory / GiB)
    shape = model_shape(config.model)
    result, text = report(shape, grpo_workload(config, shape, prompt_tokens, processes), machine)
    print(text)
    if not result.fits:
        raise ValueError(text.splitlines()[-1])
    return result.vllm_share


def validation_sampling(config: GRPOConfig) -> SamplingConfig:
    """One sample per validation question with the rollout settings, up to eval_max_tokens."""
    max_tokens = config.eval_max_tokens or config.sampling_max_tokens
    return SamplingConfig(
        temperature=config.sampling_temperature, top_p=config.sampling_top_p, max_tokens=max_tokens,
        min_tokens=min(config.sampling_min_tokens, max_tokens), stop=config.stop, seed=config.seed,
    )


def train_grpo(config: GRPOConfig, task: Task | None = None, validation: Task | None = None, resume: bool = False) -> list[dict]:
    """Run (or resume) GRPO; returns the metrics rows of this invocation. Tasks default to math data.

    Under torchrun every process runs this with a shard of the policy (alignment/sharding.py); rank 0 alone prints,
    writes the run folder's files and logs."""
    validate(config)
    with learner_group(config) as group:
        return _train(config, task, validation, resume, group)


def _train(config: GRPOConfig, task: Task | None, validation: Task | None, resume: bool, group: ShardGroup | None) -> list[dict]:
    main = group is None or group.main
    earlier = [name for name in ("metrics.jsonl", "checkpoint") if (config.output_dir / name).exists()]
    if earlier and not resume and not config.overwrite:
        raise ValueError(f"--output-dir {config.output_dir} holds an earlier run ({', '.join(earlier)}); "
                         "pass --resume to continue it or --overwrite to replace it")
    check_writable_dir(config.output_dir)
    if task is None or validation is None:  # data errors surface before any model loads
        if config.task == "math":
            task, validation = math_tasks(config)
        else:
            keyword_run_tasks(config, "{question}")  # checked now, built once the chat template is known
    if group is not None:
        group.barrier()  # every rank has looked at the folder before rank 0 writes to it
    if not resume and main:  # before any model loads: an output folder that cannot be written fails here
        write_run_settings(config)
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    policy_device, rollout_device = devices(config)
    vllm_share = None
    if torch.device(policy_device).type == "cuda":
        vllm_share = check_gpu_memory(config, task, policy_device, rollout_device, 1 if group is None else group.size)
    dtype = getattr(torch, config.dtype) if config.dtype else (torch.bfloat16 if policy_device.startswith("cuda") else torch.float32)
    policy, tokenizer = load_policy(config, policy_device, dtype, shard=group is not None)
    if task is None or validation is None:
        task, validation = keyword_run_tasks(config, chat_template(tokenizer))
    if config.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
    engine = build_engine(config, policy, tokenizer, rollout_device, policy_device, vllm_share, group)
    grader = ParallelGrader(task.reward_fn, config.grader_workers)
    if group is not None:
        grader = ShardedGrader(grader, group)  # type: ignore[assignment]
    trainer = GRPOTrainer(config, policy, tokenizer, engine, task, grader)  # type: ignore[arg-type]
    elapsed = 0.0
    if resume:
        state = load_checkpoint(config.output_dir, config, policy, trainer.optimizer)
        trainer.step_index, trainer.order.position, elapsed = state["step"], state["order_position"], state["elapsed_s"]
        push_weights(engine, policy)
        if main:
            write_run_settings(config)  # the resumable settings this continuation changed
    started = time.perf_counter() - elapsed
    log = MetricsLog(config.output_dir, config.to_json(), config.wandb_project, config.wandb_mode, trainer.step_index,
                     enabled=main)
    eval_sampling = validation_sampling(config)

    def validate_now() -> float:
        summary, examples = evaluate(engine, policy, validation, grader, eval_sampling)
        log.log({"grpo_step": trainer.step_index} | summary | {"time_elapsed_s": time.perf_counter() - started})
        log.log_rollouts(trainer.step_index, "eval", examples)
        return summary["eval_reward"]

    rows: list[dict] = []
    try:
        eval_reward = validate_now() if trainer.step_index == 0 else float("nan")
        with progress(config.n_grpo_steps, trainer.step_index, disable=not main) as bar:
            while trainer.step_index < config.n_grpo_steps:
                step_rows = trainer.step()
                for row in step_rows:
                    row["time_elapsed_s"] = time.perf_counter() - started
                    log.log(row)
                rows += step_rows
                step = trainer.step_index
                if step % config.eval_every == 0 or step == config.n_grpo_steps:
                    eval_reward = validate_now()
                if step % config.checkpoint_every == 0 or step == config.n_grpo_steps:
                    save_checkpoint(config.output_dir, config, policy, tokenizer, trainer.optimizer, {
                        "step": step, "order_position": trainer.order.position, "elapsed_s": time.perf_counter() - started,
                    })
                last = step_rows[-1]
                bar.set_postfix(reward=f"{last['train_reward']:.2f}", eval=f"{eval_reward:.2f}",
                                rollout=f"{last.get('time_rollout_s', 0):.1f}s", train=f"{last.get('time_train_s', 0):.1f}s")
                bar.update(1)
        if main:
            export_policy(config.output_dir)
    finally:
        grader.close()
        log.close()
    return rows
