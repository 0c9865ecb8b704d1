"""report.md for a kissing-number discovery run: method, where the best program came from, the score journey
(with a PNG plot of score over time), the prompts behind the best model programs, and token use."""

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from alignment.atomic import atomic_write_text  # noqa: E402
from alignment.kissing_discovery import BEST_PROGRAM, LOG_FILE, Candidate  # noqa: E402

PLOT = "score_over_time.png"
COLORS = {"seed": "tab:gray", "search-code": "tab:green", "llm": "tab:blue"}
METHODS = {
    "best_of_n": "best-of-N: independent samples of one prompt (the best starting program and its verifier output); the verifier selects",
    "refine": "iterative refinement: each prompt carries the latest program and the verifier's exact message",
    "evolve": "evolution: a database of scored programs; parents sampled with weight exp((score - best) / T), shown with the best other programs and their verifier output",
}


def improvements(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates that raised the best score, in order."""
    out: list[Candidate] = []
    for c in candidates:
        if c.program is not None and (not out or c.score > out[-1].score):
            out.append(c)
    return out


def plot_scores(candidates: list[Candidate], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for source, color in COLORS.items():
        mine = [c for c in candidates if c.source == source]
        if mine:
            ax.scatter([c.elapsed_s for c in mine], [c.score for c in mine], s=14, color=color, label=source, zorder=3)
    steps = improvements(candidates)
    if steps:
        xs = [c.elapsed_s for c in steps] + [max(c.elapsed_s for c in candidates)]
        ys = [c.score for c in steps] + [steps[-1].score]
        ax.step(xs, ys, where="post", color="black", linewidth=1, label="best so far")
    for bound, name in ((438, "438 lattice"), (593, "593 AlphaEvolve")):
        ax.axhline(bound, color="tab:red", linestyle=":", linewidth=0.8)
        ax.text(0, bound, name, fontsize=7, va="bottom", color="tab:red")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("verified score |C| (0 = invalid)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _quote(text: str, max_chars: int = 1500) -> str:
    text = text if len(text) <= max_chars else text[:max_chars] + f"\n... ({len(text) - max_chars} more characters)"
    return "\n".join("    " + line for line in text.splitlines())


def write_report(output_dir: Path, candidates: list[Candidate], settings: dict[str, Any], retries: int = 0) -> Path:
    plot_scores(candidates, output_dir / PLOT)
    best = max(candidates, key=lambda c: (c.score, -c.id))
    lines = [
        "# Kissing-number discovery in dimension 11", "",
        f"Method: {METHODS[settings['mode']]}. Backend `{settings['backend']}`, model `{settings['model']}`, "
        f"{sum(c.source == 'llm' for c in candidates)} model steps.", "",
        f"**Best: {best.score:g}** (candidate {best.id}, from **{best.source}**), kept in `{BEST_PROGRAM}`; "
        f"verifier: {best.metrics.get('message', '')}", "",
        "## Where the programs came from", "",
        "| source | programs | valid | best score |", "|---|---|---|---|",
    ]
    for source in COLORS:
        mine = [c for c in candidates if c.source == source]
        if mine:
            valid = sum(c.metrics.get("validity") == 1.0 for c in mine)
            lines.append(f"| {source} | {len(mine)} | {valid} | {max(c.score for c in mine):g} |")
    lines += ["", "`seed`: programs given at the start; `search-code`: the project's code-based search "
              "(alignment.kissing_search), no language model involved; `llm`: programs extracted from model replies.", ""]
    for c in candidates:
        if c.source != "llm" and c.note:
            lines.append(f"- candidate {c.id} ({c.source}): {c.note}")
    lines += ["", "## Score journey", "", f"![score over time]({PLOT})", "",
              "| candidate | source | time (s) | score |", "|---|---|---|---|"]
    lines += [f"| {c.id} | {c.source} | {c.elapsed_s:.1f} | {c.score:g} |" for c in improvements(candidates)]
    model_made = sorted((c for c in candidates if c.source == "llm"), key=lambda c: (-c.score, c.id))[:3]
    lines += ["", "## Best prompts (the model's three best programs)", ""]
    if not model_made:
        lines += ["No model steps yet.", ""]
    for c in model_made:
        lines += [f"### candidate {c.id}: score {c.score:g} ({c.metrics.get('message', '')})", "",
                  "Prompt (user turn):", "", _quote((c.prompt or [{}])[-1].get("content", "")), "",
                  "Reply:", "", _quote(c.reply or ""), ""]
    spent = [c.tokens or {} for c in candidates if c.source == "llm"]
    lines += ["## Tokens", "", f"{len(spent)} model calls: {sum(t.get('prompt', 0) for t in spent)} prompt and "
              f"{sum(t.get('completion', 0) for t in spent)} completion tokens; {retries} retried requests in the "
              f"last session (each step's counts are in `{LOG_FILE}`).", ""]
    path = output_dir / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path
