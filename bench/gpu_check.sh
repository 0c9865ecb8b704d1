#!/usr/bin/env bash
# The check for a lent GPU: the `-m gpu` tests, then the learner's and the rollouts' benches, one JSON line per figure
# on stdout and nothing else.
#
#   bash bench/gpu_check.sh           # one CUDA GPU: Qwen2.5-Math-1.5B's shape, random weights, within 6 minutes
#   bash bench/gpu_check.sh --tiny    # the same steps on the CPU at toy sizes (the test suite runs it)
#
# Needs torch (and the Triton its Linux builds bring), transformers, peft and pytest: no vLLM, Ray, datasets, network
# or weights (random weights of real shapes, a synthetic tokenizer). It runs from the repository root with
# PYTHONPATH=. under $PYTHON (default python3).
# The steps share GPU_CHECK_SECONDS (default 330): each gets the smaller of its own cap and the time left, and the
# peer number that may never finish (transformers' generate, compiled) goes last with whatever remains. A step that
# fails or runs out of time is reported ({"figure": "gpu_check.step", "status": ...}) and the next one still runs;
# the exit status is 1 if any step did not finish. Each step's stderr, pytest's output and its JUnit XML go to
# GPU_CHECK_LOGS (default: $OUT/gpu_check when $OUT is set, else a new temporary folder).
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
BUDGET="${GPU_CHECK_SECONDS:-330}"
START=$SECONDS
FAILED=0

# `step NAME CAP COMMAND...`: runs COMMAND under the smaller of CAP and the time left; its stdout (JSON lines) passes
# through, its stderr goes to LOGS/NAME.log; then one JSON line saying how the step ended.
step() {
  local name=$1 cap=$2 left status rc began
  shift 2
  left=$((BUDGET - (SECONDS - START)))
  ((cap > left)) && cap=$left
  if ((cap < 5)); then
    status="not run: the check's time was spent"
    rc=1
  else
    began=$SECONDS
    timeout --kill-after=10 "$cap" "$@" 2>"$LOGS/$name.log"
    rc=$?
    case $rc in
      0) status=ok ;;
      124 | 137) status="out of time after $cap s" ;;
      *) status="failed with exit status $rc (see $name.log)" ;;
    esac
  fi
  ((rc != 0)) && FAILED=1
  printf '{"figure": "gpu_check.step", "value": %d, "unit": "s", "step": "%s", "status": "%s"}\n' \
    "$((SECONDS - ${began:-$SECONDS}))" "$name" "$status"
}

if ((TINY)); then
  LEARNER=(--tiny --device cpu)
  DECODE=(--tiny --device cpu)
else
  LEARNER=()
  DECODE=(--rows 256)  # the goal's batch, 256 x 512 (64 rows cost a minute more at the eager loop's speed)
fi

"$PYTHON" - <<'EOF'
import json, platform
from importlib.metadata import version
import torch
cuda = torch.cuda.is_available()
print(json.dumps({
    "figure": "gpu_check.device", "value": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
    "unit": "device", "torch": torch.__version__, "transformers": version("transformers"), "peft": version("peft"),
    "cuda": torch.version.cuda if cuda else None,
}))
EOF

# pytest's report goes to LOGS/tests.out, stdout staying JSON
step tests 150 bash -c '"$0" -m pytest -m gpu -q -p no:cacheprovider --junitxml "$1/tests.xml" \
  tests/test_gpu_learner.py tests/test_gpu_rollout.py >"$1/tests.out"' "$PYTHON" "$LOGS"
"$PYTHON" - "$LOGS/tests.xml" <<'EOF'
import json, sys
from pathlib import Path
from xml.etree import ElementTree
path = Path(sys.argv[1])
counts = {"passed": 0, "failed": 0, "skipped": 0}
failed = []
if path.exists():
    for case in ElementTree.parse(path).iter("testcase"):
        outcome = next((c.tag for c in case if c.tag in ("failure", "error", "skipped")), "passed")
        counts["skipped" if outcome == "skipped" else "failed" if outcome != "passed" else "passed"] += 1
        if outcome in ("failure", "error"):
            failed.append(case.get("name"))
line = {"figure": "gpu_check.tests", "value": counts["passed"], "unit": "tests passed", **counts, "failed_tests": failed}
if not path.exists():
    line.update(value=None, reason="pytest wrote no report (tests.out says why)")
print(json.dumps(line))
EOF
# the goals first (the learner's MFU, the static paths against their bounds beside transformers' generate, the plan
# against the peak), then what explains them; a step cut off by its time keeps the figures it printed
step precision 90 "$PYTHON" bench/precision_gpu.py --json "${LEARNER[@]}"
step hf_decode 90 "$PYTHON" bench/hf_generation_throughput.py --json "${DECODE[@]}" --paths static --paths generate
step lm_sampler 60 "$PYTHON" bench/lm_sampler.py --json "${DECODE[@]}" --paths static --paths eager
step memory_plan 60 "$PYTHON" bench/memory_plan_gpu.py --json "${LEARNER[@]}"
step sampling 20 "$PYTHON" bench/sampling.py --json "${LEARNER[@]}"
step chunked_head 40 "$PYTHON" bench/chunked_head.py --json "${LEARNER[@]}"
# a GRPO microbatch: its rows continue one prompt, which the learner scores once
step precision_shared 30 "$PYTHON" bench/precision_gpu.py --json --runs bf16-mixed --shared-prompts "${LEARNER[@]}"
# the eager loop the baseline measured (a minute at 256 x 512 at its speed)
step hf_eager 60 "$PYTHON" bench/hf_generation_throughput.py --json "${DECODE[@]}" --paths eager
# the compiled generate takes up to two --compile-timeout's (its first call compiles, its second is timed), after
# some 30 s of imports and building the model; past them the bench reports it as not finished
LEFT=$((BUDGET - (SECONDS - START) - 15))
step hf_generate_compiled "$LEFT" "$PYTHON" bench/hf_generation_throughput.py --json "${DECODE[@]}" \
  --paths generate_compiled --compile-timeout "$(((LEFT > 40 ? LEFT - 30 : 10) / 2))"
exit $FAILED
