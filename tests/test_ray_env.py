"""Ray's uv integration stays off however a user reaches Ray: whichever module is imported first, and in a fresh clone
run the way the README says.

Under `uv run`, Ray (when RAY_ENABLE_UV_RUN_RUNTIME_ENV is not 0 at its first import) builds a second virtual
environment for its workers in its session folder; their checkpoints then land there and the run fails at its end.
"""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLAG = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
TOP_LEVEL = re.compile(r"^(import ray\b|from ray\b|from alignment\.ray\b|import alignment\.ray\b)", re.M)
IMPORTS_RAY = re.compile(r"^\s*(import ray\b|from ray\b|from alignment\.ray\b|import alignment\.ray\b)", re.M)

# Imports the module under test and stops at the moment anything first imports `ray` (what follows is not needed),
# printing the flag's value then.
WATCH = f"""
import importlib, importlib.abc, importlib.util, os, sys
class RayImported(Exception):
    pass
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ray":
            raise RayImported(os.environ.get("{FLAG}"))
sys.meta_path.insert(0, Watch())
target = sys.argv[1]
try:
    if target.endswith(".py"):
        spec = importlib.util.spec_from_file_location("module_under_test", target)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        importlib.import_module(target)
except RayImported as seen:
    print("ray imported with flag:", seen.args[0])
else:
    print("ray imported with flag: ray not imported")
"""


def ray_using_modules() -> list[str]:
    """Every library module, script and bench whose source imports Ray or the library's Ray package at its top."""
    found = []
    for folder in ("alignment", "scripts", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if IMPORTS_RAY.search(path.read_text()):
                relative = path.relative_to(ROOT)
                found.append(str(relative) if folder == "bench" else ".".join(relative.with_suffix("").parts))
    return found


def source_of(module: str) -> str:
    return (ROOT / (module if module.endswith(".py") else module.replace(".", "/") + ".py")).read_text()


def clean_env() -> dict[str, str]:
    """This process's environment less the flag (the suite's own Ray import set it here)."""
    return {k: v for k, v in os.environ.items() if k != FLAG} | {"PYTHONPATH": str(ROOT)}


def test_every_ray_using_module_is_found():
    modules = ray_using_modules()
    assert {
        "alignment.ray.cluster",
        "alignment.ray.driver",
        "scripts.train_grpo_ray",
        "bench/ray_strategies.py",
    } <= set(modules), modules


# The modules a user's command or code reaches Ray through: the two scripts, the sweep's library module and the driver.
# The package's other modules run alignment/ray/__init__.py (which sets the flag) first like the driver; they and the
# benches are checked under -m slow.
ENTRY_POINTS = ("scripts.train_grpo_ray", "scripts.sweep", "alignment.experiments.sweep", "alignment.ray.driver")


@pytest.mark.parametrize(
    "entry_points",
    [pytest.param(True, id="entry_points"), pytest.param(False, id="the_others", marks=pytest.mark.slow)],
)
def test_the_uv_switch_is_set_before_ray_is_imported(entry_points):
    """Each module imported first, in a fresh interpreter whose environment lacks the flag: Ray, if the module imports
    it, sees the flag at 0. (The interpreters run side by side: each spends seconds importing torch.)"""

    def first_import(module: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", WATCH, module]
        return subprocess.run(argv, cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=600)

    found = ray_using_modules()
    assert set(ENTRY_POINTS) <= set(found), found
    modules = [module for module in found if (module in ENTRY_POINTS) == entry_points]
    with ThreadPoolExecutor(4) as pool:
        results = dict(zip(modules, pool.map(first_import, modules)))
    for module, result in results.items():
        assert result.returncode == 0, f"{module}: {result.stderr[-3000:]}"
        line = result.stdout.strip().splitlines()[-1]
        expected = {"ray imported with flag: 0"}
        if not TOP_LEVEL.search(source_of(module)):
            expected.add("ray imported with flag: ray not imported")  # imports Ray only inside a function
        assert line in expected, f"{module}: {line}"


README_MARKER = re.compile(
    r"<!--\s*guide-test:\s*small:(.*?)-->\s*\n```bash\n(uv run scripts/train_grpo_ray\.py.*?)\n```", re.S
)


@pytest.mark.slow
def test_the_readme_ray_command_runs_in_a_fresh_clone(tmp_path):
    """The README's Ray command, exactly as a new user runs it (`uv run`, nothing set), in a fresh clone of the
    committed repository, at the README's small size: the policy, the plots and a resumable checkpoint are written
    inside the clone."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH")
    small, command = README_MARKER.search((ROOT / "README.md").read_text()).groups()
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k != FLAG and not k.startswith(("VIRTUAL_ENV", "UV_PROJECT"))}
    argv = [uv, *command.split()[1:], *small.split()]
    result = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=3600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = clone / "outputs" / "guide_tests" / "readme_ray"
    assert (out / "policy").is_dir() and (out / "checkpoint" / "policy").is_dir(), sorted(out.iterdir())
    assert (out / "metrics.jsonl").is_file()
    assert list(out.glob("plots/*.png")), sorted(p.name for p in out.rglob("*"))
