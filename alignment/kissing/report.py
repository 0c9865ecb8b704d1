"""report.md for a kissing-number discovery run, in the four sections HW3 §7 asks for (methodology; process,
with the prompts that led to breakthroughs; final result; reflection), filled from the run's log alone, with a
PNG plot of score over time."""

from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from alignment.kissing.discovery import BEST_PROGRAM, LOG_FILE, Turn  # noqa: E402
from alignment.utils.atomic import atomic_write_text  # noqa: E402

PLOT = "score_over_time.png"
REPORT = "report.md"
HANDOUT_BOUNDS = "595 <= tau_11 <= 870"  # as the handout states them
PUBLIC_RECORDS = (  # published lower bounds, with their sources
    (592, "M. Ganzhinov, 2022"),
    (593, "AlphaEvolve, Novikov et al., 2025, arXiv:2506.13131"),
    (604, "EinsteinArena agents, 2026, arXiv:2606.10402"),
)
METHODS = {
    "baseline": "simple prompting: the handout's prompt, one turn",
    "refine": "agentic refinement: one conversation whose history is kept (trimmed to a character budget); each "
    "failure's exact error goes back, and after a valid set the prompt to add more vectors",
    "best_of_n": "best-of-N with the verifier: N independent samples of the first prompt, the verifier selects",
    "best_of_n_refine": "best-of-N, then agentic refinement of the best sample's conversation",
    "refine_chains": "N independent agentic-refinement conversations, taken in turns",
    "search": "the project's search code (alignment.kissing.search), no language model",
}


def improvements(turns: list[Turn]) -> list[Turn]:
    """The turns that raised the best valid score, in order."""
    out: list[Turn] = []
    for t in turns:
        if t.points > (out[-1].points if out else 0):
            out.append(t)
    return out


def plot_scores(turns: list[Turn], search: dict[str, Any] | None, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    if turns:
        ax.scatter([t.elapsed_s for t in turns], [t.points for t in turns], s=14, color="tab:blue", label="model turn")
    if search:
        ax.scatter([search["elapsed_s"]], [search["points"]], s=20, color="tab:green", label="search code")
    steps = improvements(turns)
    if steps:
        xs = [t.elapsed_s for t in steps] + [max(t.elapsed_s for t in turns)]
        ys = [t.points for t in steps] + [steps[-1].points]
        ax.step(xs, ys, where="post", color="black", linewidth=1, label="best so far")
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("verified |C| (0 = invalid)")
    ax.grid(alpha=0.3)
    if turns or search:
        ax.legend(fontsize=8, loc="center right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _quote(text: str, max_chars: int = 1500) -> str:
    text = text if len(text) <= max_chars else text[:max_chars] + f"\n... ({len(text) - max_chars} more characters)"
    return "\n".join("    " + line for line in text.splitlines())


def _failure_kind(t: Turn) -> str:
    """A verdict's failure without its numbers, so that turns failing alike are counted together."""
    if t.answer is None:
        return "no reply within the budget"
    message = t.verdict.get("message", "")
    if message.startswith("program failed:"):
        return "the program failed with " + message.removeprefix("program failed:").strip().split(":")[0]
    if message.startswith("Minimum squared distance"):
        return "points too close"
    return message[:80]


def write_report(output_dir: Path, log: dict[str, Any]) -> Path:
    """report.md (and the plot) from a run's log (`Discovery.log()`)."""
    turns = [Turn(**row) for row in log["turns"]]
    search = log.get("search")
    run, usage, best = log["run"], log["usage"], log["best"]
    plot_scores(turns, search, output_dir / PLOT)
    lines = ["# Kissing configurations in dimension 11: discovery report", "", "## Methodology", ""]
    lines += [
        f"- **Approach.** {METHODS[log['mode']]}. Model `{run.get('model')}` ({run.get('backend')}), temperature "
        f"{run.get('temperature')}, at most {run.get('max_tokens')} tokens per reply.",
        "- **Verifier.** Every program runs in the project's sandbox; its `run_code()`, `get_centers()` or "
        "`points` is checked exactly: no zero vector, minimum squared distance >= maximum squared norm.",
        "",
        "## Process",
        "",
        f"![score over time]({PLOT})",
        "",
        "| conversation | turn | time (s) | points | verdict |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {t.conversation} | {t.turn} | {t.elapsed_s:.1f} | {t.points} | {t.verdict.get('message', '')[:90]} |"
        for t in turns
    ]
    lines += ["", "### Prompts that led to breakthroughs", ""]
    raised = improvements(turns)
    if not raised:
        lines += ["No model turn gave a valid set, so no prompt led to a breakthrough.", ""]
    for t in raised:
        lines += [
            f"Conversation {t.conversation}, turn {t.turn}: {t.points} points. The last user message:",
            "",
            _quote(t.request["messages"][-1]["content"]),
            "",
            "Answer:",
            "",
            _quote(t.answer or ""),
            "",
        ]
    below = [f"{bound} ({who})" for bound, who in PUBLIC_RECORDS if bound > best["points"]]
    lines += [
        "## Final result",
        "",
        f"**{best['points']} points** ({best['source'] or 'nothing valid'}), kept in `{BEST_PROGRAM}`. Check it with "
        f"`python data/kissing_number/evaluator.py {Path(run.get('output_dir', '.')) / BEST_PROGRAM}`. The handout "
        f"states {HANDOUT_BOUNDS}; published lower bounds not reached: {', '.join(below) or 'none'}.",
        "",
        f"The run ended: {log['sessions'][-1].get('stopped') or 'interrupted'}.",
        "",
        "## Reflection",
        "",
    ]
    kinds = Counter(_failure_kind(t) for t in turns if t.points == 0)
    valid = [t for t in turns if t.points > 0]
    lines.append(f"- {len(valid)} of {len(turns)} model turns gave a valid set.")
    if kinds:
        lines.append("- Why turns failed: " + "; ".join(f"{k} ({n})" for k, n in kinds.most_common()) + ".")
    if search:
        lines.append(f"- The search code alone: {search['points']} points ({search['note']}).")
    cost = f", ${usage['cost_usd']:.4f}" if usage.get("cost_usd") is not None else ""
    lines += [
        f"- Spent: {usage['answered']} replies, {usage['prompt_tokens']} prompt, {usage['completion_tokens']} "
        f"completion ({usage['reasoning_tokens']} reported reasoning) tokens{cost}. Every request, answer, "
        f"reasoning, timing and verdict is in `{LOG_FILE}`.",
        "",
    ]
    path = output_dir / REPORT
    atomic_write_text(path, "\n".join(lines))
    return path
