"""Import Ray through here: the package's __init__ has switched off uv run's runtime env (Ray reads the flag when
it is first imported; see alignment/ray/__init__.py)."""

import ray

__all__ = ["ray"]
