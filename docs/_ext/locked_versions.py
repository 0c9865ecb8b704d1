"""Versions and platforms from uv.lock and pyproject.toml, for the installation page: what `uv sync` installs is
what the page says, because the page is built from the same files.

    locked("torch")                 the one version of torch uv.lock pins, e.g. 2.13.0
    locked("cuda-toolkit x.y")      its first two parts, e.g. 13.0
    locked("torch wheels")          the platforms its locked wheels are built for, e.g. Linux x86_64, Windows x86_64
    locked("requires-python")       the Python versions the lock was resolved for, e.g. >=3.11, <3.13
    extras()                        each optional extra: its requirement, the version locked, where it installs

Nothing here imports Sphinx (docs/_ext/site_directives.py renders it).
"""

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LOCK, PYPROJECT = ROOT / "uv.lock", ROOT / "pyproject.toml"
# PEP 508 marker values as people name them
PLATFORMS = {"linux": "Linux", "darwin": "macOS", "win32": "Windows"}


@functools.cache
def lock() -> dict[str, Any]:
    return tomllib.loads(LOCK.read_text())


def package(name: str) -> dict[str, Any]:
    """The one entry of `name` in uv.lock; a ValueError if it pins none or several versions."""
    entries = [p for p in lock()["package"] if p["name"] == name]
    versions = sorted({p["version"] for p in entries})
    if len(versions) != 1:
        found = ", ".join(versions) if versions else "none"
        raise ValueError(f"uv.lock pins {found} for {name!r}: expected exactly one version")
    return entries[0]


def locked(request: str) -> str:
    """`NAME`, `NAME x.y` (the first two parts of its version), `NAME wheels` (`wheels(NAME)`) or
    `requires-python`."""
    name, _, parts = request.strip().partition(" ")
    if name == "requires-python":
        return lock()["requires-python"]
    version = package(name)["version"]
    if parts == "x.y":
        return ".".join(version.split(".")[:2])
    if parts == "wheels":
        return wheels(name)
    if parts:
        raise ValueError(f"{request!r}: expected NAME, NAME x.y or NAME wheels")
    return version


def wheels(name: str) -> str:
    """The operating systems and machines the locked wheels of `name` are built for, or "any platform"."""
    found: dict[str, None] = {}
    for wheel in package(name).get("wheels", []):
        tags = wheel["url"].rsplit("/", 1)[-1].removesuffix(".whl").split("-")[-1]
        for tag in tags.split("."):
            if tag == "any":
                found["any platform"] = None
            elif match := re.fullmatch(r"macosx_(\d+)_\d+_(\w+)", tag):
                found[f"macOS {match.group(1)}+ {match.group(2)}"] = None
            elif match := re.fullmatch(r"(?:many|musl)linux(?:\d+|_\d+_\d+)_(\w+)", tag):
                found[f"Linux {match.group(1)}"] = None
            elif match := re.fullmatch(r"win_(\w+)", tag):
                found[f"Windows {'x86_64' if match.group(1) == 'amd64' else match.group(1)}"] = None
    if not found:
        raise ValueError(f"uv.lock lists no wheels for {name!r}")
    return ", ".join(sorted(found))


def platforms(marker: str) -> str:
    """`sys_platform == 'linux' and platform_machine == 'x86_64'` as `Linux x86_64`; other markers as written."""
    clauses = [c.strip() for c in marker.split(" and ")]
    words = []
    for clause in clauses:
        match = re.fullmatch(r"(sys_platform|platform_machine)\s*==\s*['\"]([\w.-]+)['\"]", clause)
        if match is None:
            return marker
        key, value = match.groups()
        words.append(PLATFORMS.get(value, value) if key == "sys_platform" else value)
    return " ".join(words)


@dataclass(frozen=True)
class Extra:
    name: str
    requirement: str  # as pyproject.toml gives it, without its marker
    package: str
    version: str  # the version uv.lock pins
    where: str  # the platforms its marker allows ("everywhere" without one)


def extras() -> list[Extra]:
    out = []
    for name, requirements in tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"].items():
        for requirement in requirements:
            spec, _, marker = requirement.partition(";")
            package = re.match(r"[A-Za-z0-9_.-]+", spec.strip()).group(0)
            out.append(
                Extra(name, spec.strip(), package, locked(package), platforms(marker) if marker else "everywhere")
            )
    return out
