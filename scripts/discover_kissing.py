"""LLM-driven search for kissing configurations in dimension 11 (PKU NLPDL HW3 §7), judged by the sandboxed
exact verifier.

    uv run scripts/discover_kissing.py --mode evolve --backend openai --base-url http://127.0.0.1:8000/v1 --model
    Qwen/Qwen3-32B uv run scripts/discover_kissing.py --mode refine --backend local --model smollm2-135m --iterations 8
    --budget-s 600 uv run scripts/discover_kissing.py --iterations 0 --budget-s 60 --search-share 1 --program-out
    data/kissing_number/program.py

Writes the handout's deliverables to OUTPUT_DIR: program.py (the best program, kept atomically), conversation_log.json
(a JSON object: settings, sessions, and every request, reply, timing and verdict) and report.md (methodology,
process, final result, reflection), with best.json, settings.json and score_over_time.png beside them;
`--program-out PATH` also copies the best program to PATH. `--budget-s` bounds the whole run (search code and model
turns); `--resume DIR` alone continues a stopped run from its log and settings. The API key is read from the
variable named by --api-key-env, never from a flag.
"""

import json
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import typer

from alignment.config import cli
from alignment.config.settings import OutputSettings, override, setting, to_json, write_run_settings
from alignment.kissing.discovery import BEST_JSON, BEST_PROGRAM, LOG_FILE, Discovery, DiscoverySettings
from alignment.kissing.llm_client import ChatError, ChatModel, LocalChatModel, OpenAIChatClient
from alignment.kissing.report import REPORT, write_report
from alignment.kissing.sandbox import SandboxLimits
from alignment.kissing.search import code_seeded_search, program_source
from alignment.kissing.verifier import DIMENSION, evaluate_program
from alignment.rollout.interface import SamplingConfig
from alignment.utils.atomic import atomic_write_text


@dataclass
class DiscoverConfig(OutputSettings):
    mode: Literal["best_of_n", "refine", "evolve"] = setting(
        "evolve", "best_of_n, refine (verifier message fed back) or evolve (program database)."
    )
    backend: Literal["openai", "local"] = setting(
        "local", "openai: an OpenAI-compatible endpoint (--base-url); local: --model on the project's rollout engine."
    )
    model: str = setting(
        "smollm2-135m", "Model name at the endpoint, or for local: a local HF folder, hub id or `smollm2-135m`."
    )
    base_url: str = setting("http://127.0.0.1:8000/v1", "OpenAI-compatible endpoint, up to /v1.")
    api_key_env: str = setting(
        "OPENAI_API_KEY", "Environment variable holding the endpoint's key (unset: no key sent)."
    )
    rollout_backend: Literal["auto", "hf", "vllm", "transformer_lm"] = setting(
        "auto", "Rollout engine for --backend local."
    )
    device: str | None = setting(None, "Device for --backend local, e.g. cuda:0 or cpu (default: cuda:0 if present).")
    iterations: int = setting(8, "Model calls in total (a resumed run counts those already in its log).")
    temperature: float = setting(0.8, "Sampling temperature.")
    top_p: float = setting(1.0, "Nucleus sampling mass.")
    max_tokens: int = setting(1024, "Maximum tokens per reply.")
    request_timeout_s: float = setting(300.0, "Seconds to wait for one endpoint reply.")
    max_retries: int = setting(
        4, "Retries of a failed request (connection errors, timeouts, 429, 5xx), with exponential backoff."
    )
    program_timeout_s: float = setting(60.0, "Wall-clock limit for running one candidate program.")
    program_memory_mb: int = setting(2048, "Address-space limit for one candidate program (MiB).")
    seed_programs: list[str] = setting(
        ["data/kissing_number/starter_program.py"],
        "Program file entered into the database before the first step (repeatable).",
    )
    budget_s: float = setting(
        600.0,
        "Wall-clock seconds for the whole run, search code and model turns together (counted across resumes); a "
        "verification under way may finish past it.",
    )
    search_share: float = setting(
        0.5,
        "Share of --budget-s given first to the code-based search (constant-weight code seed, then local search over "
        "the norm-4 shell); 0: none, 1: all.",
    )
    parent_temperature: float = setting(
        10.0, "evolve: parents are drawn with weight exp((score - best) / T); 0 takes the best."
    )
    inspirations: int = setting(2, "evolve: best other programs shown beside the parent.")
    prompt_program_chars: int = setting(6000, "Programs longer than this are shown in prompts with their middle cut.")
    output_dir: Path = override(OutputSettings, "output_dir", Path("outputs/kissing"))
    program_out: Path | None = setting(
        None, "Also write the best program here at the end, e.g. data/kissing_number/program.py."
    )

    RESUMABLE: ClassVar[frozenset[str]] = frozenset(
        {
            "iterations",
            "budget_s",
            "output_dir",
            "program_out",
            "base_url",
            "api_key_env",
            "request_timeout_s",
            "max_retries",
            "device",
        }
    )


def check(config: DiscoverConfig, resuming: bool) -> tuple[DiscoverySettings, SandboxLimits, list[str]]:
    """Every flag checked, and the seed programs read, before anything is written or loaded."""
    for flag, value, low in (
        ("--iterations", config.iterations, 0),
        ("--inspirations", config.inspirations, 0),
        ("--max-retries", config.max_retries, 0),
        ("--prompt-program-chars", config.prompt_program_chars, 200),
        ("--parent-temperature", config.parent_temperature, 0),
    ):
        if value < low:
            raise cli.bad_flag(flag, f"must be >= {low}, got {value}")
    for flag, value in (("--request-timeout-s", config.request_timeout_s), ("--budget-s", config.budget_s)):
        if value <= 0:
            raise cli.bad_flag(flag, f"must be > 0, got {value}")
    if not 0 <= config.search_share <= 1:
        raise cli.bad_flag("--search-share", f"must be in [0, 1], got {config.search_share}")
    if config.program_out is not None and (config.program_out.is_dir() or config.program_out.suffix != ".py"):
        raise cli.bad_flag("--program-out", f"must name a .py file, got {config.program_out}")
    try:
        sampling = SamplingConfig(
            temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens, stop=()
        )
        limits = SandboxLimits(timeout_s=config.program_timeout_s, memory_bytes=config.program_memory_mb * 1024**2)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    seeds = []
    for path in config.seed_programs:
        try:
            seeds.append(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as err:
            raise cli.bad_flag("--seed-programs", f"cannot read {path}: {err}") from None
    if (config.output_dir / LOG_FILE).exists() and not (resuming or config.overwrite):
        message = (
            f"{config.output_dir} holds a run; pass --resume {config.output_dir} to continue it "
            "or --overwrite to start over"
        )
        raise cli.bad_flag("--output-dir", message)
    settings = DiscoverySettings(
        config.mode,
        config.iterations,
        sampling,
        config.parent_temperature,
        config.inspirations,
        config.prompt_program_chars,
        config.seed,
        config.budget_s,
        config.model,
    )
    return settings, limits, seeds


def chat_model(config: DiscoverConfig) -> ChatModel:
    if config.backend == "openai":
        try:
            return OpenAIChatClient(
                config.base_url, config.model, config.api_key_env, config.request_timeout_s, config.max_retries
            )
        except ValueError as err:
            raise cli.bad_flag("--base-url", str(err)) from None
    from alignment.models.loading import load_tokenizer
    from alignment.rollout.backends import make_rollout_engine

    device = {"device": config.device} if config.device else {}
    engine = make_rollout_engine(config.model, config.rollout_backend, **device, seed=config.seed)
    return LocalChatModel(engine, load_tokenizer(config.model))


def run(config: DiscoverConfig, resuming: bool) -> dict:
    settings, limits, seeds = check(config, resuming)
    config.output_dir.mkdir(parents=True, exist_ok=True)
    if config.overwrite and not resuming:
        for name in (LOG_FILE, BEST_PROGRAM, BEST_JSON, REPORT):
            (config.output_dir / name).unlink(missing_ok=True)
    try:
        discovery = Discovery(
            config.output_dir, settings, lambda program: evaluate_program(program, limits), to_json(config)
        )
    except ValueError as err:
        raise cli.bad_flag("--output-dir", str(err)) from None
    write_run_settings(config)
    chat = None
    try:
        if not discovery.candidates:
            for path, source in zip(config.seed_programs, seeds):
                discovery.add_program("seed", source, note=f"from {path}")
            search_s = min(config.budget_s * config.search_share, discovery.remaining_s())
            if search_s > 0:
                began = time.monotonic()
                points, note = code_seeded_search(DIMENSION, search_s, config.seed)
                header = f"Found by the project's search code (alignment.kissing.search), no language model:\n{note}"
                discovery.add_program(
                    "search-code",
                    program_source(points, header),
                    note=note,
                    generate_s=round(time.monotonic() - began, 3),
                )
        if discovery.model_steps < config.iterations and discovery.remaining_s() > 0:
            chat = chat_model(config)
        reason = discovery.run(chat)
    except ChatError as err:
        discovery.stop(f"the endpoint failed: {err}")
        raise typer.BadParameter(
            f"{err} (the log is kept; continue with --resume {config.output_dir})", param_hint="'--base-url'"
        ) from None
    finally:
        if discovery.sessions[-1]["stopped"] is None:  # interrupted (SIGTERM, Ctrl-C): say so in the log
            discovery.stop("interrupted")
        if discovery.candidates:
            write_report(config.output_dir, discovery.log(), chat.usage.retries if chat is not None else 0)
            if config.program_out is not None and discovery.best is not None and discovery.best.program is not None:
                config.program_out.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(config.program_out, discovery.best.program)
    best = discovery.best
    elapsed = discovery.sessions[-1]["ended_s"]
    summary = {
        "best_score": best.score if best else 0.0,
        "best_source": best.source if best else None,
        "candidates": len(discovery.candidates),
        "model_steps": discovery.model_steps,
        "elapsed_s": elapsed,
        "budget_s": config.budget_s,
        "stopped": reason,
        "output_dir": str(config.output_dir),
        "program_out": str(config.program_out) if config.program_out else None,
    }
    typer.echo(f"run ended after {elapsed:.1f} s of its {config.budget_s:g} s budget: {reason}", err=True)
    typer.echo(json.dumps(summary, indent=2))
    return summary


app = cli.run_command(
    DiscoverConfig,
    run,
    "Search for kissing configurations in dimension 11 with a language model and the sandboxed verifier.",
)

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still writes the report (finally blocks run)
    app()
