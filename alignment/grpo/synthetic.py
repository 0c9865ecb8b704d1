"""A GRPO train phase on random rows and random weights of a model's shape: what the GPU benches time and measure
and the GPU checks test, with nothing to download (no weights, no tokenizer, no data).

`random_policy` builds a Qwen2 of a given shape (QWEN_MATH_15B: Qwen2.5-Math-1.5B's; TINY: 2 layers for a CPU) in the
dtype --precision computes in, set up as a loaded policy is (packed rows: alignment/models/packed_rows.py), and
`random_lm` our TransformerLM of a TransformerConfig;
`synthetic_rows` makes a rollout batch of distinct random prompts and responses with advantages +1 and -1; and
`synthetic_learner` is the library's GRPOLearner over them, so that `learner.optimizer_step(rows)` is one optimizer
step exactly as a GRPO train phase takes it: its microbatches scored (alignment/grpo/scoring.py), their losses
backpropagated, the gradient clipped, AdamW in the precision (alignment/run/precision.py).
"""

from dataclasses import replace
from typing import Any

import torch
from transformers import PreTrainedModel, Qwen2Config, Qwen2ForCausalLM

from alignment.data.task import Task
from alignment.grpo.batch import RolloutBatch
from alignment.grpo.config import GRPOConfig
from alignment.grpo.learner import GRPOLearner
from alignment.models.packed_rows import use_packed_attention
from alignment.models.transformer_lm import TransformerConfig, TransformerLM
from alignment.run.memory_plan import ModelShape, Workload, policy_bytes
from alignment.run.precision import MODES

QWEN_MATH_15B: dict[str, Any] = dict(
    hidden_size=1536,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    intermediate_size=8960,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)
TINY: dict[str, Any] = QWEN_MATH_15B | dict(
    hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=4096
)


def random_policy(
    shape: dict[str, Any],
    precision: str,
    device: str | torch.device,
    gradient_checkpointing: bool = False,
    seed: int = 0,
) -> PreTrainedModel:
    """A Qwen2ForCausalLM of `shape` (Qwen2Config arguments) with random weights, in --precision's compute dtype on
    `device`, in train mode."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(Qwen2Config(**shape)).to(MODES[precision].compute)
    use_packed_attention(model)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.train()


def random_lm(config: TransformerConfig, device: str | torch.device, dtype: torch.dtype) -> TransformerLM:
    """Our TransformerLM with weights drawn as transformers initializes its models (normal, std 0.02; norms at 1),
    seed 0, in eval mode: a default nn.Embedding's unit-variance rows, tied to the head, would make every row repeat
    its last token."""
    torch.manual_seed(0)
    model = TransformerLM(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
    return model.to(device, dtype).eval()


def synthetic_rows(
    rows: int, prompt_tokens: int, response_tokens: int, vocab: int, seed: int = 0, group: int = 1
) -> RolloutBatch:
    """`rows` rows of prompt_tokens + response_tokens random tokens fed to the model, the last response_tokens of
    them scored, advantages +1 and -1 in turn, and the sampler's log-probs 0 (on the CPU, as a learner receives
    them). Consecutive rows in groups of `group` continue the same prompt, as a GRPO group's rows do."""
    generator = torch.Generator().manual_seed(seed)
    length = prompt_tokens + response_tokens
    tokens = torch.randint(0, vocab, (rows, length + 1), generator=generator)
    tokens[:, :prompt_tokens] = tokens[torch.arange(rows) // group * group, :prompt_tokens]
    response = torch.zeros(rows, length, dtype=torch.bool)
    response[:, prompt_tokens:] = True
    signs = torch.tensor([1.0, -1.0]).repeat((rows + 1) // 2)[:rows, None]
    return RolloutBatch(
        input_ids=tokens[:, :-1],
        labels=tokens[:, 1:],
        response_mask=response,
        raw_rewards=(signs + 1) / 2,
        advantages=signs,
        rollout_log_probs=torch.zeros(rows, length),
    )


def synthetic_learner(policy: PreTrainedModel, precision: str, rows: int, micro_batch: int, **settings: Any):
    """The GRPO learner over `policy` in `precision`, one optimizer step per `rows` rows in microbatches of
    `micro_batch` (the handouts' loss and AdamW at lr 1e-5 unless `settings` say otherwise). It needs no tokenizer:
    the task has no questions to tokenize."""
    config = replace(
        GRPOConfig(),
        precision=precision,  # type: ignore[arg-type]
        rollout_batch_size=rows,
        train_batch_size=rows,
        gradient_accumulation_steps=rows // micro_batch,
        group_size=micro_batch,
        **settings,
    )
    task = Task(questions=[], truths=[], template="{question}", reward_fn=lambda response, truth: {"reward": 0.0})
    return GRPOLearner(config, policy, tokenizer=None, task=task)  # type: ignore[arg-type]


def synthetic_workload(
    precision: str,
    micro_batch: int,
    micro_batches: int,
    prompt_tokens: int,
    response_tokens: int,
    gradient_checkpointing: bool,
) -> Workload:
    """The memory plan's view of this train phase (alignment/run/memory_plan.py; hf rollouts, no reference)."""
    return Workload(
        precision=precision,  # type: ignore[arg-type]
        micro_batch=micro_batch,
        prompt_tokens=prompt_tokens,
        response_tokens=response_tokens,
        rollout_batch=micro_batch * micro_batches,
        group_size=micro_batch,
        gradient_checkpointing=gradient_checkpointing,
        kl_reference=False,
        rollout="hf",
    )


def planned_training_bytes(shape: dict[str, Any], work: Workload) -> int:
    """The plan's training phase on one GPU for a model of `shape`: weights, master copy, gradients, AdamW states
    and activations (what torch.cuda.max_memory_allocated measures)."""
    return sum(policy_bytes(ModelShape.from_config(Qwen2Config(**shape)), work).values())
