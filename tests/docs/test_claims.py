"""Claims are checked: every generated section of README.md and docs/*.md equals what its results file renders today."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from benchmarks import readme_markers  # noqa: E402

SECTIONS = readme_markers.all_sections()


def test_every_generated_section_has_a_generator() -> None:
    assert SECTIONS, "the documentation has no generated sections"
    unknown = sorted(key for key in SECTIONS if key[1] not in readme_markers.GENERATORS)
    assert not unknown, f"generated sections without a generating script: {unknown}"


def test_every_generator_has_one_section() -> None:
    names = [name for _, name in SECTIONS]
    assert sorted(names) == sorted(readme_markers.GENERATORS), "each section must appear exactly once"


@pytest.mark.parametrize(("path", "name"), sorted(SECTIONS), ids=[f"{p}:{n}" for p, n in sorted(SECTIONS)])
def test_section_equals_its_results_file(path: str, name: str) -> None:
    module = importlib.import_module(readme_markers.GENERATORS[name])
    results = json.loads(Path(module.RESULTS).read_text(encoding="utf-8"))
    assert SECTIONS[(path, name)] == module.readme_body(results).rstrip("\n") + "\n"


def test_sections_reads_what_replace_section_wrote(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("a\n<!-- x:start -->\nold\n<!-- x:end -->\nb\n", encoding="utf-8")
    assert readme_markers.replace_section("x", "new | 1\n", readme)
    assert readme_markers.sections(readme) == {"x": "new | 1\n"}
    assert readme.read_text(encoding="utf-8") == "a\n<!-- x:start -->\nnew | 1\n<!-- x:end -->\nb\n"


def test_sections_are_found_in_docs_pages(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("no sections\n", encoding="utf-8")
    page = tmp_path / "docs" / "performance.md"
    page.write_text("# P\n<!-- y:start -->\n| 1 |\n<!-- y:end -->\n", encoding="utf-8")
    assert readme_markers.all_sections(tmp_path) == {("docs/performance.md", "y"): "| 1 |\n"}
    assert readme_markers.documents(tmp_path) == [tmp_path / "README.md", page]


@pytest.mark.parametrize(
    ("module", "table", "runs"),
    [
        ("benchmarks.reproduce", "docs/reproduction-table.md", None),
        ("benchmarks.long_answers", "docs/long-answers-table.md", None),
        ("benchmarks.reproduce", "benchmarks/results/ap_cnn_trecqa_clean_8_epochs.md", "ap_cnn_trecqa_clean_8_epochs"),
        ("benchmarks.long_answers", "benchmarks/results/long_answers_5_epochs.md", "long_answers_5_epochs"),
    ],
)
def test_generated_table_equals_its_results_file(module: str, table: str, runs: str | None) -> None:
    """Each table equals what its runs file renders: the module's main file, or a side run's in benchmarks/results."""
    mod = importlib.import_module(module)
    path = Path(mod.RESULTS) if runs is None else ROOT / "benchmarks" / "results" / f"{runs}.json"
    results = json.loads(path.read_text(encoding="utf-8"))
    assert (ROOT / table).read_text(encoding="utf-8") == mod.render(results)
