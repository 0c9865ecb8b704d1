"""Rollouts with vLLM's offline engine on one GPU, with in-place policy weight loads.

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so that loading new weights is a direct
call on the model object, with no copy of the state dict across processes.
"""

import os
from collections.abc import Sequence

import torch

from alignment.rollout import Rollout, SamplingConfig


class VLLMRolloutEngine:
    def __init__(
        self,
        model_path: str,
        device: str = "cuda:0",
        gpu_memory_utilization: float = 0.85,
        dtype: torch.dtype = torch.bfloat16,
        seed: int = 0,
    ) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        self.llm = LLM(
            model=model_path,
            dtype=str(dtype).removeprefix("torch."),
            gpu_memory_utilization=gpu_memory_utilization,
            enable_prefix_caching=True,
            seed=seed,
            device_ids=[torch.device(device).index or 0],
            # log-probs of the distribution actually sampled from (temperature and top-p applied), as hf reports
            logprobs_mode="processed_logprobs",
        )

    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingConfig) -> list[Rollout]:
        from vllm import SamplingParams

        params = SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            min_tokens=sampling.min_tokens,
            stop=list(sampling.stop),
            include_stop_str_in_output=sampling.include_stop_str_in_output,
            seed=sampling.seed,
            logprobs=0,  # only the sampled token's log-prob
        )
        rollouts = []
        for index, request in enumerate(self.llm.generate(list(prompts), params, use_tqdm=False)):
            for sample in request.outputs:
                token_ids = list(sample.token_ids)
                logprobs = [step[token].logprob for step, token in zip(sample.logprobs, token_ids)]
                reason = "length" if sample.finish_reason == "length" else "stop"
                rollouts.append(Rollout(index, sample.text, token_ids, logprobs, reason))
        return rollouts

    def load_policy_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        weights = list(state_dict.items())
        self.llm.apply_model(lambda model: model.load_weights(weights))
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights
