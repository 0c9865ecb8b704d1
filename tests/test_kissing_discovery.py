"""The discovery loop: program extraction, parent sampling, prompts that carry the verifier's exact message,
atomic best program, resume, and the script end to end against a real OpenAI-compatible server."""

import json
import random
from pathlib import Path

from typer.testing import CliRunner

from alignment.kissing_discovery import Candidate, Discovery, DiscoverySettings, extract_program, sample_parent
from alignment.kissing_verifier import evaluate_program
from alignment.llm_client import ChatReply, LocalChatModel, TokenUsage
from alignment.openai_server import OpenAIServer
from alignment.rollout_backends import make_rollout_engine
from alignment.sandbox import SandboxLimits
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
    """A chat model that answers from a list and records every prompt it was sent."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict]] = []
        self.usage = TokenUsage()

    def chat(self, messages, sampling) -> ChatReply:
        self.seen.append(messages)
        reply = ChatReply(self.replies.pop(0), 10, 5, "stop")
        self.usage.add(reply)
        return reply


def discovery(tmp_path: Path, mode: str, iterations: int) -> Discovery:
    settings = DiscoverySettings(mode=mode, iterations=iterations)  # type: ignore[arg-type]
    return Discovery(tmp_path, settings, lambda program: evaluate_program(program, LIMITS))


def test_refine_feeds_back_the_verifiers_exact_message(tmp_path):
    run = discovery(tmp_path, "refine", 3)
    run.add_program("seed", "points = [[1] * 11]\n")
    chat = Scripted(["```python\npoints = [[1.5] + [0] * 10]\n```", "no code, sorry", f"```python\n{AXES}```"])
    best = run.run(chat)
    assert "point 0, coordinate 0 is 1.5 (float); coordinates must be integers" in chat.seen[1][-1]["content"]
    assert run.candidates[2].metrics["message"] == "no program found in the reply"
    assert chat.seen[2] == chat.seen[1][:1] + [chat.seen[2][-1]] and "1.5" in chat.seen[2][-1]["content"]
    assert best is not None and best.id == 3 and best.score == 22.0
    assert (tmp_path / "best_program.py").read_text() == AXES
    assert json.loads((tmp_path / "best.json").read_text())["score"] == 22.0
    log = json.loads((tmp_path / "conversation_log.json").read_text())
    assert [row["source"] for row in log] == ["seed", "llm", "llm", "llm"]
    assert log[1]["prompt"] == chat.seen[0] and log[1]["reply"].startswith("```python")


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


runner = CliRunner()


def test_discover_script_end_to_end_against_a_real_server(tiny_model_dir, tokenizer, tmp_path):
    out = tmp_path / "run"
    engine = make_rollout_engine(str(tiny_model_dir), "hf", device="cpu")
    with OpenAIServer(LocalChatModel(engine, tokenizer), "tiny") as server:
        args = ["--backend", "openai", "--base-url", server.base_url, "--model", "tiny", "--mode", "evolve",
                "--max-tokens", "8", "--prompt-program-chars", "300", "--search-budget-s", "2",
                "--program-timeout-s", "20", "--output-dir", str(out)]
        first = runner.invoke(discover_kissing.app, args + ["--iterations", "2"])
        assert first.exit_code == 0, first.output
        refused = runner.invoke(discover_kissing.app, args + ["--iterations", "3"])
        assert refused.exit_code != 0 and f"holds a run; pass --resume {out} to continue it" in flat(refused.output)
        changed = runner.invoke(discover_kissing.app, ["--resume", str(out), "--mode", "refine"])
        assert changed.exit_code != 0 and "--mode was 'evolve', now 'refine'" in flat(changed.output)
        resumed = runner.invoke(discover_kissing.app, ["--resume", str(out), "--iterations", "3"])
        assert resumed.exit_code == 0, resumed.output
    log = json.loads((out / "conversation_log.json").read_text())
    assert [row["source"] for row in log] == ["seed", "search-code", "llm", "llm", "llm"]
    assert log[0]["score"] == 220.0 and log[1]["score"] >= 566.0
    for row in log[2:]:
        assert row["prompt"][-1]["role"] == "user" and isinstance(row["reply"], str)
        assert row["tokens"]["prompt"] > 50 and 1 <= row["tokens"]["completion"] <= 8
    best = json.loads((out / "best.json").read_text())
    assert best["source"] == "search-code" and best["score"] == log[1]["score"]
    assert evaluate_program((out / "best_program.py").read_text(), LIMITS).score == best["score"]
    report = (out / "report.md").read_text()
    assert f"**Best: {best['score']:g}**" in report and "| search-code | 1 | 1 |" in report and "| llm | 3 |" in report
    assert (out / "score_over_time.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads(resumed.output[resumed.output.index("{"):])["model_steps"] == 3
    assert json.loads((out / "settings.json").read_text())["iterations"] == 3


def flat(output: str) -> str:
    """The error text without rich's box drawing and line wrapping."""
    return " ".join(output.replace("│", " ").replace("╭", " ").replace("╰", " ").replace("─", " ").split())


def test_script_refuses_bad_flags_before_writing(tmp_path):
    out = tmp_path / "nothing"
    result = runner.invoke(discover_kissing.app, ["--iterations", "-1", "--output-dir", str(out)])
    assert result.exit_code != 0 and "--iterations" in result.output and not out.exists()
    result = runner.invoke(discover_kissing.app, ["--seed-programs", str(tmp_path / "missing.py"), "--output-dir", str(out)])
    assert result.exit_code != 0 and "--seed-programs" in result.output and not out.exists()
    result = runner.invoke(discover_kissing.app, ["--resume", str(out)])
    assert result.exit_code != 0 and "is not a run folder" in flat(result.output)
    result = runner.invoke(discover_kissing.app, ["--mode", "greedy", "--output-dir", str(out)])
    assert result.exit_code != 0 and "--mode" in result.output
