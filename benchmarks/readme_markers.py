"""Rewrite the generated parts of README.md, between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


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
