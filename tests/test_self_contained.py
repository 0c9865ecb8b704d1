"""Nothing the repository ships names a path outside it: every tracked file outside tests/ is read, and a path
into a sibling folder (`../shared/...`), a `../` path that leaves the repository, or an absolute path of one machine
(/work, /root, /home/<user>, /Users/<user>) fails the test, naming the file and the line. A user's clone has
nothing beside it; the tests may still read `../shared/handouts` (and skip without it)."""

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SIBLING = re.compile(r"\.\./shared\b")
# ../ chains with what follows them (a path, a doc name); a URL's own `../` is no file path
RELATIVE = re.compile(r"(?<![\w:/.])((?:\.\./)+)([\w.{}*/-]*)")
# an absolute path of one machine: not part of a URL or a longer path, and not ~/... (anyone's home)
MACHINE = re.compile(r"(?<![\w.:/~-])/(?:work|root|home/[\w.-]+|Users/[\w.-]+)(?=/|\b)")


def tracked(repo: Path) -> list[str]:
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def tracked_text_files() -> list[Path]:
    """Every file git tracks outside tests/, binary files (a NUL byte in the first 8 KiB) left out."""
    files = []
    for name in tracked(REPO):
        path = REPO / name
        if not name.startswith("tests/") and path.is_file() and b"\0" not in path.open("rb").read(8192):
            files.append(path)
    return files


def repo_paths(files: list[str]) -> set[str]:
    """Every path the repository has, as `a/b/c`, from its files: each file (also without its suffix, as a doc is
    named) and each folder above one."""
    names = set(files) | {str(Path(f).with_suffix("")) for f in files}
    return names | {str(parent) for f in files for parent in Path(f).parents if parent != Path(".")}


def leaves_the_repo(source: Path, ups: str, rest: str, inside: set[str]) -> bool:
    """Whether `ups` + `rest`, a `../` path written in `source`, points outside the repository. It is read from the
    file's folder (a doc's link, a preset's `base`) or, in a command, from the repository root, so it stays inside
    only when it climbs no higher than the file's folder and lands on something the repository has (`inside`)."""
    if ups.count("../") > len(source.parent.relative_to(REPO).parts):
        return True
    rest = rest.rstrip("/.")
    return bool(rest) and not any(name == rest or name.endswith(f"/{rest}") for name in inside)


def offences(path: Path, inside: set[str]) -> list[str]:
    """Every path outside the repository that `path` names, as `file:line: what`; `inside`: repo_paths."""
    found = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        where = f"{path.relative_to(REPO)}:{number}"
        if SIBLING.search(line):
            found.append(f"{where}: names ../shared, which a clone does not have: {line.strip()[:160]}")
            continue
        for match in RELATIVE.finditer(line):
            if leaves_the_repo(path, match.group(1), match.group(2), inside):
                found.append(f"{where}: {match.group(0)!r} leaves the repository: {line.strip()[:160]}")
        for match in MACHINE.finditer(line):
            found.append(f"{where}: {match.group(0)!r} is one machine's absolute path: {line.strip()[:160]}")
    return found


def test_no_tracked_file_outside_tests_names_a_path_outside_the_repository():
    files = tracked_text_files()
    assert len(files) > 100 and any(f.suffix == ".toml" for f in files)  # the listing itself worked
    inside = repo_paths(tracked(REPO))
    found = [offence for path in files for offence in offences(path, inside)]
    assert not found, "paths outside the repository:\n" + "\n".join(found)


def files_under(root: Path) -> set[str]:
    return repo_paths([str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()])


@pytest.mark.parametrize(
    "name,text",
    [
        ("README.md", "uv run scripts/eval_zero_shot.py --dataset ../shared/data/gsm8k/test.jsonl"),
        ("docs/concepts/page.md", "see `../shared/handouts/pku-nlpdl-hw3.md`"),
        ("configs/preset.toml", 'dataset = "../data/gsm8k/train.jsonl"'),
        ("docs/page.md", "uv run python bench/grader.py --data ../../other/test.jsonl"),
        ("configs/experiments/preset.toml", 'base = "../../../elsewhere.toml"'),
        ("scripts/tool.py", 'CACHE = Path("/root/.cache/alignment")'),
        ("alignment/x.py", "# copied from /work/main/alignment/x.py"),
        ("docs/page.md", "the run in /home/alice/runs/grpo"),
    ],
)
def test_each_kind_of_outside_path_is_caught_and_named(tmp_path, monkeypatch, name, text):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    for folder in ("configs/experiments", "docs/concepts", "scripts", "alignment", "data/gsm8k"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    path = tmp_path / name
    path.write_text(f"first line\n{text}\n")
    [offence] = offences(path, files_under(tmp_path))
    assert offence.startswith(f"{name}:2: ")


@pytest.mark.parametrize(
    "name,text",
    [
        ("docs/concepts/page.md", "({doc}`../benchmarks/page`), ![run](../figures/run.png)"),
        ("configs/experiments/uw/preset.toml", 'base = "../../keyword.toml"'),
        ("README.md", "uv run scripts/eval_zero_shot.py --dataset data/gsm8k/test.jsonl"),
        ("docs/page.md", "see https://github.com/org/repo/tree/main/../docs and ~/work/notes"),
        ("alignment/x.py", "CACHE = Path.home() / '.cache'  # e.g. under the root user's home"),
    ],
)
def test_paths_inside_the_repository_pass(tmp_path, monkeypatch, name, text):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    for folder in ("configs/experiments/uw", "docs/concepts", "docs/benchmarks", "docs/figures", "alignment"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    for name_inside in ("docs/benchmarks/page.md", "docs/figures/run.png", "configs/keyword.toml"):
        (tmp_path / name_inside).write_text("")
    path = tmp_path / name
    path.write_text(text + "\n")
    assert offences(path, files_under(tmp_path)) == []
