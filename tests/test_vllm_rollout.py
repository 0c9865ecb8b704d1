"""The vLLM backend: runs only where vllm is installed (uv sync --extra vllm) and CUDA is present."""

import pytest
import torch

from alignment.rollout import SamplingConfig, vllm_usable

pytestmark = pytest.mark.skipif(not vllm_usable(), reason="needs the vllm extra and a CUDA GPU")


def test_vllm_samples_log_probs_and_weight_updates(tiny_model_dir, tiny_model, tokenizer):
    from alignment.vllm_rollout import VLLMRolloutEngine
    from transformers import AutoModelForCausalLM

    engine = VLLMRolloutEngine(str(tiny_model_dir), "cuda:0", gpu_memory_utilization=0.3, dtype=torch.float32)
    prompts = ["Hello", "1 2 3 4"]
    rollouts = engine.generate(prompts, 3, SamplingConfig(max_tokens=12, stop=(), seed=0))
    assert [r.prompt_index for r in rollouts] == [0, 0, 0, 1, 1, 1]
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    for r in rollouts:
        prompt_ids = tokenizer(prompts[r.prompt_index])["input_ids"]
        ids = torch.tensor([prompt_ids + r.token_ids])
        with torch.no_grad():
            logits = policy(ids).logits[0, len(prompt_ids) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(r.logprobs), expected, atol=1e-3)
    greedy = SamplingConfig(temperature=0.0, max_tokens=12, stop=())
    before = engine.generate(prompts, 1, greedy)
    engine.load_policy_weights({k: torch.randn_like(v) for k, v in policy.state_dict().items()})
    after = engine.generate(prompts, 1, greedy)
    assert [r.token_ids for r in before] != [r.token_ids for r in after]
