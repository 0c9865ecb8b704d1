"""What a run prints: its own progress bar and one line per validation; the libraries' messages only with --verbose.

vLLM and transformers report engine set-up, kernels, memory binding and every weight reload at INFO and WARNING
level, and draw bars of their own (loading and writing weights; converting the packaged SmolLM2's GGUF file on its
first use): about fifty lines that break up a run's progress bar. Unless verbose, `quiet_libraries` keeps only their
errors, and `quiet_bars_of` stops the bars a library draws past its own switch. Every script calls
`configure_console` with its --verbose flag at entry (alignment/config/cli.py). The choice travels to child processes
(Ray actors, torchrun's ranks, a sweep's runs) in the environment: the libraries read their own variables when first
imported, and `quiet_libraries` reads VERBOSE_ENV (the vLLM engine and each Ray actor call it as they start). Unset
means quiet, as in a notebook; ALIGNMENT_VERBOSE=1 makes every script verbose.
"""

import functools
import importlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

VERBOSE_ENV = "ALIGNMENT_VERBOSE"  # "1": the libraries' INFO and WARNING lines are shown
QUIET_ENV = {
    "VLLM_LOGGING_LEVEL": "ERROR",  # read when vllm is first imported
    "TRANSFORMERS_VERBOSITY": "error",  # read when transformers is first imported
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" and "Writing model shards" bars too
}
# the loggers kept to errors (torch: "No CUDA runtime is found" as vLLM loads its CPU kernels)
QUIET_LOGGERS = ("vllm", "transformers", "torch.utils.cpp_extension", "ray")


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def configure_console(verbose_flag: bool) -> None:
    """A script's --verbose, or else what its parent process chose (a sweep's runs, torchrun's ranks): recorded for
    child processes, then applied to this one (from its start: a process quieted before is not made verbose again).
    Verbose, the libraries' variables that a quiet parent process set are dropped."""
    verbose_flag = verbose_flag or verbose()
    os.environ[VERBOSE_ENV] = "1" if verbose_flag else "0"
    if verbose_flag:
        for name, value in QUIET_ENV.items():
            if os.environ.get(name) == value:
                del os.environ[name]
    quiet_libraries()


def quiet_libraries() -> None:
    """Unless verbose, only errors from vLLM, transformers, Ray and torch's extension loader, no bars of theirs and no
    Python warnings raised in vLLM's code. A variable the user set stays as it is."""
    _drop_harmless_reload_warning()
    if verbose():
        return
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(library_log_level())
    warnings.filterwarnings("ignore", module=r"vllm(\.|$)")  # e.g. torch deprecations met by vLLM's kernel lookup
    if "transformers" in sys.modules or "huggingface_hub" in sys.modules:  # imported: its variables were read already
        from transformers.utils import logging as transformers_logging

        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()


def library_log_level() -> int:
    """The level a library whose logging is set up later (ray.init sets Ray's) should log at."""
    return logging.INFO if verbose() else logging.ERROR


@contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Unless verbose, hold back what compiled code writes to the process's stderr (file descriptor 2), which no
    logger reaches: building vLLM's CPU engine prints a C++ warning about NUMA memory binding. Shown after all if
    the block fails."""
    if verbose():
        yield
        return
    sys.stderr.flush()
    saved, failed = os.dup(2), False
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if failed:
                held.seek(0)
                os.write(2, held.read())


# transformers' GGUF reader draws its "Converting and de-quantizing GGUF tensors" bar with tqdm itself, past the switch
# of transformers' own bars (the packaged SmolLM2's first load: alignment/models/loading.py)
GGUF_READER = "transformers.modeling_gguf_pytorch_utils"


@contextmanager
def quiet_bars_of(module_name: str) -> Iterator[None]:
    """Unless verbose, the tqdm bars that `module_name` draws with its own `tqdm` are off while the block runs;
    errors are raised and logged as ever."""
    if verbose():
        yield
        return
    module = importlib.import_module(module_name)
    drawn = module.tqdm
    module.tqdm = functools.partial(drawn, disable=True)
    try:
        yield
    finally:
        module.tqdm = drawn


class _HarmlessReloadWarning(logging.Filter):
    """vLLM's in-place weight reload (alignment/rollout/vllm_engine.py) warns "RotaryEmbedding: Failed to load
    weights" at every update. Its only tensor is `cos_sin_cache`, a non-persistent buffer computed from the rope
    settings, which no checkpoint holds; the reload counts it as a weight, finds none loaded, warns, and puts the
    computed cache back. The rotary tables are unchanged and correct (tests/test_vllm_rollout.py checks log-probs
    after reloads against transformers), so this message alone is dropped, verbose or not."""

    def filter(self, record: logging.LogRecord) -> bool:
        args: Any = record.args
        return not (
            record.msg == "%s: Failed to load weights"
            and isinstance(args, tuple)
            and str(args[0]).endswith("RotaryEmbedding")
        )


RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"


def _drop_harmless_reload_warning() -> None:
    logger = logging.getLogger(RELOAD_LOGGER)
    if not any(isinstance(f, _HarmlessReloadWarning) for f in logger.filters):
        logger.addFilter(_HarmlessReloadWarning())


PARTS = ("format", "answer")  # the rewards a validation row breaks its reward into


def validation_line(row: dict[str, Any]) -> str:
    """One line for a validation row of metrics.jsonl: its step and held-out rewards (a task's reward functions each,
    else math's format and answer rewards)."""
    parts = [
        f"{key.removeprefix('eval_reward_')} {value:.3f}"
        for key, value in row.items()
        if key.startswith("eval_reward_")
    ]
    parts = parts or [
        f"{part} {row[f'eval_{part}_reward']:.3f}" for part in ("format", "answer") if f"eval_{part}_reward" in row
    ]
    detail = f" ({', '.join(parts)})" if parts else ""
    return f"step {row['grpo_step']}: held-out reward {row['eval_reward']:.3f}{detail}"
