"""The generated parts of README.md, between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``.

Every generated section is owned by one benchmark script, listed in :data:`GENERATORS`: the
script's module has a ``RESULTS`` path (its results file) and a ``readme_body(results)``
function that renders the section from it. The script calls :func:`replace_section` after a
run, and ``tests/test_claims.py`` checks that every section in the README equals what its
results file renders today, so a README number can never drift from the figure its script
measured.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

# README section name -> the benchmarks/ module that generates it.
GENERATORS: dict[str, str] = {
    "search-bench": "bench_search",
    "reproduction": "reproduce",
    "reliability": "reliability_report",
    "pooled": "pooled",
    "scale": "bench_scale",
}

_MARKER = re.compile(r"<!-- ([a-z0-9-]+):start -->")


def replace_section(name: str, body: str, readme: Path = README) -> bool:
    """Replace the text between the markers of ``name``; False when the markers are absent."""
    text = readme.read_text(encoding="utf-8")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    if start not in text or end not in text:
        return False
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(head + start + "\n" + body.rstrip("\n") + "\n" + end + tail, encoding="utf-8")
    return True


def sections(readme: Path = README) -> dict[str, str]:
    """Every generated section of the README: ``{name: body}`` (body as written by replace_section)."""
    text = readme.read_text(encoding="utf-8")
    out = {}
    for match in _MARKER.finditer(text):
        name = match.group(1)
        rest = text[match.end() :]
        end = f"<!-- {name}:end -->"
        if end not in rest:
            raise ValueError(f"{readme}: section {name!r} has no end marker")
        out[name] = rest.split(end, 1)[0].strip("\n") + "\n"
    return out
