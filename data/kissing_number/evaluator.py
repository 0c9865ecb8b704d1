"""The handout's verifier CLI (PKU NLPDL HW3 §7): run a candidate program in the sandbox and print its metrics.

    python data/kissing_number/evaluator.py data/kissing_number/program.py

What the program may give, as the course's evaluator takes it: `run_code()` (returning (points, d) or (points,),
or the points themselves as an array), else `get_centers()`, else a global `points`; points as any array-like of
Python or NumPy integers. The verdict line comes first, in the course evaluator's words ("Verified: dimension=11,
kissing lower bound >= 22", or "Verification failed: Minimum squared distance 36 < maximum squared norm 40"),
then the metrics as JSON: num_points, dimension, validity (1.0 / 0.0), score (num_points when valid),
combined_score (num_points / 593 when valid, the course's normalisation), message, the closest pair, the run time
and which sandbox protections held. Exit status 0 when the set is valid, 1 when not, 2 when the file cannot be read.

The handout states 595 <= tau_11 <= 870. The largest published set we know of has 604 vectors (agents on
EinsteinArena, arXiv:2606.10402, 2026), after 593 (AlphaEvolve, arXiv:2506.13131, 2025) and 592 (M. Ganzhinov,
2022).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # works from a checkout without installing

from alignment.kissing.sandbox import SandboxLimits  # noqa: E402
from alignment.kissing.verifier import evaluate_program  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: evaluator.py PROGRAM.py [TIMEOUT_S]", file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        source = path.read_text(encoding="utf-8")
        timeout_s = float(argv[1]) if len(argv) == 2 else 60.0
    except (OSError, UnicodeDecodeError, ValueError) as err:
        print(f"evaluator: cannot read {path} / timeout: {err}", file=sys.stderr)
        return 2
    metrics = evaluate_program(source, SandboxLimits(timeout_s=timeout_s))
    valid = metrics.validity == 1.0
    print(metrics.message if valid else f"Verification failed: {metrics.message}", file=sys.stderr)
    print(json.dumps(metrics.to_json(), indent=2))
    return 0 if valid else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
