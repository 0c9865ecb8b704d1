"""Time of the exact kissing verifier on 600 and 10,000 points, and of a whole sandboxed evaluation.

    uv run python bench/kissing_verifier.py

Sets: 600 and 10,000 distinct random integer vectors in [-10^6, 10^6]^11 (every pair is scanned whatever the
answer, so validity does not change the time), and the shipped 582-point construction run end to end
through the sandbox (process start, numpy import, program, JSON back, verification). Medians of --repeats.
"""

import platform
import statistics
import time
from pathlib import Path

import numpy as np
import typer

from alignment.kissing.verifier import evaluate_program, verify_points


def median_s(work, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(repeats: int = 5, program: Path = Path("data/kissing_number/results/search-code/program.py")) -> None:
    rng = np.random.default_rng(0)
    print(f"{platform.processor() or platform.machine()}, numpy {np.__version__}, median of {repeats}")
    for n in (600, 10_000):
        points = rng.integers(-(10**6), 10**6, size=(n, 11)).tolist()
        seconds = median_s(lambda: verify_points(points), repeats)
        print(f"verify_points, {n} points ({n * (n - 1) // 2} pairs): {seconds:.3f} s")
    if program.is_file():
        source = program.read_text()
        score = evaluate_program(source).score
        seconds = median_s(lambda: evaluate_program(source), repeats)
        print(f"evaluate_program({program}, sandboxed), score {score:g}: {seconds:.3f} s")


if __name__ == "__main__":
    typer.run(main)
