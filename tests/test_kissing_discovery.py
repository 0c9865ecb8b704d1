"""The discovery loop: program extraction, parent sampling, prompts that carry the verifier's exact message,
atomic best program, resume, the one time budget, and the script end to end against the project's
OpenAI-compatible server with the packaged SmolLM2-135M behind it (the handout's three deliverables)."""

import json
import random
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alignment.kissing.discovery import Candidate, Discovery, DiscoverySettings, extract_program, sample_parent
from alignment.kissing.llm_client import ChatReply, LocalChatModel, TokenUsage
from alignment.kissing.openai_server import OpenAIServer
from alignment.kissing.report import write_report
from alignment.kissing.sandbox import SandboxLimits
from alignment.kissing.verifier import evaluate_program, verify_points
from alignment.models.loading import SMOLLM2, load_tokenizer
from alignment.rollout.backends import make_rollout_engine
from scripts import discover_kissing

LIMITS = SandboxLimits(timeout_s=10.0, memory_bytes=1024**3)
AXES = "points = [[2 * s if k == i else 0 for k in range(11)] for i in range(11) for s in (1, -1)]\n"


def test_extract_program_from_typical_replies():
    assert extract_program(f"Here:\n```python\n{AXES}```\nDone.") == AXES
    two = f"```python\nimport math\n```\ntext\n```python\n{AXES}```"
    assert extract_program(two) == AXES  # the block that defines points
    assert extract_program(f"<think>maybe ```python\npoints = []\n```</think>\n```py\n{AXES}```") == AXES
    assert extract_program(f"```python\n{AXES}") == AXES  # cut off before the closing fence
    assert extract_program(AXES) == AXES  # bare code
    assert extract_program("points = [[1, 2] +\n") is None  # bare but broken
    assert extract_program("I cannot help with that.") is None


def candidate(i: int, score: float) -> Candidate:
    return Candidate(i, "llm", "points = []\n", score, {}, 0.0)


def test_parents_are_drawn_by_score():
    pool = [candidate(0, 100.0), candidate(1, 90.0), candidate(2, 0.0)]
    assert sample_parent(pool, 0.0, random.Random(0)).id == 0
    rng = random.Random(0)
    counts = [0, 0, 0]
    for _ in range(4000):
        counts[sample_parent(pool, 10.0, rng).id] += 1
    # weights 1 : e^-1 : e^-10
    assert abs(counts[1] / counts[0] - 0.3679) < 0.05 and counts[2] <= 3


class Scripted:
    """A chat model that answers from a list (each reply after `delay_s`) and records every prompt it was sent."""

    def __init__(self, replies: list[str], delay_s: float = 0.0) -> None:
        self.replies = list(replies)
        self.delay_s = delay_s
        self.seen: list[list[dict]] = []
        self.usage = TokenUsage()

    def chat(self, messages, sampling) -> ChatReply:
        self.seen.append(messages)
        time.sleep(self.delay_s)
        reply = ChatReply(self.replies.pop(0), 10, 5, "stop")
        self.usage.add(reply)
        return reply


def discovery(tmp_path: Path, mode: str, iterations: int, budget_s: float = float("inf")) -> Discovery:
    settings = DiscoverySettings(mode=mode, iterations=iterations, budget_s=budget_s, model="scripted")  # type: ignore[arg-type]
    return Discovery(
        tmp_path,
        settings,
        lambda program: evaluate_program(program, LIMITS),
        {"mode": mode, "backend": "test", "model": "scripted", "iterations": iterations, "budget_s": budget_s},
    )


def test_refine_feeds_back_the_verifiers_exact_message(tmp_path):
    run = discovery(tmp_path, "refine", 3)
    run.add_program("seed", "points = [[1] * 11]\n")
    chat = Scripted(["```python\npoints = [[1.5] + [0] * 10]\n```", "no code, sorry", f"```python\n{AXES}```"])
    assert run.run(chat) == "all 3 model steps done"
    assert "point 0, coordinate 0 is 1.5 (float); coordinates must be integers" in chat.seen[1][-1]["content"]
    assert run.candidates[2].verdict["message"] == "no program found in the reply"
    assert chat.seen[2] == chat.seen[1][:1] + [chat.seen[2][-1]] and "1.5" in chat.seen[2][-1]["content"]
    best = run.best
    assert best is not None and best.id == 3 and best.score == 22.0
    assert (tmp_path / "program.py").read_text() == AXES
    assert json.loads((tmp_path / "best.json").read_text())["score"] == 22.0
    log = json.loads((tmp_path / "conversation_log.json").read_text())
    assert log["format"] == "kissing-discovery-log/2" and log["run"]["model"] == "scripted"
    assert log["sessions"][0]["stopped"] == "all 3 model steps done" and log["sessions"][0]["started_at"].endswith("Z")
    rows = log["candidates"]
    assert [row["source"] for row in rows] == ["seed", "llm", "llm", "llm"]
    assert rows[1]["request"]["messages"] == chat.seen[0] and rows[1]["request"]["model"] == "scripted"
    assert rows[1]["reply"].startswith("```python") and rows[1]["finish_reason"] == "stop"
    assert rows[1]["verdict"]["validity"] == 0.0 and rows[1]["verify_s"] > 0 and rows[1]["generate_s"] >= 0
    assert rows[2]["program"] is None and rows[2]["verify_s"] is None and rows[3]["verdict"]["score"] == 22.0


def test_evolve_shows_parent_and_inspirations_and_resume_keeps_the_database(tmp_path):
    run = discovery(tmp_path, "evolve", 1)
    run.add_program("seed", "points = [[1] * 11]\n")
    run.add_program("seed", AXES)
    chat = Scripted([f"```python\n{AXES}```"])
    run.run(chat)
    prompt = chat.seen[0][-1]["content"]
    assert "Improve this program:" in prompt and "Program 1 (score 22)" in prompt and "Program 0 (score 1)" in prompt
    again = discovery(tmp_path, "evolve", 2)  # a fresh process reading the same folder
    assert [c.score for c in again.candidates] == [1.0, 22.0, 22.0] and again.model_steps == 1
    again.run(Scripted(["```python\npoints = [[1] * 11, [2] * 11]\n```"]))
    assert len(again.candidates) == 4 and again.best.id == 1  # ties keep the earliest
    assert again.candidates[3].elapsed_s >= again.candidates[2].elapsed_s


def test_best_of_n_prompts_are_all_the_same(tmp_path):
    run = discovery(tmp_path, "best_of_n", 3)
    run.add_program("seed", AXES)
    chat = Scripted(["```python\npoints = [[1] * 11]\n```"] * 3)
    run.run(chat)
    assert chat.seen[0] == chat.seen[1] == chat.seen[2] and "A starting point" in chat.seen[0][-1]["content"]


def test_budget_abandons_a_reply_that_would_come_too_late(tmp_path):
    run = discovery(tmp_path, "refine", 5)
    run.add_program("seed", AXES)
    run.settings.budget_s = run.elapsed_s() + 1.0  # one second left once the seed is in
    began = time.monotonic()
    reason = run.run(Scripted([f"```python\n{AXES}```"] * 5, delay_s=3.0))
    assert time.monotonic() - began < 1.5  # the 3 s reply is not awaited
    assert reason.startswith(f"budget of {run.settings.budget_s:g} s ran out while waiting for model step 1")
    cut = run.candidates[-1]
    assert (cut.source, cut.reply, cut.program, cut.score) == ("llm", None, None, 0.0)
    assert cut.request is not None and "no reply within the run's budget" in cut.verdict["message"]
    assert json.loads((tmp_path / "conversation_log.json").read_text())["sessions"][-1]["stopped"] == reason


def test_budget_counts_across_resumes_and_stops_before_the_next_request(tmp_path):
    def slow_verifier(program: str):
        time.sleep(0.5)  # a verification under way may finish past the budget
        return verify_points([[2 * s if k == i else 0 for k in range(11)] for i in range(11) for s in (1, -1)])

    settings = DiscoverySettings(mode="refine", iterations=50, budget_s=1.2)
    run = Discovery(tmp_path, settings, slow_verifier)
    chat = Scripted([f"```python\n{AXES}```"] * 50)
    reason = run.run(chat)
    steps = run.model_steps
    assert 2 <= steps <= 3 and reason == f"budget of 1.2 s spent after {steps} of 50 model steps"
    assert 1.2 <= run.sessions[-1]["ended_s"] < 1.2 + 0.5 + 0.3  # one verification past the line at most
    again = Discovery(tmp_path, settings, slow_verifier)  # resumed: the clock continues, nothing is asked
    assert again.run(None).startswith("budget of 1.2 s spent") and again.model_steps == steps
    assert [s["stopped"] is not None for s in again.sessions] == [True, True] and len(chat.seen) == steps


def test_report_has_the_four_sections_and_says_what_did_not_work(tmp_path):
    run = discovery(tmp_path, "evolve", 2)
    run.add_program("seed", AXES, note="from a test")
    run.run(Scripted(["I would use the E8 lattice.", "```python\npoints = [[1] * 11, [1] * 11]\n```"]))
    report = write_report(tmp_path, run.log()).read_text()
    sections = [line for line in report.splitlines() if line.startswith("## ")]
    assert sections == ["## Methodology", "## Process", "## Final result", "## Reflection"]
    assert "**22 points** (candidate 0, from seed)" in report and "not reached: 438 (the best lattice)" in report
    assert "The model `scripted` wrote no valid program in 2 turns: 2 replies came back, 1 held a program" in report
    assert "Why the model's turns failed: no program in the reply (1); a repeated point (1)." in report
    assert "No model reply raised the best score" in report and "all 2 model steps done" in report


runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_server(tiny_model_dir, tokenizer):
    """The project's OpenAI-compatible server on 127.0.0.1 with a tiny random Llama (SmolLM2's tokenizer) behind it."""
    engine = make_rollout_engine(str(tiny_model_dir), "hf", device="cpu")
    with OpenAIServer(LocalChatModel(engine, tokenizer), "tiny") as server:
        yield server


def deliverables_run(server: OpenAIServer, model: str, tmp_path: Path, max_tokens: int, budget_s: int = 600) -> dict:
    """A run of 1 model turn, resumed for a 2nd, writing the handout's three deliverables; checks what any model
    must satisfy and returns the log."""
    out, program = tmp_path / "run", tmp_path / "deliverable" / "program.py"
    args = [
        "--backend",
        "openai",
        "--base-url",
        server.base_url,
        "--model",
        model,
        "--mode",
        "evolve",
        "--max-tokens",
        str(max_tokens),
        "--prompt-program-chars",
        "200",
        "--budget-s",
        str(budget_s),
        "--search-share",
        "0.003",
        "--program-timeout-s",
        "20",
        "--output-dir",
        str(out),
        "--program-out",
        str(program),
    ]
    first = runner.invoke(discover_kissing.app, args + ["--iterations", "1"])
    assert first.exit_code == 0, first.output
    refused = runner.invoke(discover_kissing.app, args + ["--iterations", "2"])
    assert refused.exit_code != 0 and f"holds a run; pass --resume {out} to continue it" in flat(refused.output)
    changed = runner.invoke(discover_kissing.app, ["--resume", str(out), "--mode", "refine"])
    assert changed.exit_code != 0 and "--mode was 'evolve', now 'refine'" in flat(changed.output)
    resumed = runner.invoke(discover_kissing.app, ["--resume", str(out), "--iterations", "2"])
    assert resumed.exit_code == 0, resumed.output
    log = json.loads((out / "conversation_log.json").read_text())
    assert isinstance(log, dict) and log["run"]["model"] == model and log["run"]["backend"] == "openai"
    assert [s["stopped"] for s in log["sessions"]] == ["all 1 model steps done", "all 2 model steps done"]
    rows = log["candidates"]
    assert [row["source"] for row in rows] == ["seed", "search-code", "llm", "llm"]
    assert rows[0]["score"] == 220.0 and rows[1]["score"] >= 566.0
    for row in rows[2:]:  # the model's turns, each with its request, reply, timings and verdict
        assert row["request"]["model"] == model and row["request"]["messages"][-1]["role"] == "user"
        assert row["request"]["max_tokens"] == max_tokens and isinstance(row["reply"], str)
        assert row["tokens"]["prompt"] > 200 and 1 <= row["tokens"]["completion"] <= max_tokens
        assert row["generate_s"] > 0 and row["verdict"]["message"] and row["elapsed_s"] > rows[1]["elapsed_s"]
        assert (row["program"] is None) == (row["verify_s"] is None)
    best = json.loads((out / "best.json").read_text())
    assert best["source"] == "search-code" and best["score"] == rows[1]["score"]
    assert (out / "program.py").read_text() == program.read_text() == rows[1]["program"]
    assert evaluate_program(program.read_text(), LIMITS).score == best["score"]
    report = (out / "report.md").read_text()
    assert [line for line in report.splitlines() if line.startswith("## ")] == [
        "## Methodology",
        "## Process",
        "## Final result",
        "## Reflection",
    ]
    assert f"**{best['score']:g} points** (candidate 1, from search-code)" in report and "| llm | 2 |" in report
    assert "The search code found the best program" in report and f"model `{model}`" in report
    assert (out / "score_over_time.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads(resumed.output[resumed.output.index("{") :])
    assert summary["model_steps"] == 2 and summary["stopped"] == "all 2 model steps done"
    assert json.loads((out / "settings.json").read_text())["iterations"] == 2
    log["report"] = report
    return log


def test_discover_script_writes_the_three_deliverables(tiny_server, tmp_path):
    log = deliverables_run(tiny_server, "tiny", tmp_path, max_tokens=8)
    assert "The model `tiny` wrote no valid program in 2 turns: 2 replies came back" in log["report"]


@pytest.mark.slow
def test_discover_script_with_the_packaged_smollm2_behind_the_server(tmp_path):
    """Real turns of SmolLM2-135M-Instruct: 20-60 s each on 2 CPU cores under a load of 10-20, 160 s and more at
    40, hence the hour of budget."""
    engine = make_rollout_engine(SMOLLM2, "hf", device="cpu")
    with OpenAIServer(LocalChatModel(engine, load_tokenizer(SMOLLM2)), SMOLLM2) as server:
        log = deliverables_run(server, SMOLLM2, tmp_path, max_tokens=32, budget_s=3600)
    replies = [row["reply"] for row in log["candidates"][2:]]
    assert all(len(reply.split()) >= 5 for reply in replies)  # English or code from a real model, not noise
    if not any(row["verdict"].get("validity") == 1.0 for row in log["candidates"][2:]):
        assert f"The model `{SMOLLM2}` wrote no valid program in 2 turns" in log["report"]


def test_discover_script_ends_within_its_budget(tiny_server, tmp_path):
    out = tmp_path / "run"
    began = time.monotonic()
    result = runner.invoke(
        discover_kissing.app,
        [
            "--backend",
            "openai",
            "--base-url",
            tiny_server.base_url,
            "--model",
            "tiny",
            "--iterations",
            "1000",
            "--max-tokens",
            "8",
            "--prompt-program-chars",
            "200",
            "--budget-s",
            "12",
            "--search-share",
            "0.15",
            "--program-timeout-s",
            "20",
            "--output-dir",
            str(out),
        ],
    )
    wall = time.monotonic() - began
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output[result.output.index("{") :])
    assert summary["stopped"].startswith("budget of 12 s") and 1 <= summary["model_steps"] < 1000
    assert summary["elapsed_s"] < 12 + 3 and wall < 12 + 8  # one verification past the line, and the report
    assert f"run ended after {summary['elapsed_s']:.1f} s of its 12 s budget: budget of 12 s" in result.output
    rows = json.loads((out / "conversation_log.json").read_text())["candidates"]
    assert rows[1]["source"] == "search-code" and rows[2]["source"] == "llm"


def flat(output: str) -> str:
    """The error text without rich's box drawing and line wrapping."""
    return " ".join(output.replace("│", " ").replace("╭", " ").replace("╰", " ").replace("─", " ").split())


def test_script_refuses_bad_flags_before_writing(tmp_path):
    out = tmp_path / "nothing"
    result = runner.invoke(discover_kissing.app, ["--iterations", "-1", "--output-dir", str(out)])
    assert result.exit_code != 0 and "--iterations" in result.output and not out.exists()
    result = runner.invoke(
        discover_kissing.app, ["--seed-programs", str(tmp_path / "missing.py"), "--output-dir", str(out)]
    )
    assert result.exit_code != 0 and "--seed-programs" in result.output and not out.exists()
    result = runner.invoke(discover_kissing.app, ["--resume", str(out)])
    assert result.exit_code != 0 and "is not a run folder" in flat(result.output)
    result = runner.invoke(discover_kissing.app, ["--mode", "greedy", "--output-dir", str(out)])
    assert result.exit_code != 0 and "--mode" in result.output
    for flag, value in (("--budget-s", "0"), ("--search-share", "1.5"), ("--program-out", str(tmp_path))):
        result = runner.invoke(discover_kissing.app, [flag, value, "--output-dir", str(out)])
        assert result.exit_code != 0 and flag in result.output and not out.exists()
