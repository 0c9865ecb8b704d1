"""The handout's verifier CLI: run a candidate program in the sandbox and print its metrics as JSON.

    python data/kissing_number/evaluator.py data/kissing_number/program.py

Prints num_points, dimension, validity (1.0 / 0.0), score (num_points when valid) and message (on failure the
one specific reason, naming the points), plus the run time and which sandbox protections were active.
Exit status 0 when the set is valid, 1 when not, 2 when the file cannot be read.
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
    print(json.dumps(metrics.to_json(), indent=2))
    return 0 if metrics.validity == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
