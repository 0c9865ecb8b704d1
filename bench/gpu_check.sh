#!/usr/bin/env bash
# The check for a lent GPU: the `-m gpu` tests, then the learner's and the rollouts' benches, one JSON line per figure
# on stdout and nothing else. Its first line says which kernels and paths the probe chose.
#
#   bash bench/gpu_check.sh           # one CUDA GPU: Qwen2.5-Math-1.5B's shape, random weights, within 330 s
#   bash bench/gpu_check.sh --tiny    # the same steps on the CPU at toy sizes (`pytest -m slow` runs it)
#
# Needs torch (and the Triton its Linux builds bring), transformers, peft and pytest: no vLLM, Ray, datasets, network
# or weights (random weights of real shapes, a synthetic tokenizer). It runs from the repository root with
# PYTHONPATH=. under $PYTHON (default python3).
# The steps share GPU_CHECK_SECONDS (default 330). The probe and the goals' steps come first, and their caps fit the
# budget with room (tests/test_gpu_check.py checks it); then the steps that explain the goals' figures, each with the
# smaller of its cap and the time left. Each step ends with a JSON line ({"figure": "gpu_check.step", "status": ...}):
#   ok; not run (the check's time was spent); cut short (stopped at the time left, below its own cap); out of time
#   (at its own cap); killed by SIGKILL before its time (out of host memory: the OOM killer); failed (out of GPU
#   memory, or an exit status: see NAME.log).
# A step is stopped with SIGINT at its cap (SIGKILL 15 s later), so that pytest writes its report and a bench its
# figures. The exit status is 1 if a goal's or an explaining step failed, ran out of its own time or was killed; a step
# not run or cut short for the check's time, and a peer's number (transformers' generate) whatever becomes of it, do
# not fail the check. Each step's stderr, pytest's output and its JUnit XML go to GPU_CHECK_LOGS (default:
# $OUT/gpu_check when $OUT is set, else a new temporary folder).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1  # a step cut off by its time keeps the figures it printed
PYTHON="${PYTHON:-python3}"
TINY=0
case "${1:-}" in
  --tiny) TINY=1 ;;
  "") ;;
  *) echo "usage: bash bench/gpu_check.sh [--tiny]" >&2; exit 2 ;;
esac
if [[ -n "${GPU_CHECK_LOGS:-}" ]]; then LOGS="$GPU_CHECK_LOGS"
elif [[ -n "${OUT:-}" ]]; then LOGS="$OUT/gpu_check"
else LOGS="$(mktemp -d)"
fi
mkdir -p "$LOGS"
# GPU_CHECK_SCALE multiplies the budget and every cap alike (the test suite's --tiny run, on a loaded CPU, takes 4)
SCALE="${GPU_CHECK_SCALE:-1}"
BUDGET=$(("${GPU_CHECK_SECONDS:-330}" * SCALE))
PROBE=$((30 * SCALE))  # the probe's cap: it compiles and checks each kernel in three dtypes
START=$SECONDS
FAILED=0

# `step NAME KIND CAP COMMAND...`: runs COMMAND under the smaller of CAP and the time left; its stdout (JSON lines)
# passes through, its stderr goes to LOGS/NAME.log; then one JSON line saying how the step ended. KIND: goal (what the
# check is for), explain (what explains the goals' figures) or peer (another library's number: never fails the check).
step() {
  local name=$1 kind=$2 own=$(($3 * SCALE)) cap left status rc began failed=0
  shift 3
  left=$((BUDGET - (SECONDS - START)))
  cap=$own
  ((cap > left)) && cap=$left
  began=$SECONDS
  if ((cap < 5)); then
    status="not run: the check's time was spent"
  else
    timeout -s INT --kill-after=15 "$cap" "$@" 2>"$LOGS/$name.log"
    rc=$?
    case $rc in
      0) status=ok ;;
      124)
        if ((cap < own)); then
          status="cut short after $cap s: the check's time was spent"
        else
          status="out of time after $cap s"
          failed=1
        fi ;;
      137)
        failed=1
        if ((SECONDS - began < cap)); then
          status="killed by SIGKILL after $((SECONDS - began)) s, before its time: out of host memory (the OOM killer)"
        else
          status="out of time after $cap s, then killed: it did not stop at SIGINT"
        fi ;;
      *)
        failed=1
        # (pytest's report, in NAME.out, holds its tests' errors)
        if grep -qsE "OutOfMemoryError|out of memory" "$LOGS/$name.log" "$LOGS/$name.out"; then
          status="failed: out of GPU memory (see $name.log)"
        else
          status="failed with exit status $rc (see $name.log)"
        fi ;;
    esac
  fi
  if [[ $kind == peer ]] && ((failed)); then
    status="$status; a peer's number, which does not fail the check"
    failed=0
  fi
  ((failed)) && FAILED=1
  printf '{"figure": "gpu_check.step", "value": %d, "unit": "s", "step": "%s", "kind": "%s", "status": "%s"}\n' \
    "$((SECONDS - began))" "$name" "$kind" "$status"
}

if ((TINY)); then
  LEARNER=(--tiny --device cpu)
  DECODE=(--tiny --device cpu)
else
  LEARNER=()
  DECODE=(--rows 256)  # the goal's batch, 256 x 512 (64 rows cost a minute more at the eager loop's speed)
fi

# the first line: the device, and what the probe chose there as a run's first use would (each Triton kernel checked
# against its torch path in three dtypes, the decode path, packed rows, fused AdamW)
PROBE_LINE=$(timeout -s INT --kill-after=10 "$PROBE" "$PYTHON" - 2>"$LOGS/probe.log" <<'EOF'
import json, platform, warnings
from importlib.metadata import version

import torch

from alignment.rollout.decode_choice import decode_path

cuda = torch.cuda.is_available()
device = torch.device("cuda:0" if cuda else "cpu")
line = {
    "figure": "gpu_check.device", "value": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
    "unit": "device", "torch": torch.__version__, "transformers": version("transformers"), "peft": version("peft"),
    "cuda": torch.version.cuda if cuda else None, "decode": decode_path("auto", device), "packed_rows": True,
    "fused_adamw": device.type in ("cpu", "cuda"),
}
if cuda:
    from alignment.kernels.support import kernel_serves
    from alignment.models.chunked_head import check_head_kernels
    from alignment.rollout.decoding import check_sampling_kernel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line["kernels"] = {
            f"{name} {str(dtype).removeprefix('torch.')}": "triton" if kernel_serves(name, device, dtype, check) else "torch"
            for name, check in (("sampling", check_sampling_kernel), ("head", check_head_kernels))
            for dtype in (torch.bfloat16, torch.float16, torch.float32)
        }
    line["kernel_warnings"] = [str(w.message) for w in caught]
else:
    line["kernels"] = "torch: Triton's kernels need a CUDA GPU"
print(json.dumps(line))
EOF
)
if [[ -z "$PROBE_LINE" ]]; then
  PROBE_LINE='{"figure": "gpu_check.device", "value": null, "unit": "device", "reason": "the probe failed or ran out of time (probe.log)"}'
fi
echo "$PROBE_LINE"

# the goals: the tests, the learner's MFU per precision, the static paths against their bounds beside transformers'
# generate, the plan against the peak. pytest's report goes to LOGS/tests.out, stdout staying JSON
step tests goal 70 bash -c '"$0" -m pytest -m gpu -q -p no:cacheprovider --junitxml "$1/tests.xml" \
  tests/test_gpu_learner.py tests/test_gpu_rollout.py >"$1/tests.out"' "$PYTHON" "$LOGS"
"$PYTHON" - "$LOGS/tests.xml" <<'EOF'
import json, sys
from pathlib import Path
from xml.etree import ElementTree
path = Path(sys.argv[1])
counts = {"passed": 0, "failed": 0, "skipped": 0, "interrupted": 0}
failed = []
if path.exists():
    for case in ElementTree.parse(path).iter("testcase"):
        if case.get("name") is None:  # the test SIGINT stopped, which pytest reports without a name
            counts["interrupted"] += 1
            continue
        outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        counts["skipped" if outcome == "skipped" else "failed" if outcome != "passed" else "passed"] += 1
        if outcome in ("failure", "error"):
            failed.append(case.get("name"))
line = {"figure": "gpu_check.tests", "value": counts["passed"], "unit": "tests passed", **counts, "failed_tests": failed}
if not path.exists():
    line.update(value=None, reason="pytest wrote no report (tests.out says why)")
print(json.dumps(line))
EOF
step precision goal 60 "$PYTHON" bench/precision_gpu.py --json "${LEARNER[@]}"
step hf_decode goal 45 "$PYTHON" bench/hf_generation_throughput.py --json "${DECODE[@]}" --paths static
step hf_generate peer 35 "$PYTHON" bench/hf_generation_throughput.py --json "${DECODE[@]}" --paths generate
step lm_sampler goal 35 "$PYTHON" bench/lm_sampler.py --json "${DECODE[@]}" --paths static --paths eager
step memory_plan goal 25 "$PYTHON" bench/memory_plan_gpu.py --json "${LEARNER[@]}"
# then what explains them, with the time left; a step cut off by its time keeps the figures it printed
step sampling explain 20 "$PYTHON" bench/sampling.py --json "${LEARNER[@]}"
step chunked_head explain 30 "$PYTHON" bench/chunked_head.py --json "${LEARNER[@]}"
# a GRPO microbatch: its rows continue one prompt, which the learner scores once
step precision_shared explain 30 "$PYTHON" bench/precision_gpu.py --json --runs bf16-mixed --shared-prompts "${LEARNER[@]}"
# the eager loop the baseline measured (a minute at 256 x 512 at its speed)
step hf_eager explain 60 "$PYTHON" bench/hf_generation_throughput.py --json "${DECODE[@]}" --paths eager
# the compiled generate takes up to two --compile-timeout's (its first call compiles, its second is timed), after
# some 30 s of imports and building the model; past them the bench reports it as not finished
LEFT=$(((BUDGET - (SECONDS - START) - 5) / SCALE))
step hf_generate_compiled peer "$LEFT" "$PYTHON" bench/hf_generation_throughput.py --json "${DECODE[@]}" \
  --paths generate_compiled --compile-timeout "$(((LEFT > 40 ? LEFT * SCALE - 30 : 10) / 2))"
exit $FAILED
