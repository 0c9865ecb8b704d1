"""The discovery modes against a local OpenAI-compatible endpoint that answers by rule and records every request
body exactly as received: refinement keeps the history, feeds back the exact error and asks for more vectors after a
valid set; best-of-N samples are independent; hybrids continue the right conversation; extra fields go through;
reasoning is logged and never sent back; tokens and cost per turn; resume; the one time budget; the script's flags
(checked before any model loads); and the script end to end against the project's server with a real model."""

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from alignment.kissing.discovery import Discovery, DiscoverySettings, trim_history
from alignment.kissing.environment import (
    FAILED_PROMPT,
    HANDOUT_PROMPT,
    NO_PROGRAM_PROMPT,
    VALID_PROMPT,
    KissingSettings,
)
from alignment.kissing.llm_client import ChatReply, LocalChatModel, OpenAIChatClient, TokenUsage
from alignment.kissing.openai_server import OpenAIServer
from alignment.kissing.sandbox import SandboxLimits
from alignment.models.loading import SMOLLM2, load_tokenizer
from alignment.rollout.backends import make_rollout_engine
from alignment.rollout.interface import SamplingConfig
from scripts import discover_kissing

LIMITS = SandboxLimits(timeout_s=10.0, memory_bytes=1024**3)
ENV = KissingSettings(reward="points", limits=LIMITS)
SAMPLING = SamplingConfig(temperature=0.6, max_tokens=32768, stop=())
THINKING = {"chat_template_kwargs": {"enable_thinking": True}}
TOO_CLOSE = "```python\npoints = [[6, 2] + [0] * 9, [0, 2] + [0] * 9]\n```"  # squared distance 36, norms 40 and 4


def axes(n: int) -> str:
    """A reply with a valid program of n points (+-2 e_i, n <= 22)."""
    rows = "[[2 * s if k == i else 0 for k in range(11)] for i in range(11) for s in (1, -1)]"
    return f"```python\npoints = {rows}[:{n}]\n```"


class FakeEndpoint:
    """POST /v1/chat/completions answered by `rule(body, index)` -> (content, reasoning_content or None); every
    body is kept as received. Usage: 100 prompt, 50 completion of which 20 reasoning tokens."""

    def __init__(self, rule: Callable[[dict[str, Any], int], tuple[str, str | None]]) -> None:
        self.bodies: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.bodies.append(body)
                content, reasoning = rule(body, len(endpoint.bodies) - 1)
                message = {"role": "assistant", "content": content}
                if reasoning is not None:
                    message["reasoning_content"] = reasoning
                answer = {
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {
                        "prompt_tokens": 100,
                        "completion_tokens": 50,
                        "completion_tokens_details": {"reasoning_tokens": 20},
                    },
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> "FakeEndpoint":
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def discovery(tmp_path: Path, mode: str, **settings: Any) -> Discovery:
    s = DiscoverySettings(mode=mode, sampling=SAMPLING, model="Qwen/Qwen3-32B", **settings)
    return Discovery(tmp_path, s, ENV)


def client(endpoint: FakeEndpoint, extra_body: dict[str, Any] | None = None) -> OpenAIChatClient:
    return OpenAIChatClient(endpoint.base_url, "Qwen/Qwen3-32B", api_key_env="NO_SUCH_KEY", extra_body=extra_body)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def test_refine_keeps_the_history_feeds_back_the_exact_error_and_asks_for_more(tmp_path):
    answers = [TOO_CLOSE, "Fixed:\n" + axes(2), "More:\n" + axes(4)]
    with FakeEndpoint(lambda body, i: (answers[i], f"private thoughts {i}")) as endpoint:
        run = discovery(tmp_path, "refine", turns=3, extra_body=THINKING, price_in_per_mtok=1.0, price_out_per_mtok=2.0)
        assert run.run(client(endpoint, THINKING)) == "all 3 model turns of refine done"
    failed = FAILED_PROMPT.format(error="Minimum squared distance 36 < maximum squared norm 40")
    sent = [body["messages"] for body in endpoint.bodies]
    assert sent[0] == [user(HANDOUT_PROMPT)]
    assert sent[1] == [user(HANDOUT_PROMPT), assistant(answers[0]), user(failed)]
    assert sent[2] == sent[1] + [assistant(answers[1]), user(VALID_PROMPT.format(score=2))]
    assert not any("private thoughts" in json.dumps(body) for body in endpoint.bodies)  # reasoning never sent back
    for i, body in enumerate(endpoint.bodies):
        assert body["chat_template_kwargs"] == {"enable_thinking": True} and body["max_tokens"] == 32768
        assert body["model"] == "Qwen/Qwen3-32B" and body["seed"] == i and body["temperature"] == 0.6
    log = json.loads((tmp_path / "conversation_log.json").read_text())
    turns = log["turns"]
    assert [t["points"] for t in turns] == [0, 2, 4] and [t["reasoning"] for t in turns] == [
        "private thoughts 0",
        "private thoughts 1",
        "private thoughts 2",
    ]
    assert turns[2]["request"]["messages"] == sent[2] and turns[2]["request"]["chat_template_kwargs"]
    assert turns[0]["tokens"] == {"prompt": 100, "completion": 50, "reasoning": 20}
    assert turns[0]["cost_usd"] == pytest.approx((100 * 1.0 + 50 * 2.0) / 1e6)
    assert log["usage"]["cost_usd"] == pytest.approx(3 * 200 / 1e6) and log["usage"]["reasoning_tokens"] == 60
    assert log["best"] == {"points": 4, "source": "conversation 0, turn 3"}
    assert (tmp_path / "program.py").read_text() == turns[2]["program"]


def test_best_of_n_samples_are_independent_and_the_verifier_selects(tmp_path):
    answers = [axes(2), "No idea.", axes(3)]
    with FakeEndpoint(lambda body, i: (f"<think>plan {i}</think>\n{answers[i]}", None)) as endpoint:
        run = discovery(tmp_path, "best_of_n", samples=3)
        run.run(client(endpoint))
    assert [body["messages"] for body in endpoint.bodies] == [[user(HANDOUT_PROMPT)]] * 3  # none sees another
    assert [body["seed"] for body in endpoint.bodies] == [0, 1, 2]

    def slow(body: dict[str, Any], i: int) -> tuple[str, None]:
        time.sleep(0.5)
        return f"sample with seed {body['seed']}", None

    with FakeEndpoint(slow) as endpoint:  # --parallel: the N samples in flight together, logged in order
        began = time.monotonic()
        discovery(tmp_path / "parallel", "best_of_n", samples=3, parallel=3).run(client(endpoint))
        assert time.monotonic() - began < 1.4
    assert sorted(body["seed"] for body in endpoint.bodies) == [0, 1, 2]
    together = json.loads((tmp_path / "parallel" / "conversation_log.json").read_text())["turns"]
    assert [(t["conversation"], t["answer"]) for t in together] == [(i, f"sample with seed {i}") for i in range(3)]
    log = json.loads((tmp_path / "conversation_log.json").read_text())
    assert [t["conversation"] for t in log["turns"]] == [0, 1, 2] and log["turns"][0]["reasoning"] == "plan 0"
    assert log["turns"][1]["feedback"] == NO_PROGRAM_PROMPT
    assert log["best"] == {"points": 3, "source": "conversation 2, turn 1"}


def test_best_of_n_refine_continues_the_best_sample_and_chains_stay_apart(tmp_path):
    answers = [axes(2), axes(3), "Still thinking."]
    with FakeEndpoint(lambda body, i: (answers[i], None)) as endpoint:
        discovery(tmp_path / "hybrid", "best_of_n_refine", samples=2, turns=2).run(client(endpoint))
    sent = [body["messages"] for body in endpoint.bodies]
    assert sent[:2] == [[user(HANDOUT_PROMPT)]] * 2
    assert sent[2] == [user(HANDOUT_PROMPT), assistant(axes(3)), user(VALID_PROMPT.format(score=3))]

    with FakeEndpoint(lambda body, i: (f"chain answer {i}", None)) as endpoint:  # no programs: no sandbox runs
        discovery(tmp_path / "chains", "refine_chains", samples=2, turns=2).run(client(endpoint))
    sent = [body["messages"] for body in endpoint.bodies]
    assert len(sent) == 4 and sent[0] == sent[1] == [user(HANDOUT_PROMPT)]
    assert sent[2] == [user(HANDOUT_PROMPT), assistant("chain answer 0"), user(NO_PROGRAM_PROMPT)]
    assert sent[3] == [user(HANDOUT_PROMPT), assistant("chain answer 1"), user(NO_PROGRAM_PROMPT)]


def test_history_is_trimmed_oldest_first_and_the_latest_turn_always_stays():
    past = [("a" * 40, "f" * 10), ("b" * 40, "g" * 10), ("c" * 40, "h" * 10)]
    messages, trimmed = trim_history("task", past, max_chars=110)
    assert trimmed == 1 and [m["content"][0] for m in messages] == ["t", "b", "g", "c", "h"]
    messages, trimmed = trim_history("task", past, max_chars=0)
    assert trimmed == 2 and [m["content"][0] for m in messages] == ["t", "c", "h"]


class Slow:
    """A chat model whose every reply takes `delay_s`."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.usage = TokenUsage()

    def chat(self, messages, sampling) -> ChatReply:
        time.sleep(self.delay_s)
        return ChatReply("no program", 10, 2, "stop")


def test_resume_continues_the_conversation_and_the_budget_abandons_a_late_reply(tmp_path):
    run = discovery(tmp_path, "refine", turns=3)
    run.step(Slow(0.0), [0])
    run.stop("stopped after one turn")
    resumed = discovery(tmp_path, "refine", turns=3, budget_s=run.elapsed_s() + 0.5)
    assert resumed.envs[0].turn == 1 and resumed.messages(0)[0][-1] == user(NO_PROGRAM_PROMPT)
    began = time.monotonic()
    reason = resumed.run(Slow(5.0))
    assert time.monotonic() - began < 2.0 and "ran out while waiting for 1 model turn(s)" in reason
    log = json.loads((tmp_path / "conversation_log.json").read_text())
    assert [t["answer"] for t in log["turns"]] == ["no program", None] and len(log["sessions"]) == 2


runner = CliRunner()


def flat(output: str) -> str:
    """The error text without rich's box drawing and line wrapping."""
    return " ".join(output.replace("│", " ").replace("╭", " ").replace("╰", " ").replace("─", " ").split())


def test_script_passes_extra_fields_logs_cost_resumes_and_refuses_bad_flags(tmp_path):
    out = tmp_path / "run"
    with FakeEndpoint(lambda body, i: (f"answer {i}", "thoughts")) as endpoint:
        args = ["--backend", "openai", "--base-url", endpoint.base_url, "--model", "Qwen/Qwen3-32B", "--mode"]
        args += ["baseline", "--extra-body", '{"enable_thinking": true, "top_k": 20}', "--output-dir", str(out)]
        args += ["--price-per-mtok-in", "0.5", "--price-per-mtok-out", "1.5"]
        first = runner.invoke(discover_kissing.app, args)
        assert first.exit_code == 0, first.output
        again = runner.invoke(discover_kissing.app, ["--resume", str(out)])  # nothing left: no request
        assert again.exit_code == 0, again.output
    assert len(endpoint.bodies) == 1
    body = endpoint.bodies[0]
    assert body["messages"] == [user(HANDOUT_PROMPT)] and body["max_tokens"] == discover_kissing.THINKING_MAX_TOKENS
    assert body["enable_thinking"] is True and body["top_k"] == 20
    summary = json.loads(first.output[first.output.index("{") :])
    assert summary["usage"]["cost_usd"] == pytest.approx((100 * 0.5 + 50 * 1.5) / 1e6)
    report = (out / "report.md").read_text()
    assert [line for line in report.splitlines() if line.startswith("## ")] == [
        "## Methodology",
        "## Process",
        "## Final result",
        "## Reflection",
    ]
    assert "simple prompting: the handout's prompt, one turn" in report and "595 <= tau_11 <= 870" in report

    nothing = tmp_path / "nothing"
    for flags, named in (
        (["--extra-body", "{enable_thinking: true}"], "--extra-body"),
        (["--extra-body", "[1]"], "--extra-body"),
        (["--backend", "local", "--extra-body", '{"top_k": 20}'], "--extra-body"),
        (["--samples", "0"], "--samples"),
        (["--turns", "0"], "--turns"),
        (["--parallel", "2"], "--parallel"),
        (["--price-per-mtok-in", "-1"], "--price-per-mtok-in"),
        (["--start-program", str(tmp_path / "missing.py")], "--start-program"),
        (["--mode", "greedy"], "--mode"),
        (["--budget-s", "0"], "--budget-s"),
        (["--max-tokens", "0"], "--max-tokens"),
    ):
        result = runner.invoke(discover_kissing.app, ["--backend", "local", *flags, "--output-dir", str(nothing)])
        assert result.exit_code != 0 and named in flat(result.output) and not nothing.exists(), (flags, result.output)
    refused = runner.invoke(discover_kissing.app, args)
    assert refused.exit_code != 0 and f"holds a run; pass --resume {out}" in flat(refused.output)


def test_search_mode_runs_the_projects_search_code_without_a_model(tmp_path):
    out = tmp_path / "search"
    result = runner.invoke(discover_kissing.app, ["--mode", "search", "--budget-s", "1", "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    log = json.loads((out / "conversation_log.json").read_text())
    assert log["turns"] == [] and log["search"]["points"] >= 566 and log["best"]["source"] == "the search code"
    assert "Verified: dimension=11" in log["search"]["verdict"]["message"]


@pytest.fixture(scope="module")
def tiny_server(tiny_model_dir, tokenizer):
    """The project's OpenAI-compatible server on 127.0.0.1 with a tiny random Llama (SmolLM2's tokenizer) behind it."""
    engine = make_rollout_engine(str(tiny_model_dir), "hf", device="cpu")
    with OpenAIServer(LocalChatModel(engine, tokenizer), "tiny") as server:
        yield server


def refine_run(server: OpenAIServer, model: str, tmp_path: Path, max_tokens: int) -> dict:
    """Two refinement turns through the script, the second after a resume, against a real model behind the server."""
    out = tmp_path / "run"
    args = ["--backend", "openai", "--base-url", server.base_url, "--model", model, "--mode", "refine"]
    args += ["--turns", "2", "--max-tokens", str(max_tokens), "--output-dir", str(out)]
    first = runner.invoke(discover_kissing.app, args + ["--budget-s", "0.001"])  # spent before its first turn
    assert first.exit_code == 0, first.output
    resumed = runner.invoke(discover_kissing.app, ["--resume", str(out), "--budget-s", "3600"])
    assert resumed.exit_code == 0, resumed.output
    log = json.loads((out / "conversation_log.json").read_text())
    assert [s["stopped"] for s in log["sessions"]][-1] == "all 2 model turns of refine done"
    first_turn, second_turn = [t for t in log["turns"] if t["answer"] is not None]
    assert second_turn["request"]["messages"][:2] == [user(HANDOUT_PROMPT), assistant(first_turn["answer"])]
    assert 1 <= second_turn["tokens"]["completion"] <= max_tokens and second_turn["tokens"]["prompt"] > 100
    return log


def test_discover_script_refines_with_a_model_behind_the_projects_server(tiny_server, tmp_path):
    refine_run(tiny_server, "tiny", tmp_path, max_tokens=8)


@pytest.mark.slow
def test_discover_script_with_the_packaged_smollm2_behind_the_server(tmp_path):
    """Real turns of SmolLM2-135M-Instruct: 20-60 s each on 2 CPU cores under load."""
    engine = make_rollout_engine(SMOLLM2, "hf", device="cpu")
    with OpenAIServer(LocalChatModel(engine, load_tokenizer(SMOLLM2)), SMOLLM2) as server:
        log = refine_run(server, SMOLLM2, tmp_path, max_tokens=32)
    assert all(len(t["answer"].split()) >= 5 for t in log["turns"])  # English or code from a real model, not noise
