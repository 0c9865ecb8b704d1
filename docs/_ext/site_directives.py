"""The site's generated content, as Sphinx directives and roles (conf.py loads this extension):

    ```{cli-reference}```                     every script's arguments, options and settings (cli_reference.py)
    ```{preset-table}```                      every preset in configs/ (preset_table.py)
    {plan}`PRESET GPUSxGIB [FLAGS]: FIGURE`   one figure of a memory plan (plan_figures.py)
    {plan-constant}`NAME`                     one of the plan's assumptions, e.g. CUDA_CONTEXT_BYTES
    ```{plan-table} PRESET```                 a table of them: :rows: and :columns: separated by |
    ```{plan-output} PRESET GPUSxGIB [FLAGS]```   the plan as --plan-memory prints it
    {locked}`NAME`                            a version uv.lock pins (locked_versions.py)
    ```{extras-table}```                      pyproject.toml's extras with their locked versions and platforms
    {recorded}`RUN.FIELD`                     a figure of a measured run (recorded_figures.py)

A flag of the reference is a `std:option`, so any page links to it with {option}`train_grpo.py --loss-type`
(a flag that does not exist is a warning, so an error of the -W build). Every figure is computed while the site is
built; a request that fails is an error naming it.
"""

from pathlib import Path
from typing import Any

import cli_reference
import locked_versions
import plan_figures
import preset_table
import recorded_figures
from docutils import nodes
from docutils.parsers.rst import directives
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]


def inline(text: str, links: dict[str, str] | None = None) -> list[nodes.Node]:
    """Help or header text with its markup: `code`, flags (linked to their entry where `links` has them), docs pages
    (linked), repository paths and environment variables (as code)."""
    out: list[nodes.Node] = []
    for kind, value in cli_reference.spans(text):
        if kind == "text":
            out.append(nodes.Text(value))
        elif kind == "flag" and links and value in links:
            out.append(nodes.reference("", "", nodes.literal(value, value), refid=links[value], internal=True))
        elif kind == "doc" and (ROOT / "docs" / f"{value}.md").is_file():
            literal = nodes.literal(f"docs/{value}.md", f"docs/{value}.md")
            out.append(
                addnodes.pending_xref(
                    "", literal, refdomain="std", reftype="doc", reftarget=f"/{value}", refexplicit=True, refwarn=True
                )
            )
        else:
            out.append(nodes.literal(value, value))
    return out


def paragraph(*children: nodes.Node | str) -> nodes.paragraph:
    return nodes.paragraph("", "", *(nodes.Text(c) if isinstance(c, str) else c for c in children))


def code(text: str) -> nodes.literal:
    return nodes.literal(text, text)


def joined(items: list[nodes.Node], separator: str = ", ") -> list[nodes.Node]:
    out: list[nodes.Node] = []
    for i, item in enumerate(items):
        if i:
            out.append(nodes.Text(separator))
        out.append(item)
    return out


class Spanning(list):
    """A row of one cell across every column (a group's heading inside a table)."""


def table(
    headers: list[str],
    rows: list[list[list[nodes.Node]] | Spanning],
    ids: list[str | None] | None = None,
    widths: list[int] | None = None,
) -> nodes.table:
    """A docutils table; each cell a list of inline nodes; `widths` in relative units (docs/_static/site.css lets
    code in these tables wrap)."""
    group = nodes.tgroup(cols=len(headers))
    group += [nodes.colspec(colwidth=w) for w in widths or [1] * len(headers)]
    head = nodes.row()
    head += [nodes.entry("", paragraph(h)) for h in headers]
    group += nodes.thead("", head)
    body = nodes.tbody()
    for i, cells in enumerate(rows):
        row = nodes.row(ids=[ids[i]] if ids and ids[i] else [])
        if isinstance(cells, Spanning):
            row += nodes.entry("", paragraph(*cells), morecols=len(headers) - 1)
        else:
            row += [nodes.entry("", paragraph(*cell)) for cell in cells]
        body += row
    group += body
    return nodes.table("", group, classes=["site-table"] + (["colwidths-given"] if widths else []))


def section(title: list[nodes.Node], section_id: str) -> nodes.section:
    node = nodes.section(ids=[section_id])
    node += nodes.title("", "", *title)
    return node


class CLIReference(SphinxDirective):
    """Every script in scripts/ with its arguments, options and settings; shared settings once, at the end."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        reference = cli_reference.read_reference()
        for path in [*ROOT.joinpath("scripts").glob("*.py"), *ROOT.joinpath("alignment").rglob("*.py")]:
            self.env.note_dependency(str(path))
        shared = [g for g in reference.groups if g.script is None]
        out: list[nodes.Node] = [
            table(
                ["script", "what it does"],
                [
                    [
                        [nodes.reference("", "", code(s.program), refid=script_id(s.program), internal=True)],
                        inline(s.summary),
                    ]
                    for s in reference.scripts
                ],
            )
        ]
        for script in reference.scripts:
            links = reference.flags(script.program)
            node = section([code(script.program)], script_id(script.program))
            node += paragraph(*inline(script.summary))
            node += nodes.literal_block(script.usage, script.usage, language="text")
            if script.arguments:
                node += nodes.rubric("", "Arguments")
                node += [self.entry(e, script.program, links) for e in script.arguments]
            if script.options:
                node += nodes.rubric("", "Options")
                node += [self.entry(e, script.program, links) for e in script.options]
            own = [o for o in script.owners if reference.group(o).script == script.program]
            for owner in own:
                node += nodes.rubric("", "Settings")
                node += [self.entry(e, script.program, links) for e in reference.group(owner).entries]
            others = [reference.group(o) for o in script.owners if o not in own]
            if others:
                node += paragraph(
                    "Also every setting of ",
                    *joined([self.group_link(g) for g in others]),
                    ": the same flags, listed once.",
                )
            out.append(node)
        if shared:
            node = section([nodes.Text("Settings several scripts share")], "shared-settings")
            for group in shared:
                sub = section([code(group.owner.__name__)], group_id(group))
                sub += paragraph(*inline(cli_reference.summary_of(group.owner)))
                sub += paragraph(
                    "Taken by ",
                    *joined(
                        [nodes.reference("", "", code(p), refid=script_id(p), internal=True) for p in group.programs]
                    ),
                    ".",
                )
                first = group.programs[0]
                sub += [self.entry(e, first, reference.flags(first)) for e in group.entries]
                node += sub
            out.append(node)
        return out

    def group_link(self, group: cli_reference.Group) -> nodes.Node:
        where = f" ({group.script})" if group.script else ""
        return nodes.reference(
            "", "", code(group.owner.__name__), nodes.Text(where), refid=group_id(group), internal=True
        )

    def entry(self, entry: cli_reference.Entry, program: str, links: dict[str, str]) -> addnodes.desc:
        """One flag as a std:option, with an anchor (and a cross-reference target) for every script taking it."""
        std = self.env.get_domain("std")
        ids = [cli_reference.anchor(p, entry) for p in entry.programs]
        for p in entry.programs:
            for name in entry.names:
                std.add_program_option(p, name, self.env.docname, cli_reference.anchor(p, entry))  # type: ignore[attr-defined]
        desc = addnodes.desc(domain="std", objtype="option", desctype="option", classes=["std", "option"])
        desc["noindex"] = desc["no-index"] = True
        signature = addnodes.desc_signature("", "", ids=ids, classes=["sig", "sig-object"])
        names = " / ".join(entry.names)
        metavar = entry.signature.removeprefix(names).strip() if entry.signature.startswith(names) else ""
        signature += addnodes.desc_name(names, names)
        if metavar:
            signature += addnodes.desc_addname(" " + metavar, " " + metavar)
        desc += signature
        content = addnodes.desc_content()
        if entry.help:
            content += paragraph(*inline(entry.help, links))
        facts: list[list[nodes.Node]] = []
        if entry.default is not None:
            facts.append([nodes.emphasis("", "default "), code(entry.default)])
        if entry.choices:
            facts.append([nodes.emphasis("", "choices "), *joined([code(c) for c in entry.choices])])
        if entry.key:
            facts.append([nodes.emphasis("", "config key "), code(entry.key)])
        if entry.resumable_in:
            where = "" if entry.resumable_in == entry.programs else " (" + ", ".join(entry.resumable_in) + ")"
            facts.append([nodes.emphasis("", "may change on "), code("--resume"), nodes.emphasis("", where)])
        if facts:
            content += paragraph(
                *[n for i, fact in enumerate(facts) for n in ([nodes.Text(" · ")] if i else []) + fact]
            )
        desc += content
        return desc


def script_id(program: str) -> str:
    return "script-" + program.removesuffix(".py")


def group_id(group: cli_reference.Group) -> str:
    return "settings-" + group.owner.__name__


class PresetTable(SphinxDirective):
    """Every preset in configs/ in one table, each row with an anchor (`preset-configs-pku-grpo`)."""

    def run(self) -> list[nodes.Node]:
        rows = preset_table.preset_rows()
        for path in ROOT.joinpath("configs").rglob("*.toml"):
            self.env.note_dependency(str(path))
        cells: list = []
        ids: list[str | None] = []
        folder = None
        for row in rows:
            parent, name = row.path.rsplit("/", 1)
            if parent != folder:
                folder = parent
                cells.append(Spanning([nodes.strong("", "", code(folder + "/"))]))
                ids.append(None)
            runs = [code("sweep.py"), nodes.Text(" → "), code(row.script)] if row.sweep else [code(row.script)]
            what = inline(row.summary)
            if row.arms:
                what += [nodes.Text(" Arms: "), *joined([code(a) for a in row.arms]), nodes.Text(".")]
            cells.append(
                [
                    [code(name)],
                    runs,
                    what,
                    joined([code(m) for m in row.models]),
                    joined([nodes.Text(d) for d in row.data], "; "),
                    [nodes.Text(row.machine)],
                ]
            )
            ids.append(nodes.make_id("preset-" + row.path.removesuffix(".toml")))
        headers = ["preset", "runs with", "what it does", "model", "data", "sized for"]
        return [table(headers, cells, ids, widths=[18, 14, 38, 12, 12, 6])]


def fail(directive: SphinxDirective, err: Exception) -> list[nodes.Node]:
    return [directive.state.document.reporter.error(str(err), line=directive.lineno)]


def plan_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = ()):
    """{plan}`PRESET GPUSxGIB [FLAGS]: FIGURE`"""
    request, _, field = text.rpartition(":")
    try:
        return inline(plan_figures.figure(request.strip(), field)), []
    except (ValueError, SystemExit) as err:
        return [], [inliner.reporter.error(f"{{plan}}`{text}`: {err!r}", line=lineno)]


class PlanTable(SphinxDirective):
    """A table of plan figures: a row per `:rows:` entry (a machine and/or flags), a column per `:columns:` entry
    (`HEADER = FIGURE @ MACHINE FLAGS`, header and words optional); each cell plans the preset with the row's and the
    column's words together."""

    required_arguments = 1
    option_spec = {"rows": directives.unchanged_required, "columns": directives.unchanged_required}
    option_spec["row-header"] = directives.unchanged

    def run(self) -> list[nodes.Node]:
        preset = self.arguments[0]
        rows = [r.strip() for r in self.options["rows"].split("|")]
        columns = []
        for spec in self.options["columns"].split("|"):
            header, _, rest = spec.rpartition("=")
            figure, _, args = rest.partition("@")
            columns.append(((header or figure).strip(), figure.strip(), args.strip()))
        try:
            cells = [
                [[code(row)]]
                + [
                    inline(plan_figures.figure(f"{preset} {row} {args}", figure, unit=False))
                    for _, figure, args in columns
                ]
                for row in rows
            ]
        except (ValueError, SystemExit) as err:
            return fail(self, err)
        return [table([self.options.get("row-header", "machine and flags")] + [c[0] for c in columns], cells)]


class PlanOutput(SphinxDirective):
    """The command and what its --plan-memory prints, as a console block."""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        try:
            plan = plan_figures.planned(self.arguments[0])
        except (ValueError, SystemExit) as err:
            return fail(self, err)
        text = f"$ {plan.command}\n{plan.text}"
        return [nodes.literal_block(text, text, language="console")]


def plan_constant_role(
    name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = ()
):
    """{plan-constant}`NAME`: an assumption of the memory plan."""
    try:
        return [nodes.Text(plan_figures.constant(text))], []
    except ValueError as err:
        return [], [inliner.reporter.error(f"{{plan-constant}}`{text}`: {err}", line=lineno)]


def recorded_role(
    name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = ()
):
    """{recorded}`RUN.FIELD`: a figure of a measured run (docs/benchmarks/recorded_runs.toml)."""
    inliner.document.settings.env.note_dependency(str(recorded_figures.RECORDED))
    try:
        return [nodes.Text(recorded_figures.recorded(text))], []
    except ValueError as err:
        return [], [inliner.reporter.error(f"{{recorded}}`{text}`: {err}", line=lineno)]


def locked_role(name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = ()):
    """{locked}`NAME` or {locked}`NAME x.y`: the version uv.lock pins."""
    try:
        return [nodes.Text(locked_versions.locked(text))], []
    except ValueError as err:
        return [], [inliner.reporter.error(f"{{locked}}`{text}`: {err}", line=lineno)]


class ExtrasTable(SphinxDirective):
    def run(self) -> list[nodes.Node]:
        for path in (locked_versions.LOCK, locked_versions.PYPROJECT):
            self.env.note_dependency(str(path))
        rows = [
            [[code(f"--extra {e.name}")], [code(e.requirement)], [code(e.version)], [nodes.Text(e.where)]]
            for e in locked_versions.extras()
        ]
        return [table(["extra", "installs", "uv.lock pins", "where it installs"], rows)]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cli-reference", CLIReference)
    app.add_directive("preset-table", PresetTable)
    app.add_directive("plan-table", PlanTable)
    app.add_directive("plan-output", PlanOutput)
    app.add_directive("extras-table", ExtrasTable)
    app.add_role("plan", plan_role)
    app.add_role("plan-constant", plan_constant_role)
    app.add_role("locked", locked_role)
    app.add_role("recorded", recorded_role)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
