"""Claims are checked: every generated README section equals what its results file renders today."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import readme_markers  # noqa: E402

SECTIONS = readme_markers.sections()


def test_every_generated_section_has_a_generator() -> None:
    assert SECTIONS, "the README has no generated sections"
    unknown = sorted(set(SECTIONS) - set(readme_markers.GENERATORS))
    assert not unknown, f"README sections without a generating script: {unknown}"


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_readme_section_equals_its_results_file(name: str) -> None:
    module = importlib.import_module(readme_markers.GENERATORS[name])
    results = json.loads(Path(module.RESULTS).read_text(encoding="utf-8"))
    assert SECTIONS[name] == module.readme_body(results).rstrip("\n") + "\n"


def test_sections_reads_what_replace_section_wrote(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- x:start -->\nold\n<!-- x:end -->\nb\n", encoding="utf-8")
    assert readme_markers.replace_section("x", "new | 1\n", readme)
    assert readme_markers.sections(readme) == {"x": "new | 1\n"}
    assert readme.read_text(encoding="utf-8") == "a\n<!-- x:start -->\nnew | 1\n<!-- x:end -->\nb\n"
