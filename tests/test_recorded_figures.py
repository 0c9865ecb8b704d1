"""Figures of measured runs on the pages come from their record, docs/benchmarks/recorded_runs.toml: the site's pages
take them with the {recorded}`RUN.FIELD` role; what a role cannot reach (README.md, which GitHub shows as it is, and
the runs' output quoted in text fences) is checked here against the record and the code that prints it."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

from recorded_figures import recorded, runs  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [p for p in PAGES if "_build" not in p.parts]
# the pages a new user starts from and the guides: every figure of a recorded run on them is the record's
STARTING = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))] + [
    ROOT / "docs" / p for p in ("quickstart.md", "installation.md", "gpu_setup.md", "troubleshooting.md")
]
TEXT_FENCE = re.compile(r"```text\n(.*?)```", re.S)
SUMMARY = "held-out reward: "


def quoted_summaries(page: Path) -> list[str]:
    return [
        line
        for fence in TEXT_FENCE.findall(page.read_text())
        for line in fence.splitlines()
        if line.startswith(SUMMARY)
    ]


def test_every_recorded_run_says_when_and_where():
    for name, run in runs().items():
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", run["date"]), name
        assert run["machine"], name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_quoted_summary_line_is_what_the_code_prints_from_a_recorded_run(page):
    """The run's summary as scripts/train_grpo.py prints it (alignment/experiments/plotting.py's describe_held_out)
    from the first and last validation rows recorded: a quote of an older run, or a hand-typed change, fails."""
    printed = {recorded(f"{name}.summary") for name, run in runs().items() if "validations" in run}
    for line in quoted_summaries(page):
        assert line in printed, f"{page.name} quotes {line!r}; the recorded runs print {sorted(printed)}"


def test_the_readme_quotes_the_main_jobs_recorded_run():
    text = (ROOT / "README.md").read_text()
    run = runs()["keyword_demo"]
    assert quoted_summaries(ROOT / "README.md") == [recorded("keyword_demo.summary")]
    said = f"Its recorded run ({run['date']}, {run['machine']}, {run['steps']} steps, {run['wall']})"
    assert said in " ".join(text.split()), f"README.md should say: {said}"
    assert run["command"] in text


HAND_TYPED_POINTS = re.compile(r"[+-]\d+\.\d points")


@pytest.mark.parametrize("page", STARTING, ids=lambda p: p.name)
def test_the_starting_pages_type_no_measured_points_by_hand(page):
    """Outside the quoted output, a held-out gain on a starting page or a guide is the record's, through the role."""
    prose = TEXT_FENCE.sub("", page.read_text())
    if page.name == "README.md":  # GitHub shows it as it is: its one figure is checked above
        return
    assert not HAND_TYPED_POINTS.findall(prose), f"{page.name}: use {{recorded}}`RUN.points`"


def test_figures_are_derived_by_the_code_and_unknown_ones_refused():
    rows = runs()["keyword_demo"]["validations"]
    assert recorded("keyword_demo.points") == f"{100 * (rows[-1]['eval_reward'] - rows[0]['eval_reward']):+.1f}"
    assert recorded("keyword_demo.rewards").endswith(f"and {rows[-1]['eval_reward']:.3f}")
    assert recorded("test_suite.pytest").endswith(" s")
    for name in ("keyword_demo.no_such_figure", "no_such_run.date", "keyword_demo.validations"):
        with pytest.raises(ValueError):
            recorded(name)


def test_a_cupy_wheel_named_anywhere_is_the_locked_cudas():
    """`cupy-cudaNNx` must match the CUDA that uv.lock pins for torch (cuda-toolkit), in code, presets and pages."""
    from locked_versions import locked

    from alignment.ray.weight_sync import cupy_package

    major = locked("cuda-toolkit x.y").split(".")[0]
    files = [*PAGES, *(ROOT / "configs").rglob("*.toml"), *(ROOT / "alignment").rglob("*.py")]
    named = {(path.name, wheel) for path in files for wheel in re.findall(r"cupy-cuda(\d+)x", path.read_text())}
    assert named and all(wheel == major for _, wheel in named), f"uv.lock's CUDA is {major}: {sorted(named)}"
    assert cupy_package().startswith("cupy-cuda")
