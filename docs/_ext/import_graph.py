"""The import graph of alignment/ by room, read from the source with the AST: which room imports which, any circle
between rooms (with the imports that close it) and the floors.

A room is a folder under the package (its modules together) or a module at its top; the package's own __init__ is a
room of its own. A room's floor is one above the highest room it imports from; floor 0 imports from no other room.
Every `import` and `from ... import` of a module of the package is an arrow, those inside functions (lazy imports)
and under `if TYPE_CHECKING` too; a module loaded by a name computed at run time (importlib) is not.

    uv run python docs/_ext/import_graph.py     # the counts, the floors and the arrows between folders; any circle

The documentation build draws docs/concepts/architecture.md from it (its `import-graph` directive),
and tests/test_import_graph.py fails on any circle, printing the imports that close it.
"""

import ast
import sys
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INIT = "__init__"  # the room of the package's own __init__.py


@dataclass
class ImportGraph:
    """`arrows`: (importing module, imported module) pairs between two modules of the package, by dotted name."""

    package: str
    modules: dict[str, Path]  # dotted name -> file (a package's is its __init__.py)
    arrows: set[tuple[str, str]] = field(default_factory=set)

    def room(self, module: str) -> str:
        """`grpo/` for alignment.grpo and everything under it, `grpo_run` for the module alignment/grpo_run.py."""
        parts = module.split(".")
        if len(parts) == 1:
            return INIT
        top = ".".join(parts[:2])
        return f"{parts[1]}/" if self.modules[top].name == "__init__.py" else parts[1]

    @property
    def rooms(self) -> list[str]:
        return sorted({self.room(m) for m in self.modules}, key=_room_order)

    def room_arrows(self) -> dict[str, set[str]]:
        """room -> the other rooms it imports from."""
        out: dict[str, set[str]] = {room: set() for room in self.rooms}
        for source, target in self.arrows:
            if self.room(source) != self.room(target):
                out[self.room(source)].add(self.room(target))
        return out

    def room_circles(self) -> list[list[str]]:
        """The sets of rooms that import one another in a circle (each of two or more rooms), sorted."""
        return [sorted(c, key=_room_order) for c in _strongly_connected(self.room_arrows()) if len(c) > 1]

    def module_circles(self) -> list[list[str]]:
        graph: dict[str, set[str]] = {m: set() for m in self.modules}
        for source, target in self.arrows:
            graph[source].add(target)
        return [sorted(c) for c in _strongly_connected(graph) if len(c) > 1]

    def circles(self) -> list[list[str]]:
        """The shortest circle of rooms through each arrow that lies on one, each circle once, as the rooms in import
        order starting from its first room by name (the circle's last room imports the first)."""
        arrows, found = self.room_arrows(), set()
        for component in self.room_circles():
            inside = set(component)
            for source in component:
                for target in sorted(arrows[source] & inside, key=_room_order):
                    path = _shortest_path(arrows, target, source, inside)
                    start = min(range(len(path)), key=lambda i: _room_order(path[i]))
                    found.add(tuple(path[start:] + path[:start]))
        return [list(c) for c in sorted(found, key=lambda c: (len(c), [_room_order(r) for r in c]))]

    def circle_report(self) -> str:
        """Each circle between rooms with the imports that make each of its arrows; "" when there is none."""
        lines = []
        for circle in self.circles():
            lines.append("import circle: " + " -> ".join(circle + circle[:1]))
            for a, b in zip(circle, circle[1:] + circle[:1]):
                for source, target in sorted(self.arrows):
                    if self.room(source) == a and self.room(target) == b:
                        lines.append(f"    {source} -> {target}")
        for circle in self.module_circles():
            lines.append("import circle between modules: " + " <-> ".join(circle))
        return "\n".join(lines)

    def floors(self) -> dict[str, int]:
        """room -> floor; a ValueError with the circle report when rooms import one another in a circle."""
        report = self.circle_report()
        if report:
            raise ValueError(report)
        arrows, floor = self.room_arrows(), {}

        def height(room: str) -> int:
            if room not in floor:
                floor[room] = 1 + max((height(r) for r in arrows[room]), default=-1)
            return floor[room]

        for room in self.rooms:
            height(room)
        return floor


def _room_order(room: str) -> tuple[str, str]:
    return room.rstrip("/"), room


def _shortest_path(arrows: dict[str, set[str]], start: str, end: str, within: set[str]) -> list[str]:
    """The rooms from `start` to `end` along the fewest arrows, both included (breadth first, inside `within`)."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue and end not in came_from:
        room = queue.popleft()
        for following in sorted(arrows[room] & within, key=_room_order):
            if following not in came_from:
                came_from[following] = room
                queue.append(following)
    path, room = [], end
    while room is not None:
        path.append(room)
        room = came_from[room]
    return path[::-1]


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components of `graph` (node -> successors)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            found.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def modules_of(package_dir: Path) -> dict[str, Path]:
    """Every module of the package in `package_dir` by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_by(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `module` (read from `path`) imports anywhere in its code."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: `from . import x` in a package's module, `from ..y import z`
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:  # `from a.b import c`: the module a.b.c if there is one, else a.b itself
                submodule = f"{base}.{alias.name}"
                names.add(submodule if submodule in modules else base)
    return {name for name in names if name in modules and name != module}


def import_graph(package_dir: Path = ROOT / "alignment") -> ImportGraph:
    modules = modules_of(package_dir)
    graph = ImportGraph(package_dir.name, modules)
    for module, path in modules.items():
        graph.arrows |= {(module, target) for target in imported_by(module, path, modules)}
    return graph


def counts(graph: ImportGraph) -> str:
    """One paragraph: modules, arrows, rooms, floors, circles."""
    folders = [r for r in graph.rooms if r.endswith("/")]
    tops = [r for r in graph.rooms if not r.endswith("/") and r != INIT]
    in_folders = [m for m in graph.modules if graph.room(m).endswith("/") and graph.modules[m].name != "__init__.py"]
    between = graph.room_arrows()
    n_room_arrows = sum(len(t) for t in between.values())
    n_folder_arrows = sum(1 for r, ts in between.items() for t in ts if r.endswith("/") and t.endswith("/"))
    circles = graph.room_circles() or graph.module_circles()
    floors = "" if circles else f" on {max(graph.floors().values()) + 1} floors"
    return (
        f"{len(graph.modules)} modules: {len(tops)} at the top of {graph.package}/, {len(in_folders)} in "
        f"{len(folders)} folders and their {len(folders)} __init__.py files, and the package's own __init__.py; "
        f"{len(graph.arrows)} import arrows between modules; {len(graph.rooms)} rooms ({len(folders)} folders, "
        f"{len(tops)} top modules, the package's __init__){floors}, with {n_room_arrows} arrows between rooms, "
        f"{n_folder_arrows} of them between two folders; "
        + ("import circles: see below." if circles else "no import circle between modules or between rooms.")
    )


def modules_per_folder(graph: ImportGraph) -> str:
    per: dict[str, int] = defaultdict(int)
    for module, path in graph.modules.items():
        if graph.room(module).endswith("/") and path.name != "__init__.py":
            per[graph.room(module)] += 1
    return ", ".join(f"{room} {n}" for room, n in sorted(per.items(), key=lambda kv: (-kv[1], kv[0])))


def floors_drawing(graph: ImportGraph) -> str:
    """The rooms floor by floor, the top floor first."""
    floors = graph.floors()
    lines = []
    for level in range(max(floors.values()), -1, -1):
        rooms = [r for r in graph.rooms if floors[r] == level]
        lines.append(f"{level:<2} " + "   ".join(rooms))
    return "\n".join(lines)


def folder_arrows(graph: ImportGraph) -> str:
    """Each folder and the folders it imports from."""
    between = graph.room_arrows()
    folders = [r for r in graph.rooms if r.endswith("/")]
    width = max(len(f) for f in folders)
    lines = []
    for folder in folders:
        targets = sorted((t for t in between[folder] if t.endswith("/")), key=_room_order)
        if targets:
            lines.append(f"{folder:<{width}} -> " + " ".join(targets))
    return "\n".join(lines)


PARTS = {"counts": counts, "modules-per-folder": modules_per_folder, "floors": floors_drawing, "folders": folder_arrows}


def setup(app):  # noqa: ANN001, ANN201 (Sphinx's extension entry point)
    """The `import-graph` directive: ```{import-graph} PART``` draws PART (counts, modules-per-folder, floors or
    folders) of the package as it is when the site is built; a circle between rooms fails the build."""
    from docutils import nodes
    from sphinx.util.docutils import SphinxDirective

    class ImportGraphDirective(SphinxDirective):
        required_arguments = 1

        def run(self) -> list:
            part = self.arguments[0]
            if part not in PARTS:
                raise self.error(f"import-graph: {part!r} is not one of {', '.join(PARTS)}")
            graph = import_graph()
            for path in graph.modules.values():
                self.env.note_dependency(str(path))  # a changed import redraws the page
            report = graph.circle_report()
            if report:
                raise self.error(report)
            text = PARTS[part](graph)
            return [nodes.literal_block(text, text) if part in ("floors", "folders") else nodes.paragraph(text, text)]

    app.add_directive("import-graph", ImportGraphDirective)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def main() -> int:
    graph = import_graph()
    report = graph.circle_report()
    print(counts(graph), "\n")
    print("modules per folder:", modules_per_folder(graph), "\n")
    if report:
        print(report)
        return 1
    print(floors_drawing(graph), "\n")
    print(folder_arrows(graph))
    return 0


if __name__ == "__main__":
    sys.exit(main())
