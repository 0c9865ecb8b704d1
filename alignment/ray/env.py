"""Import Ray through here: under `uv run`, Ray would otherwise make every worker rebuild the virtual
environment (and hang without network); the flag is read when Ray is first imported."""

import os

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray  # noqa: E402

__all__ = ["ray"]
