"""Our r1_zero grader beside the course's `drgrpo_grader.py` (fast mode) on realistic answer pairs.

    uv run python bench/grader_parity.py --course-repo PATH   # or COURSE_GRADER_REPO=PATH
    uv run python bench/grader_parity.py --course-repo PATH --show 20 --gsm8k data/gsm8k/test.jsonl

PATH is a local checkout of the public stanford-cs336/assignment5-alignment (`cs336_alignment/drgrpo_grader.py`), or
of uw-syfi/assignment3-rl or linhaowei1/NLPDL-2025Fall, which ship the same file. The course's file is imported from
there at run time, in a child process (its imports, warnings and unbounded sympy stay out of this one), each pair
under a 10 s alarm; nothing of it is copied here. Without a checkout the bench says so and exits 0.

Pairs: each of 66 GSM8K answers (60 of the test split drawn with seed 35, and 6 with thousands commas; seeded
integers when the file is absent) in the forms models write it (plain, boxed, `$`, units, commas, `x =`, sentences,
wrong by one, ...), then MATH answer forms (fractions, radicals, tuples, intervals, matrices, named values, units,
degrees, powers, text answers) and the course grader's own false positives. Every pair carries a hand label: is the
response's answer right. The bench prints agreement of each of our modes with the course, every disagreement with
its category, and the false positives (label wrong, verdict right) of all three graders.
"""

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import typer

from alignment.grader import GRADER_MODES, r1_zero_reward_fn

REPO_ENV = "COURSE_GRADER_REPO"
GRADER_PATHS = (
    "cs336_alignment/drgrpo_grader.py",  # stanford-cs336/assignment5-alignment
    "cse599o_alignment/drgrpo_grader.py",  # uw-syfi/assignment3-rl
    "hw3_posttrain/data/drgrpo_grader.py",  # linhaowei1/NLPDL-2025Fall
)
# Where the course's grader itself accepts a wrong answer (docs/concepts/grader.md); our default mode does not
COURSE_BUGS = {
    "C1": "single letters deleted as units: t^2+1 = s^2+1, (a) = (c)",
    "C2": "a matrix row read as the sum of its cells",
    "C3": "an empty answer or another unit word matches a unit-word ground truth",
    "C4": "a unit exchanged for another: 5 more = 5 less, 10 m = 10 cm",
}


def pmatrix(body: str) -> str:
    return f"\\begin{{pmatrix}} {body} \\end{{pmatrix}}"


# (category, answer, ground truth, right?, course bug or "")
MATH_FORMS = [
    ("frac/same", "\\frac{3}{4}", "\\frac{3}{4}", True, ""),
    ("frac/dfrac", "\\dfrac{3}{4}", "\\frac{3}{4}", True, ""),
    ("frac/tfrac", "\\tfrac{3}{4}", "\\frac{3}{4}", True, ""),
    ("frac/slash", "3/4", "\\frac{3}{4}", True, ""),
    ("frac/decimal", "0.75", "\\frac{3}{4}", True, ""),
    ("frac/unreduced", "\\frac{6}{8}", "\\frac{3}{4}", True, ""),
    ("frac/unreduced_slash", "6/8", "3/4", True, ""),
    ("frac/shorthand", "\\frac34", "\\frac{3}{4}", True, ""),
    ("frac/negative_inside", "\\frac{-1}{2}", "-\\frac{1}{2}", True, ""),
    ("frac/half", "0.5", "\\frac{1}{2}", True, ""),
    ("frac/inverted", "\\frac{4}{3}", "\\frac{3}{4}", False, ""),
    ("frac/mixed_latex", "1\\frac{1}{2}", "\\frac{3}{2}", True, ""),
    ("frac/mixed_space", "1 1/2", "\\frac{3}{2}", True, ""),
    ("frac/mixed_wrong", "2 1/2", "\\frac{3}{2}", False, ""),
    ("frac/rounded", "0.33", "\\frac{1}{3}", False, ""),
    ("frac/symbolic", "x/2", "\\frac{x}{2}", True, ""),
    ("frac/symbolic_decimal", "0.5x", "\\frac{x}{2}", True, ""),
    ("frac/integer_as_fraction", "\\frac{8}{2}", "4", True, ""),
    ("tuple/same", "(1, 2)", "(1,2)", True, ""),
    ("tuple/swapped", "(2, 1)", "(1,2)", False, ""),
    ("tuple/fractions", "\\left(\\frac{1}{2}, 3\\right)", "\\left( \\frac{1}{2}, 3 \\right)", True, ""),
    ("tuple/decimal_element", "(0.5, 3)", "\\left( \\frac{1}{2}, 3 \\right)", True, ""),
    ("tuple/short", "(1, 2)", "(1,2,3)", False, ""),
    ("tuple/radical", "(\\sqrt{2}, 1)", "(\\sqrt2, 1)", True, ""),
    ("tuple/brackets", "[1, 2]", "(1,2)", False, ""),
    ("list/unordered", "3, 1", "1, 3", True, ""),
    ("list/and", "1 and 3", "1, 3", True, ""),
    ("list/missing_root", "1", "1, 3", False, ""),
    ("set/swapped", "\\{3, 1\\}", "\\{1,3\\}", True, ""),
    ("interval/same", "[0, 1)", "[0,1)", True, ""),
    ("interval/open_end", "(0, 1)", "[0,1)", False, ""),
    ("interval/infinity", "(-\\infty, 2 ]", "(-\\infty, 2]", True, ""),
    ("interval/union", "(-\\infty, 1) \\cup (2, \\infty)", "(-\\infty,1)\\cup(2,\\infty)", True, ""),
    ("interval/union_swapped", "(2, \\infty) \\cup (-\\infty, 1)", "(-\\infty,1)\\cup(2,\\infty)", True, ""),
    ("interval/inequality", "x < 2", "(-\\infty,2)", True, ""),
    ("matrix/column_spacing", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", pmatrix("1 \\\\ 2"), True, ""),
    ("matrix/column_swapped", pmatrix("2 \\\\ 1"), pmatrix("1 \\\\ 2"), False, ""),
    ("matrix/bmatrix", "\\begin{bmatrix} 1 \\\\ 2 \\end{bmatrix}", pmatrix("1 \\\\ 2"), True, ""),
    ("matrix/negative", "\\begin{pmatrix}-1\\\\2\\end{pmatrix}", pmatrix("-1 \\\\ 2"), True, ""),
    ("matrix/fraction_cell", pmatrix("\\frac{1}{2} \\\\ -3"), pmatrix("1/2 \\\\ -3"), True, ""),
    ("matrix/2x2_spacing", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", pmatrix("1 & 2 \\\\ 3 & 4"), True, ""),
    ("matrix/2x2_transposed", pmatrix("1 & 3 \\\\ 2 & 4"), pmatrix("1 & 2 \\\\ 3 & 4"), False, ""),
    ("matrix/2x2_one_cell", pmatrix("1 & 2 \\\\ 3 & 5"), pmatrix("1 & 2 \\\\ 3 & 4"), False, ""),
    ("matrix/row_swapped", pmatrix("1 & 2"), pmatrix("2 & 1"), False, "C2"),
    ("matrix/row_other_cells", pmatrix("0 & 3"), pmatrix("1 & 2"), False, "C2"),
    ("matrix/tuple", "(1, 2)", pmatrix("1 \\\\ 2"), True, ""),
    ("named/same", "x=2, y=3", "x=2, y=3", True, ""),
    ("named/spaces", "x = 2, y = 3", "x=2, y=3", True, ""),
    ("named/swapped_values", "x=3, y=2", "x=2, y=3", False, ""),
    ("named/swapped_order", "y=3, x=2", "x=2, y=3", True, ""),
    ("named/three_swapped", "a=2, b=1, c=3", "a=1, b=2, c=3", False, ""),
    ("named/bare_values", "2, 3", "x=2, y=3", True, ""),
    ("named/one", "x = 5", "5", True, ""),
    ("named/one_in_truth", "5", "x=5", True, ""),
    ("named/one_wrong", "x = 4", "5", False, ""),
    ("named/long_name", "area = 5", "5", True, ""),
    ("named/k", "k = \\frac{1}{2}", "\\frac{1}{2}", True, ""),
    ("degree/circ", "90^\\circ", "90^\\circ", True, ""),
    ("degree/unicode", "90°", "90^\\circ", True, ""),
    ("degree/plain", "90", "90^\\circ", True, ""),
    ("degree/braced", "90^{\\circ}", "90^\\circ", True, ""),
    ("degree/word", "90 degrees", "90^\\circ", True, ""),
    ("degree/wrong", "45^\\circ", "90^\\circ", False, ""),
    ("power/int", "10^6", "1000000", True, ""),
    ("power/of_two", "2^{10}", "1024", True, ""),
    ("power/million", "1 million", "1000000", True, ""),
    ("power/scientific", "1 \\times 10^6", "1000000", True, ""),
    ("power/e_notation", "1e6", "1000000", True, ""),
    ("power/braces", "x^2", "x^{2}", True, ""),
    ("power/wrong", "2^{9}", "1024", False, ""),
    ("sqrt/shorthand", "\\sqrt2", "\\sqrt{2}", True, ""),
    ("sqrt/simplified", "\\sqrt{12}", "2\\sqrt{3}", True, ""),
    ("sqrt/rationalized", "\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True, ""),
    ("sqrt/decimal", "0.7071", "\\frac{\\sqrt{2}}{2}", False, ""),
    ("sqrt/wrong", "\\sqrt{3}", "\\sqrt{2}", False, ""),
    ("sqrt/order", "\\sqrt{3} \\cdot 2", "2\\sqrt{3}", True, ""),
    ("sqrt/sum_order", "1+\\sqrt{2}", "\\sqrt{2}+1", True, ""),
    ("sqrt/words", "2 sqrt(2)", "2\\sqrt{2}", True, ""),
    ("pi/same", "2\\pi", "2\\pi", True, ""),
    ("pi/order", "\\pi \\cdot 2", "2\\pi", True, ""),
    ("pi/word", "2pi", "2\\pi", True, ""),
    ("pi/decimal", "6.28", "2\\pi", False, ""),
    ("pi/fraction", "\\pi/2", "\\frac{\\pi}{2}", True, ""),
    ("pi/missing", "2", "2\\pi", False, ""),
    ("expr/factored", "(x+1)^2", "x^2+2x+1", True, ""),
    ("expr/reordered", "2x+x^2+1", "x^2+2x+1", True, ""),
    ("expr/sign", "x^2+2x-1", "x^2+2x+1", False, ""),
    ("expr/cdot", "2 \\cdot x", "2x", True, ""),
    ("expr/three_letters", "a+b+c", "c+b+a", True, ""),
    ("expr/equation", "y = 2x + 3", "y=2x+3", True, ""),
    ("expr/equation_reordered", "y = 3 + 2x", "y=2x+3", True, ""),
    ("expr/log", "\\log_2 8", "3", True, ""),
    ("expr/variable", "3x", "3", False, ""),
    ("expr/other_variable", "2x", "2y", False, ""),
    ("expr/imaginary", "4i", "4", False, ""),
    ("expr/times_pi", "2 pi", "2", False, ""),
    ("expr/complex_order", "4i+3", "3+4i", True, ""),
    ("expr/complex_conjugate", "3-4i", "3+4i", False, ""),
    ("text/same", "\\text{Monday}", "\\text{Monday}", True, ""),
    ("text/plain", "Monday", "\\text{Monday}", True, ""),
    ("text/lower", "monday", "\\text{Monday}", True, ""),
    ("text/wrong", "Tuesday", "\\text{Monday}", False, ""),
    ("text/choice", "(A)", "\\text{(A)}", True, ""),
    ("text/choice_letter", "A", "\\text{(A)}", True, ""),
    ("text/choice_wrong", "B", "\\text{(A)}", False, ""),
    ("text/even_odd", "even", "\\text{odd}", False, ""),
    ("percent/latex", "25\\%", "25\\%", True, ""),
    ("percent/plain", "25", "25\\%", True, ""),
    ("percent/sign", "25%", "25", True, ""),
    ("percent/word", "25 percent", "25", True, ""),
    ("percent/wrong", "20\\%", "25\\%", False, ""),
    ("number/trailing_zero", "3.50", "3.5", True, ""),
    ("number/fraction", "3.5", "\\frac{7}{2}", True, ""),
    ("number/leading_dot", ".5", "0.5", True, ""),
    ("number/sign", "7", "-7", False, ""),
    ("number/plus", "+7", "7", True, ""),
    ("number/float", "7.0", "7", True, ""),
    ("number/rounded", "3.14", "3.14159", False, ""),
    ("number/commas", "1,000,000", "1000000", True, ""),
    ("number/thin_spaces", "1\\,000\\,000", "1000000", True, ""),
    ("number/base", "1011_{2}", "1011_2", True, ""),
    ("number/cents", "\\$18.90", "18.9", True, ""),
    ("number/comma_vs_point", "1,000", "1.000", False, ""),
    ("unit/text", "5 \\text{ cm}", "5", True, ""),
    ("unit/in_truth", "5", "5\\text{ cm}", True, ""),
    ("unit/mbox", "5\\mbox{ inches}", "5", True, ""),
    ("unit/square", "12\\text{ square units}", "12", True, ""),
    ("unit/abbreviated", "2 hr", "2 \\text{ hours}", True, ""),
    ("unit/exchanged", "10 m", "10 \\text{ cm}", False, "C4"),
    ("unit/exchanged_words", "10 meters", "10 \\text{ cm}", False, "C4"),
    ("unit/more_less", "5 more", "5 less", False, "C4"),
    ("unit/word_truth_other_word", "minute", "\\text{second}", False, "C3"),
    ("unit/word_truth_empty", "", "\\text{second}", False, "C3"),
    ("unit/ways", "12", "12 \\text{ ways}", True, ""),
    ("letter/t_s", "t^2+1", "s^2+1", False, "C1"),
    ("letter/a_c", "a+1", "c+1", False, "C1"),
    ("letter/fraction", "\\frac{a}{2}", "\\frac{c}{2}", False, "C1"),
    ("letter/choice", "(a)", "(c)", False, "C1"),
    ("letter/squares", "a^2+b^2", "c^2+b^2", False, "C1"),
    ("letter/sum", "x+a", "x+c", False, "C1"),
    ("letter/m_s", "m+1", "s+1", False, "C1"),
    ("letter/sqrt", "\\sqrt{a}", "\\sqrt{d}", False, "C1"),
    ("letter/same", "a+1", "a + 1", True, ""),
    ("letter/name_only", "x=3", "y=3", True, ""),
    ("format/boxed", "So \\boxed{\\frac{3}{4}}", "\\frac{3}{4}", True, ""),
    ("format/unclosed_box", "\\boxed{3", "3", False, ""),
    ("format/fbox", "\\fbox{3}", "3", True, ""),
    ("format/dollars", "$\\frac{3}{4}$", "\\frac{3}{4}", True, ""),
    ("format/empty", "", "3", False, ""),
    ("format/truth_boxed", "3", "\\boxed{3}", True, ""),
    ("format/truth_list", "3", ["4", "3"], True, ""),
    ("format/truth_int", "3", 3, True, ""),
    ("format/truth_float", "3.5", 3.5, True, ""),
    ("format/newlines", "\n3\n", "3", True, ""),
    ("format/sentence", "The final answer is $\\frac{3}{4}$.", "\\frac{3}{4}", True, ""),
    ("format/colon", "Answer: 3", "3", True, ""),
    ("format/hedge_or", "3 or 4", "3", False, ""),
    ("format/hedge_list", "3, 4", "3", False, ""),
    ("format/bold", "\\textbf{3}", "3", True, ""),
    ("format/approx", "\\approx 3", "3", True, ""),
    ("format/infinity_word", "infinity", "\\infty", True, ""),
    ("format/negative_infinity", "\\infty", "-\\infty", False, ""),
    ("format/plus_minus", "\\pm 2", "2", False, ""),
    ("format/plus_minus_listed", "-2, 2", "\\pm 2", True, ""),
    ("format/verbal_wrong", "105 is wrong", "105", False, ""),
    ("format/verbal_other", "106 not 105", "105", False, ""),
    ("big/tower", "10^{10^{10}}", "1", False, ""),
    ("big/zero_denominator", "\\frac{1}{0}", "1", False, ""),
    ("big/nan", "nan", "3", False, ""),
]  # fmt: skip


def wrapped(answer: str) -> str:
    return f"Let me work it out step by step. </think> <answer>{answer}</answer>"


def gsm8k_answers(path: Path) -> tuple[list[str], str]:
    """66 GSM8K final answers as they are written (thousands commas kept): from `path` when it exists, else seeded
    integers of GSM8K's range."""
    if path.is_file():
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        answers = [row["answer"].rsplit("####", 1)[1].strip() for row in rows]
        with_commas = [a for a in answers if "," in a][:6]
        return random.Random(35).sample(answers, 60) + with_commas, f"{path} (60 drawn with seed 35, 6 with commas)"
    rng = random.Random(35)
    numbers = [rng.choice([rng.randint(1, 99), rng.randint(100, 999), rng.randint(1000, 99999)]) for _ in range(66)]
    return [f"{n:,}" for n in numbers], f"{path} absent: 66 seeded integers"


def gsm8k_pairs(answers: list[str]) -> list[dict]:
    pairs = []
    for written in answers:
        truth = written.replace(",", "")
        n = int(truth)
        forms = [
            ("exact", truth, True),
            ("boxed", f"\\boxed{{{truth}}}", True),
            ("sentence", f"The answer is {truth}", True),
            ("sentence_period", f"The answer is {truth}.", True),
            ("dollar", f"${truth}", True),
            ("latex_dollar", f"\\${truth}", True),
            ("unit_word", f"{truth} dollars", True),
            ("decimal", f"{truth}.00", True),
            ("period", f"{truth}.", True),
            ("spaces", f"  {truth}  ", True),
            ("x_equals", f"x = {truth}", True),
            ("percent", f"{truth}\\%", True),
            ("text", f"\\text{{{truth}}}", True),
            ("fraction", f"\\frac{{{2 * n}}}{{2}}", True),
            ("expression", f"{n - 1} + 1", True),
            ("second_box", f"\\boxed{{{n + 1}}} no wait \\boxed{{{truth}}}", True),
            ("off_by_one", str(n + 1), False),
            ("times_ten", str(n * 10), False),
            ("first_box", f"\\boxed{{{truth}}} no wait \\boxed{{{n + 1}}}", False),
        ]
        if n >= 1000:
            forms += [("commas", f"{n:,}", True), ("thin_space", f"{n // 1000}\\,{n % 1000:03d}", True)]
        if n % 2:
            forms.append(("half", f"{n / 2}", False))
        pairs += [dict(category=f"gsm8k/{c}", response=wrapped(a), truth=truth, right=r, bug="") for c, a, r in forms]
        pairs.append(
            dict(category="gsm8k/truth_with_commas", response=wrapped(truth), truth=written, right=True, bug="")
        )
        pairs.append(
            dict(
                category="gsm8k/after_answer",
                response=wrapped(truth) + " Hope that helps.",
                truth=truth,
                right=True,
                bug="",
            )
        )
        for category, response, right in (
            ("gsm8k/no_think", f"<answer>{truth}</answer>", False),
            ("gsm8k/no_space", f"ok</think><answer>{truth}</answer>", False),
            ("gsm8k/two_blocks", f"ok </think> <answer>{n + 1}</answer> <answer>{truth}</answer>", True),
        ):
            pairs.append(dict(category=category, response=response, truth=truth, right=right, bug=""))
    return pairs


def all_pairs(gsm8k: Path) -> tuple[list[dict], str]:
    answers, source = gsm8k_answers(gsm8k)
    math = [dict(category=f"math/{c}", response=wrapped(a), truth=t, right=r, bug=b) for c, a, t, r, b in MATH_FORMS]
    return gsm8k_pairs(answers) + math, source


_COURSE_CHILD = """
import importlib.util, json, signal, sys, warnings
warnings.simplefilter("ignore")
spec = importlib.util.spec_from_file_location("course_grader", sys.argv[1])
grader = importlib.util.module_from_spec(spec)
spec.loader.exec_module(grader)
def alarm(signum, frame):
    raise TimeoutError
signal.signal(signal.SIGALRM, alarm)
verdicts = []
for pair in json.load(open(sys.argv[2])):
    signal.alarm(10)
    try:
        verdicts.append(grader.r1_zero_reward_fn(pair["response"], pair["truth"], fast=True)["reward"])
    except BaseException as err:
        verdicts.append(type(err).__name__)
    finally:
        signal.alarm(0)
json.dump(verdicts, open(sys.argv[3], "w"))
"""


def find_course_grader(repo: Path | None) -> Path | None:
    if repo is None:
        return None
    return next((repo / path for path in GRADER_PATHS if (repo / path).is_file()), None)


def course_verdicts(grader_file: Path, pairs: list[dict]) -> list[float | str]:
    with tempfile.TemporaryDirectory() as folder:
        pairs_file, verdicts_file = Path(folder) / "pairs.json", Path(folder) / "verdicts.json"
        pairs_file.write_text(json.dumps(pairs))
        subprocess.run(
            [sys.executable, "-c", _COURSE_CHILD, str(grader_file), str(pairs_file), str(verdicts_file)], check=True
        )
        return json.loads(verdicts_file.read_text())


def main(
    course_repo: Path | None = typer.Option(
        None, help=f"Checkout of the course repo holding drgrpo_grader.py (default: ${REPO_ENV})."
    ),
    gsm8k: Path = typer.Option(Path("data/gsm8k/test.jsonl"), help="GSM8K test split (.jsonl)."),
    show: int = typer.Option(10, help="Disagreements to print per mode."),
) -> None:
    repo = course_repo or (Path(os.environ[REPO_ENV]) if os.environ.get(REPO_ENV) else None)
    grader_file = find_course_grader(repo)
    if grader_file is None:
        typer.echo(
            f"skipped: no course grader found (pass --course-repo or set ${REPO_ENV} to a checkout of "
            f"stanford-cs336/assignment5-alignment; looked for {', '.join(GRADER_PATHS)} under {repo})"
        )
        raise typer.Exit(0)
    pairs, source = all_pairs(gsm8k)
    typer.echo(f"{len(pairs)} pairs; GSM8K answers from {source}; course grader {grader_file}")
    start = time.perf_counter()
    course = course_verdicts(grader_file, pairs)
    typer.echo(f"course grader: {time.perf_counter() - start:.1f} s")
    ours = {}
    for mode in GRADER_MODES:
        start = time.perf_counter()
        ours[mode] = [r1_zero_reward_fn(p["response"], p["truth"], grader=mode)["reward"] for p in pairs]
        typer.echo(f"ours, {mode}: {time.perf_counter() - start:.1f} s")
    errors = Counter(v for v in course if isinstance(v, str))
    if errors:
        typer.echo(f"course grader errors: {dict(errors)}")
    for mode in GRADER_MODES:
        differ = [i for i, (c, o) in enumerate(zip(course, ours[mode])) if c != o]
        bugs = [i for i in differ if pairs[i]["bug"]]
        typer.echo(
            f"\n{mode}: agrees with the course on {len(pairs) - len(differ)}/{len(pairs)} pairs "
            f"({100 * (len(pairs) - len(differ)) / len(pairs):.1f}%); of the {len(differ)} disagreements, "
            f"{len(bugs)} are the course grader's own false positives "
            f"({', '.join(sorted({pairs[i]['bug'] for i in bugs}))})"
        )
        for category, count in Counter(pairs[i]["category"].rsplit("/", 1)[0] for i in differ).most_common():
            typer.echo(f"  {count:4d} {category}")
        for i in differ[:show]:
            p = pairs[i]
            answer = p["response"].split("<answer>")[-1][:60]
            typer.echo(
                f"    {p['category']:36} {answer!r:64} truth={p['truth']!r:28} course={course[i]} ours={ours[mode][i]}"
                + (f" [{p['bug']}]" if p["bug"] else "")
            )
    typer.echo("\nfalse positives (a wrong answer rewarded):")
    for name, verdicts in [("course", course)] + [(f"ours, {m}", ours[m]) for m in GRADER_MODES]:
        wrong = [i for i, v in enumerate(verdicts) if v == 1.0 and not pairs[i]["right"]]
        typer.echo(f"  {name:14} {len(wrong)}" + "".join(f"\n    {pairs[i]['category']}" for i in wrong))
    typer.echo(
        "\ncourse grader's own false positives listed: " + "; ".join(f"{k}: {v}" for k, v in COURSE_BUGS.items())
    )


if __name__ == "__main__":
    typer.run(main)
