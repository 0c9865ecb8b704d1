"""report.md for a kissing-number discovery run, in the four sections HW3 §7 asks for (methodology; process,
with the prompts that led to breakthroughs; final result; reflection), filled from the run's log alone, with a
PNG plot of score over time."""

from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from alignment.kissing.discovery import BEST_PROGRAM, LOG_FILE, Candidate  # noqa: E402
from alignment.utils.atomic import atomic_write_text  # noqa: E402

PLOT = "score_over_time.png"
REPORT = "report.md"
COLORS = {"seed": "tab:gray", "search-code": "tab:green", "llm": "tab:blue"}
KNOWN_BOUNDS = (
    (438, "the best lattice"),
    (582, "Zinoviev and Ericson, 1999"),
    (592, "Ganzhinov, 2022"),
    (593, "AlphaEvolve, 2025"),
)
METHODS = {
    "best_of_n": "best-of-N: independent samples of one prompt (the best starting program and its verifier output); "
    "the verifier selects",
    "refine": "iterative refinement: each prompt carries the latest program and the verifier's exact message",
    "evolve": "evolution: a database of scored programs; parents sampled with weight exp((score - best) / T), shown "
    "with the best other programs and their verifier output",
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
    for bound, _ in KNOWN_BOUNDS:
        ax.axhline(bound, color="tab:red", linestyle=":", linewidth=0.8)
        ax.text(0, bound, str(bound), fontsize=7, va="bottom", color="tab:red")
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


def _valid(c: Candidate) -> bool:
    return c.verdict.get("validity") == 1.0


FAILURES = {  # a piece of the verifier's message -> the kind of failure, counted in the reflection
    "no program found": "no program in the reply",
    "no reply within": "no reply within the budget",
    "is the zero vector": "the zero vector",
    "are equal": "a repeated point",
    "Minimum squared distance": "points too close",
    "coordinates must be integers": "non-integer coordinates",
    "coordinates; expected": "wrong dimension",
    "must be a list": "`points` not a list",
    "is empty": "no points",
}


def _failure_kind(c: Candidate) -> str:
    """A verdict's failure, without the point numbers, so that turns failing alike are counted together."""
    message = c.verdict.get("message", "")
    if message.startswith("program failed:"):
        return "the program failed with " + message.removeprefix("program failed:").strip().split(":")[0]
    return next((kind for piece, kind in FAILURES.items() if piece in message), message[:80])


def methodology(log: dict[str, Any], candidates: list[Candidate]) -> list[str]:
    run = log["run"]
    llm = [c for c in candidates if c.source == "llm"]
    lines = [
        "## Methodology",
        "",
        "- **Verifier.** Every program runs in the project's sandbox (a child process with wall-clock, memory "
        "and output limits, no network, a throwaway folder); its global `points` is then checked exactly in "
        "integer arithmetic: no zero vector, no repeats, minimum squared distance >= maximum squared norm. "
        "The score is the number of points when valid, else 0.",
        f"- **Search with a language model.** {METHODS[run.get('mode', 'evolve')]}. Backend `{run.get('backend')}`, "
        f"model `{run.get('model')}`, temperature {run.get('temperature')}, at most {run.get('max_tokens')} "
        f"tokens per reply; {len(llm)} model turns of at most {run.get('iterations')}.",
    ]
    seeds = [c for c in candidates if c.source == "seed"]
    if seeds:
        lines.append(
            "- **Seeds.** " + "; ".join(f"candidate {c.id}, {c.note} (score {c.score:g})" for c in seeds) + "."
        )
    searched = [c for c in candidates if c.source == "search-code"]
    if searched:
        lines.append(
            "- **Search code** (`alignment.kissing.search`, no language model), run before the first model "
            "turn: " + "; ".join(c.note for c in searched) + "."
        )
    budget = run.get("budget_s")
    lines += [
        f"- **Budget.** One wall-clock budget of {budget:g} s bounds the whole run (search code and model turns "
        f"together; a verification under way may finish past it)."
        if budget
        else "- **Budget.** None.",
        "",
    ]
    return lines


def process(candidates: list[Candidate]) -> list[str]:
    lines = [
        "## Process",
        "",
        f"![score over time]({PLOT})",
        "",
        "| source | programs | valid | best score |",
        "|---|---|---|---|",
    ]
    for source in COLORS:
        mine = [c for c in candidates if c.source == source]
        if mine:
            lines.append(f"| {source} | {len(mine)} | {sum(map(_valid, mine))} | {max(c.score for c in mine):g} |")
    lines += ["", "Each raise of the best score:", "", "| candidate | source | time (s) | score |", "|---|---|---|---|"]
    lines += [f"| {c.id} | {c.source} | {c.elapsed_s:.1f} | {c.score:g} |" for c in improvements(candidates)]
    lines += ["", "### Prompts that led to breakthroughs", ""]
    breakthroughs = [c for c in improvements(candidates) if c.source == "llm"]
    if not breakthroughs:
        lines += ["No model reply raised the best score, so no prompt led to a breakthrough.", ""]
        shown = sorted(
            (c for c in candidates if c.source == "llm" and c.reply is not None), key=lambda c: (-c.score, c.id)
        )[:1]
        if shown:
            lines += ["The model's best turn, for reference:", ""]
    else:
        shown = breakthroughs
    for c in shown:
        lines += [
            f"#### candidate {c.id}: score {c.score:g} ({c.verdict.get('message', '')})",
            "",
            "Prompt (user turn):",
            "",
            _quote((c.request or {}).get("messages", [{}])[-1].get("content", "")),
            "",
            "Reply:",
            "",
            _quote(c.reply or ""),
            "",
        ]
    return lines


def final_result(candidates: list[Candidate], log: dict[str, Any]) -> list[str]:
    best = max(candidates, key=lambda c: (c.score, -c.id))
    below = [f"{bound} ({who})" for bound, who in KNOWN_BOUNDS if bound > best.score]
    reached = [f"{bound} ({who})" for bound, who in KNOWN_BOUNDS if bound <= best.score]
    stopped = [s["stopped"] for s in log["sessions"] if s.get("stopped")]
    return [
        "## Final result",
        "",
        f"**{best.score:g} points** (candidate {best.id}, from {best.source}), kept in `{BEST_PROGRAM}`. "
        f"Verifier: {best.verdict.get('message', '')}. Check it with "
        f"`python data/kissing_number/evaluator.py {Path(log['run'].get('output_dir', '.')) / BEST_PROGRAM}`.",
        "",
        f"Known lower bounds reached: {', '.join(reached) or 'none'}; not reached: {', '.join(below) or 'none'}.",
        "",
        f"The run ended: {stopped[-1] if stopped else 'not recorded (interrupted)'} "
        f"({log['sessions'][-1].get('ended_s') or 0:.1f} s since it began, over {len(log['sessions'])} session(s)).",
        "",
    ]


def reflection(candidates: list[Candidate], run: dict[str, Any], retries: int) -> list[str]:
    llm = [c for c in candidates if c.source == "llm"]
    answered = [c for c in llm if c.reply is not None]
    with_program = [c for c in llm if c.program is not None]
    valid = [c for c in llm if _valid(c)]
    best = max(candidates, key=lambda c: (c.score, -c.id))
    raised = [c for c in improvements(candidates) if c.source == "llm"]
    worked, failed = [], []
    if best.source == "search-code":
        worked.append(f"The search code found the best program ({best.score:g} points), without the model.")
    if raised:
        worked.append(
            f"The model raised the best score {len(raised)} time(s), last to {raised[-1].score:g} "
            f"(candidate {raised[-1].id})."
        )
    if valid:
        worked.append(
            f"{len(valid)} of {len(llm)} model programs were valid; the best scored {max(c.score for c in valid):g}."
        )
    model = f"`{run.get('model')}`"
    if llm and not valid:
        failed.append(
            f"The model {model} wrote no valid program in {len(llm)} turns: {len(answered)} replies came "
            f"back, {len(with_program)} held a program and none of those passed the verifier."
        )
    elif llm and not raised:
        failed.append(
            f"The model {model} never raised the best score; its best program scored "
            f"{max(c.score for c in llm):g} against {best.score:g}."
        )
    if not llm:
        failed.append("The model took no turns in this run (no iterations, or no time left after the search code).")
    kinds = Counter(_failure_kind(c) for c in llm if not _valid(c))
    if kinds:
        failed.append(
            "Why the model's turns failed: " + "; ".join(f"{kind} ({n})" for kind, n in kinds.most_common()) + "."
        )
    spent = [c.tokens or {} for c in llm]
    return [
        "## Reflection",
        "",
        "What worked:",
        "",
        *(f"- {line}" for line in worked or ["Nothing beyond the seeds."]),
        "",
        "What did not:",
        "",
        *(f"- {line}" for line in failed or ["Nothing stood out."]),
        "",
        f"Cost: {len(answered)} replies, {sum(t.get('prompt', 0) for t in spent)} prompt and "
        f"{sum(t.get('completion', 0) for t in spent)} completion tokens, "
        f"{sum(c.generate_s or 0 for c in llm):.1f} s waiting for the model; {retries} retried requests in the last "
        f"session. Every request, reply, timing and verdict is in `{LOG_FILE}`.",
        "",
    ]


def write_report(output_dir: Path, log: dict[str, Any], retries: int = 0) -> Path:
    """report.md (and the plot) from a run's log (`Discovery.log()`)."""
    candidates = [Candidate(**row) for row in log["candidates"]]
    plot_scores(candidates, output_dir / PLOT)
    lines = [
        "# Kissing configurations in dimension 11: discovery report",
        "",
        *methodology(log, candidates),
        *process(candidates),
        *final_result(candidates, log),
        *reflection(candidates, log["run"], retries),
    ]
    path = output_dir / REPORT
    atomic_write_text(path, "\n".join(lines))
    return path
