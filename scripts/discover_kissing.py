"""Kissing configurations in dimension 11 (PKU NLPDL HW3 §7) with a language model in the refinement
environment: the model writes a program, the sandboxed evaluator answers with its exact verdict, the model refines.

    uv run scripts/discover_kissing.py --mode baseline --backend openai --base-url URL --model Qwen/Qwen3-32B
    uv run scripts/discover_kissing.py --mode refine --turns 12 --backend openai --base-url URL \\
        --model Qwen/Qwen3-32B --extra-body '{"chat_template_kwargs": {"enable_thinking": true}}' \\
        --price-per-mtok-in 0.1 --price-per-mtok-out 0.3
    uv run scripts/discover_kissing.py --mode best_of_n_refine --samples 8 --turns 6 --model smollm2-135m
    uv run scripts/discover_kissing.py --mode search --budget-s 120

Modes: baseline (the handout's prompt, one turn), refine (one conversation, history kept and trimmed to
--history-chars), best_of_n (--samples independent samples, the verifier selects), best_of_n_refine (then the
best sample's conversation is refined up to --turns turns), refine_chains (--samples independent refinement
conversations of --turns turns), search (the project's search code alone, no model).

Writes the handout's deliverables to OUTPUT_DIR: program.py (the best valid program), conversation_log.json (a JSON
object: settings, sessions, each conversation and every turn with the exact request, the answer, the reasoning
apart, tokens, cost, timings and the verdict) and report.md, with best.json, settings.json and score_over_time.png
beside them; `--program-out PATH` also copies the best program to PATH (e.g. data/kissing_number/program.py).
`--budget-s` bounds the whole run; `--resume DIR` continues a stopped run from its log. The API key is read from
the variable named by --api-key-env, never from a flag.
"""

import json
import math
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import typer

from alignment.config import cli
from alignment.config.settings import OutputSettings, override, setting, to_json, write_run_settings
from alignment.kissing.discovery import BEST_JSON, BEST_PROGRAM, LOG_FILE, Discovery, DiscoverySettings
from alignment.kissing.environment import KissingSettings
from alignment.kissing.llm_client import ChatError, ChatModel, LocalChatModel, OpenAIChatClient
from alignment.kissing.report import PLOT, REPORT, write_report
from alignment.kissing.sandbox import SandboxLimits
from alignment.kissing.verifier import DIMENSION, evaluate_program
from alignment.rollout.interface import SamplingConfig
from alignment.utils.atomic import atomic_write_text

# Qwen3's model card asks for up to 32,768 output tokens for most queries in thinking mode: its reasoning alone
# often runs past 10k tokens, and a reply cut before the program ends the turn with nothing to verify.
THINKING_MAX_TOKENS = 32768


@dataclass
class DiscoverConfig(OutputSettings):
    mode: Literal["baseline", "refine", "best_of_n", "best_of_n_refine", "refine_chains", "search"] = setting(
        "refine",
        "baseline: the handout's prompt, one turn; refine: one conversation with the evaluator's feedback; best_of_n: "
        "independent samples; best_of_n_refine: best-of-N then refine the best; refine_chains: N refinement "
        "conversations; search: the project's search code alone.",
    )
    samples: int = setting(4, "N: independent samples (best_of_n, best_of_n_refine) or conversations (refine_chains).")
    turns: int = setting(8, "Model turns per refinement conversation (refine, refine_chains, best_of_n_refine).")
    history_chars: int = setting(
        48000, "Characters of past turns sent back in a conversation; the oldest turns are dropped first."
    )
    parallel: int = setting(
        1, "Requests in flight at once for turns that do not depend on each other (the N samples, chains); openai only."
    )
    start_program: Path | None = setting(
        None, "Show this program and its verdict in the first message (e.g. data/kissing_number/program.py)."
    )
    system_prompt: str = setting("", "A system message before the handout's prompt (none by default).")
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
    extra_body: str = setting(
        "",
        'JSON object of extra request fields passed through as given, e.g. \'{"chat_template_kwargs": '
        '{"enable_thinking": true}}\' (vLLM, SGLang) or \'{"enable_thinking": true}\' (DashScope); openai only.',
    )
    price_per_mtok_in: float | None = setting(None, "Price per million prompt tokens: each turn's cost is logged.")
    price_per_mtok_out: float | None = setting(None, "Price per million completion (and reasoning) tokens.")
    rollout_backend: Literal["auto", "hf", "vllm", "transformer_lm"] = setting(
        "auto", "Rollout engine for --backend local."
    )
    device: str | None = setting(None, "Device for --backend local, e.g. cuda:0 or cpu (default: cuda:0 if present).")
    temperature: float = setting(0.8, "Sampling temperature (Qwen3 recommends 0.6 in thinking mode).")
    top_p: float = setting(1.0, "Nucleus sampling mass.")
    max_tokens: int = setting(
        THINKING_MAX_TOKENS, "Maximum tokens per reply, reasoning included: large enough for a thinking model."
    )
    request_timeout_s: float = setting(1800.0, "Seconds to wait for one endpoint reply (32k tokens take minutes).")
    max_retries: int = setting(
        4, "Retries of a failed request (connection errors, timeouts, 429, 5xx), with exponential backoff."
    )
    program_timeout_s: float = setting(60.0, "Wall-clock limit for running one candidate program.")
    program_memory_mb: int = setting(2048, "Address-space limit for one candidate program (MiB).")
    budget_s: float = setting(
        3600.0, "Wall-clock seconds for the whole run (counted across resumes); a verification under way may finish."
    )
    output_dir: Path = override(OutputSettings, "output_dir", Path("outputs/kissing"))
    program_out: Path | None = setting(
        None, "Also write the best program here at the end, e.g. data/kissing_number/program.py."
    )

    RESUMABLE: ClassVar[frozenset[str]] = frozenset(
        {
            "budget_s",
            "parallel",
            "output_dir",
            "program_out",
            "base_url",
            "api_key_env",
            "request_timeout_s",
            "max_retries",
            "device",
        }
    )


def parse_extra_body(text: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        body = json.loads(text)
    except json.JSONDecodeError as err:
        raise cli.bad_flag("--extra-body", f"is not JSON ({err}): {text!r}") from None
    if not isinstance(body, dict):
        raise cli.bad_flag("--extra-body", f"must be a JSON object, got {type(body).__name__}")
    return body


def check(config: DiscoverConfig, resuming: bool) -> tuple[DiscoverySettings, KissingSettings]:
    """Every flag checked, and the starting program read, before anything is written or loaded."""
    for flag, value, low in (
        ("--samples", config.samples, 1),
        ("--turns", config.turns, 1),
        ("--history-chars", config.history_chars, 0),
        ("--parallel", config.parallel, 1),
        ("--max-retries", config.max_retries, 0),
        ("--price-per-mtok-in", config.price_per_mtok_in or 0, 0),
        ("--price-per-mtok-out", config.price_per_mtok_out or 0, 0),
    ):
        if value < low:
            raise cli.bad_flag(flag, f"must be >= {low}, got {value}")
    for flag, value in (("--request-timeout-s", config.request_timeout_s), ("--budget-s", config.budget_s)):
        if not value > 0:
            raise cli.bad_flag(flag, f"must be > 0, got {value}")
    extra_body = parse_extra_body(config.extra_body)
    if extra_body and config.backend != "openai":
        raise cli.bad_flag("--extra-body", "is sent to an endpoint: it needs --backend openai")
    if config.parallel > 1 and config.backend != "openai":
        raise cli.bad_flag("--parallel", "needs --backend openai (the local engine serves one request at a time)")
    reserved = sorted({"model", "messages"} & set(extra_body))
    if reserved:
        raise cli.bad_flag("--extra-body", f"may not set {', '.join(reserved)} (the run sets them)")
    if config.program_out is not None and (config.program_out.is_dir() or config.program_out.suffix != ".py"):
        raise cli.bad_flag("--program-out", f"must name a .py file, got {config.program_out}")
    task: dict[str, Any] = {}
    if config.start_program is not None:
        try:
            task["program"] = config.start_program.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise cli.bad_flag("--start-program", f"cannot read {config.start_program}: {err}") from None
    try:
        sampling = SamplingConfig(config.temperature, config.top_p, config.max_tokens, stop=())
    except ValueError as err:
        raise cli.bad_flag("--temperature / --top-p / --max-tokens", str(err)) from None
    try:
        limits = SandboxLimits(timeout_s=config.program_timeout_s, memory_bytes=config.program_memory_mb * 1024**2)
    except ValueError as err:
        raise cli.bad_flag("--program-timeout-s / --program-memory-mb", str(err)) from None
    if (config.output_dir / LOG_FILE).exists() and not (resuming or config.overwrite):
        message = (
            f"{config.output_dir} holds a run; pass --resume {config.output_dir} to continue it "
            "or --overwrite to start over"
        )
        raise cli.bad_flag("--output-dir", message)
    settings = DiscoverySettings(
        mode=config.mode,
        samples=config.samples,
        turns=config.turns,
        history_chars=config.history_chars,
        parallel=config.parallel,
        sampling=sampling,
        system_prompt=config.system_prompt,
        task=task,
        seed=config.seed,
        budget_s=config.budget_s,
        model=config.model,
        extra_body=extra_body,
        price_in_per_mtok=config.price_per_mtok_in,
        price_out_per_mtok=config.price_per_mtok_out,
    )
    return settings, KissingSettings(max_turns=settings.turns_each, reward="points", limits=limits)


def chat_model(config: DiscoverConfig, extra_body: dict[str, Any]) -> ChatModel:
    if config.backend == "openai":
        try:
            return OpenAIChatClient(
                config.base_url,
                config.model,
                config.api_key_env,
                config.request_timeout_s,
                config.max_retries,
                extra_body=extra_body,
            )
        except ValueError as err:
            raise cli.bad_flag("--base-url", str(err)) from None
    from alignment.models.loading import load_tokenizer
    from alignment.rollout.backends import make_rollout_engine

    device = {"device": config.device} if config.device else {}
    engine = make_rollout_engine(config.model, config.rollout_backend, **device, seed=config.seed)
    return LocalChatModel(engine, load_tokenizer(config.model))


def search_program(seconds: float, seed: int) -> tuple[str, str]:
    """The project's search code within `seconds`: a program listing its set, and its history."""
    from alignment.kissing.search import code_seeded_search, program_source

    points, note = code_seeded_search(DIMENSION, seconds, seed)
    header = f"Found by the project's search code (alignment.kissing.search), no language model:\n{note}"
    return program_source(points, header), note


def run(config: DiscoverConfig, resuming: bool) -> dict:
    settings, env_settings = check(config, resuming)
    config.output_dir.mkdir(parents=True, exist_ok=True)
    if config.overwrite and not resuming:
        for name in (LOG_FILE, BEST_PROGRAM, BEST_JSON, REPORT, PLOT):
            (config.output_dir / name).unlink(missing_ok=True)
    evaluate = lambda program: evaluate_program(program, env_settings.limits)  # noqa: E731
    try:
        discovery = Discovery(config.output_dir, settings, env_settings, evaluate, to_json(config))
    except ValueError as err:
        raise cli.bad_flag("--output-dir", str(err)) from None
    write_run_settings(config)
    try:
        if config.mode == "search":
            reason = discovery.run_search(lambda seconds: search_program(seconds, config.seed), evaluate)
        else:
            due = discovery.next_conversation() is not None and discovery.remaining_s() > 0
            reason = discovery.run(chat_model(config, settings.extra_body) if due else None)
    except ChatError as err:
        discovery.stop(f"the endpoint failed: {err}")
        raise typer.BadParameter(
            f"{err} (the log is kept; continue with --resume {config.output_dir})", param_hint="'--base-url'"
        ) from None
    finally:
        if discovery.sessions[-1]["stopped"] is None:  # interrupted (SIGTERM, Ctrl-C): say so in the log
            discovery.stop("interrupted")
        write_report(config.output_dir, discovery.log())
        points, program, source = discovery.best()
        if config.program_out is not None and program is not None:
            config.program_out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(config.program_out, program)
    elapsed = discovery.sessions[-1]["ended_s"]
    summary = {
        "best_points": points,
        "best_source": source or None,
        "model_turns": len(discovery.turns),
        "usage": discovery.usage(),
        "elapsed_s": elapsed,
        "budget_s": config.budget_s if math.isfinite(config.budget_s) else None,
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
    "Kissing configurations in dimension 11: a language model refines programs with the evaluator's verdicts.",
)

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still writes the report (finally blocks run)
    app()
