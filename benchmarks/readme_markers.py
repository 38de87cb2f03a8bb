"""The generated parts of README.md and docs/*.md, between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``.

Every generated section is owned by one benchmark, listed in :data:`GENERATORS`: its module
(run as ``python -m benchmarks.JOB.NAME``) has a ``RESULTS`` path (its results file) and a ``readme_body(results)``
function that renders the section from it. The script calls :func:`replace_section` after a
run, which rewrites the section in whichever documentation file holds its markers (README.md
or a page under docs/), and ``tests/docs/test_claims.py`` checks that every section in every such
file equals what its results file renders today, so a documented number can never drift from
the figure its script measured.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.common import ROOT

README = ROOT / "README.md"

# section name -> the module of the benchmarks package that generates it.
GENERATORS: dict[str, str] = {
    "search-bench": "benchmarks.speed.search",
    "reproduction": "benchmarks.reproduction.reproduce",
    "reliability": "tests.robustness.reliability_report",
    "pooled": "benchmarks.quality.pooled",
    "scale": "benchmarks.speed.scale",
    "summary": "benchmarks.summary_table",
    "adaptation": "benchmarks.quality.adaptation",
    "hybrid-table": "benchmarks.quality.hybrid",
    "offtopic-table": "benchmarks.quality.offtopic",
    "filters-table": "benchmarks.quality.filters",
    "search-keys": "benchmarks.quality.search_keys",
    "passages": "benchmarks.quality.passages",
    "ranking-rules": "benchmarks.quality.ranking_rules",
    "fusion-pseudo": "benchmarks.quality.fusion_pseudo",
    "score-features": "benchmarks.quality.score_features",
    "adapt-build": "benchmarks.speed.adapt_build",
    "minilm-tier": "benchmarks.speed.minilm_tier",
    "large": "benchmarks.speed.large",
    "shards": "benchmarks.speed.shards",
}

_MARKER = re.compile(r"<!-- ([a-z0-9-]+):start -->")


def documents(root: Path = ROOT) -> list[Path]:
    """The files that may hold generated sections: README.md, then docs/*.md in name order."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def replace_section(name: str, body: str, readme: Path | None = None) -> bool:
    """Replace the text between the markers of ``name``; False when no file has them.

    ``readme`` None looks for the markers in every file of :func:`documents`.
    """
    for path in [readme] if readme is not None else documents():
        text = path.read_text(encoding="utf-8")
        start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
        if start not in text or end not in text:
            continue
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        path.write_text(head + start + "\n" + body.rstrip("\n") + "\n" + end + tail, encoding="utf-8")
        return True
    return False


def sections(readme: Path = README) -> dict[str, str]:
    """Every generated section of one file: ``{name: body}`` (body as written by replace_section)."""
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


def all_sections(root: Path = ROOT) -> dict[tuple[str, str], str]:
    """Every generated section of every documentation file: ``{(file relative to root, name): body}``."""
    return {
        (path.relative_to(root).as_posix(), name): body
        for path in documents(root)
        for name, body in sections(path).items()
    }
