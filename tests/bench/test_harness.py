"""The benchmarks' harness (benchmarks.common): parser, results files with their command, sweeps files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks import common


def test_the_parser_shares_data_and_out_and_shows_the_docstring() -> None:
    parser = common.argument_parser("A study.\n\nIt measures x.", data=True, out=Path("r.json"), variant=True)
    args = parser.parse_args([])
    assert (args.data, args.out, args.variant) == (common.DATA_DIR, Path("r.json"), None)
    args = parser.parse_args(["--data", "d", "--out", "o.json", "--variant", "1m"])
    assert (args.data, args.out, args.variant) == (Path("d"), Path("o.json"), "1m")
    assert "It measures x." in parser.format_help()
    bare = common.argument_parser(None).parse_args([])
    assert not hasattr(bare, "data") and not hasattr(bare, "out") and not hasattr(bare, "variant")


def test_a_results_file_records_its_command_and_wall_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/x/scale.py", "--sizes", "10 000"])
    path = common.write_results(tmp_path / "r.json", {"p50_ms": 1.5}, run=True)
    written = json.loads(path.read_text())
    assert written["p50_ms"] == 1.5 and written["run"]["seconds"] >= 0
    assert written["run"]["command"].endswith("--sizes '10 000'")  # quoted as a shell reads it back
    assert "run" not in json.loads(common.write_results(tmp_path / "plain.json", {"a": 1}).read_text())
    assert json.loads(common.write_results(tmp_path / "list.json", [1, 2], run=True).read_text()) == [1, 2]


def test_variants_share_one_sweeps_file_and_one_table(tmp_path: Path) -> None:
    main = tmp_path / "build_memory.json"
    assert common.sweeps_path(main) == tmp_path / "build_memory_sweeps.json"
    assert common.save_results(main, {"peak": 1}, "1m") == common.sweeps_path(main)
    common.save_results(main, {"peak": 2}, "1m_dense")
    common.save_results(main, {"peak": 3}, "1m")  # a variant run again replaces its own entry only
    assert not main.exists()
    assert json.loads(common.sweeps_path(main).read_text()) == {"1m": {"peak": 3}, "1m_dense": {"peak": 2}}
    assert common.read_sweep(common.sweeps_path(main), "1m_dense") == {"peak": 2}
    assert common.read_sweep(common.sweeps_path(main), "absent") is None
    assert common.read_sweep(tmp_path / "none.json", "1m") is None
    assert common.save_results(main, {"peak": 0}) == main and json.loads(main.read_text()) == {"peak": 0}
    text = common.render_sweeps(
        json.loads(common.sweeps_path(main).read_text()), lambda r: f"<!-- generated -->\npeak {r['peak']}\n"
    )
    assert text == "<!-- generated -->\n\n# 1m\n\npeak 3\n\n# 1m_dense\n\npeak 2\n"


def test_markdown_table() -> None:
    assert common.markdown_table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |"
