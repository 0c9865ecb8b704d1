"""The package's layering: no room (a folder of alignment/ or a module at its top) imports one that imports it back,
lazy imports inside functions included, and the floors put each subsystem above what it stands on
(docs/_ext/import_graph.py, which also draws docs/concepts/architecture.md)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
from import_graph import ROOT, import_graph  # noqa: E402

PRIMITIVES = ("advantages", "losses", "masked", "grpo_step", "sft", "logprobs", "grader", "kl", "pass_at_k", "prompts")


def write_package(root: Path, files: dict[str, str]) -> Path:
    """A package `pkg` under `root` with the given modules (relative path -> source); __init__.py files added."""
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    for folder in [root / "pkg", *(p for p in (root / "pkg").rglob("*") if p.is_dir())]:
        (folder / "__init__.py").touch()
    return root / "pkg"


def test_no_import_circle_between_rooms_or_modules():
    graph = import_graph()
    assert len(graph.modules) > 100 and len(graph.arrows) > 300  # the whole package was read
    report = graph.circle_report()
    assert report == "", "imports that run back up:\n" + report


def test_every_arrow_between_rooms_runs_down_and_each_subsystem_stands_above_what_it_uses():
    graph = import_graph()
    floors = graph.floors()
    for room, targets in graph.room_arrows().items():
        for target in targets:
            assert floors[room] > floors[target], f"{room} (floor {floors[room]}) -> {target} ({floors[target]})"
    assert all(floors[p] <= 3 for p in PRIMITIVES), {p: floors[p] for p in PRIMITIVES}
    # what GRPO needs of episodes is below it; the warm start's SFT run is above run/ and supervised/
    assert floors["envs/"] < floors["grpo/"] < floors["grpo_run"] < floors["experiments/"]
    assert floors["envs/"] < floors["kissing/"] < floors["grpo/"]
    assert floors["run/"] < floors["supervised/"] < floors["sft_run"]
    assert floors["run/"] < floors["grpo/"] < floors["ray/"]


def test_a_circle_closed_by_a_lazy_import_is_found_with_the_imports_that_make_it(tmp_path):
    package = write_package(
        tmp_path,
        {
            "low/base.py": "import json\n",
            "low/tools.py": "from pkg.low.base import json\n\ndef later():\n    from pkg.high import loop\n",
            "high/loop.py": "from ..low import tools\nfrom . import settings\n",
            "high/settings.py": "",
            "top.py": "import pkg.high.loop\n",
        },
    )
    graph = import_graph(package)
    assert ("pkg.low.tools", "pkg.high.loop") in graph.arrows  # inside a function
    assert ("pkg.high.loop", "pkg.low.tools") in graph.arrows  # relative, two levels
    assert ("pkg.high.loop", "pkg.high.settings") in graph.arrows  # `from . import` a sibling module
    assert ("pkg.low.tools", "pkg.low.base") in graph.arrows  # a name from a module: the module
    assert graph.room_circles() == [["high/", "low/"]]
    report = graph.circle_report()
    assert report.splitlines() == [
        "import circle: high/ -> low/ -> high/",
        "    pkg.high.loop -> pkg.low.tools",
        "    pkg.low.tools -> pkg.high.loop",
        "import circle between modules: pkg.high.loop <-> pkg.low.tools",
    ]
    with pytest.raises(ValueError, match="import circle: high/ -> low/ -> high/"):
        graph.floors()


def test_floors_count_up_from_the_rooms_that_import_no_other(tmp_path):
    package = write_package(
        tmp_path,
        {
            "util/files.py": "",
            "core.py": "from pkg.util.files import *\n",
            "engine/run.py": "from pkg import core\nfrom pkg.util import files\n",
            "app.py": "def main():\n    import pkg.engine.run\n",
        },
    )
    graph = import_graph(package)
    assert graph.floors() == {"__init__": 0, "util/": 0, "core": 1, "engine/": 2, "app": 3}
    assert graph.room_arrows()["engine/"] == {"core", "util/"}


def test_a_circle_between_two_modules_of_one_room_is_reported(tmp_path):
    package = write_package(tmp_path, {"a/x.py": "from pkg.a import y\n", "a/y.py": "from pkg.a.x import *\n"})
    graph = import_graph(package)
    assert graph.room_circles() == []
    assert graph.circle_report() == "import circle between modules: pkg.a.x <-> pkg.a.y"


def test_the_architecture_page_draws_its_floors_from_this_code():
    page = (ROOT / "docs" / "concepts" / "architecture.md").read_text()
    for part in ("counts", "floors", "folders", "modules-per-folder"):
        assert f"```{{import-graph}} {part}\n```" in page
