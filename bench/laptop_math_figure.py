"""The arithmetic preset's run as one figure: held-out accuracy and format reward against wall time (the warm start's
SFT validations, then GRPO's), and where GRPO's step time went, phase by phase.

    uv run scripts/train_grpo.py --config configs/arithmetic_laptop.toml
    uv run python bench/laptop_math_figure.py            # -> docs/figures/laptop_math/run.png, and the numbers

Wall time starts when the warm start's first validation is logged; GRPO's clock continues from the end of the
warm start's (model loading between the two is not on either clock and is left out of the axis).
"""

import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import typer  # noqa: E402

from alignment.experiments.plotting import PHASES, read_rows  # noqa: E402
from alignment.run.warm_start import WARM_START_DIR  # noqa: E402


def main(run: Path = Path("outputs/arithmetic_laptop"), out: Path = Path("docs/figures/laptop_math")) -> None:
    warm = read_rows(run / WARM_START_DIR / "metrics.jsonl") if (run / WARM_START_DIR).is_dir() else []
    grpo = read_rows(run / "metrics.jsonl")
    warm_evals = [r for r in warm if "eval_reward" in r]
    offset = max((r["time_elapsed_s"] for r in warm if "time_elapsed_s" in r), default=0.0)
    grpo_evals = [r for r in grpo if "eval_reward" in r]
    steps = [r for r in grpo if "train_reward" in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for rows, shift, name, marker in ((warm_evals, 0.0, "SFT warm start", "s"), (grpo_evals, offset, "GRPO", "o")):
        minutes = [(r["time_elapsed_s"] + shift) / 60 for r in rows]
        left.plot(minutes, [r["eval_reward"] for r in rows], marker + "-", label=f"{name}: accuracy")
        left.plot(minutes, [r["eval_format_reward"] for r in rows], marker + "--", label=f"{name}: format reward")
    left.plot(
        [(r["time_elapsed_s"] + offset) / 60 for r in steps],
        [r["train_reward"] for r in steps],
        ":",
        color="grey",
        label="GRPO: train reward",
    )
    left.set_xlabel("wall time on the run's clocks (minutes)")
    left.set_ylabel(f"held-out reward ({grpo_evals[0].get('eval_examples', '?')} questions)")
    left.set_ylim(-0.02, 1.02)
    left.legend(fontsize=8)
    medians = {p: statistics.median(r.get(f"time_{p}_s", 0.0) for r in steps) for p in PHASES}
    right.bar(list(medians), list(medians.values()))
    right.set_ylabel("median seconds per GRPO step")
    right.set_title(f"{len(steps)} GRPO steps")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "run.png", dpi=120)
    for name, rows, shift in (("warm start", warm_evals, 0.0), ("GRPO", grpo_evals, offset)):
        for r in rows:
            print(
                f"{name} step {r['grpo_step']}: accuracy {r['eval_reward']:.3f}, format {r['eval_format_reward']:.3f}, "
                f"{(r['time_elapsed_s'] + shift) / 60:.1f} min"
            )
    print("median seconds per GRPO step: " + ", ".join(f"{p} {s:.1f}" for p, s in medians.items()))
    print(f"figure: {out / 'run.png'}")


if __name__ == "__main__":
    typer.run(main)
