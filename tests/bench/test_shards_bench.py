"""Smoke test of benchmarks/speed/shards.py at a tiny size: its JSON and table, and the shard
sets' hits equal to one index's (flat shards). No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.bench_data import tiny_datasets

from benchmarks.speed import shards

pytest.importorskip("Stemmer")


def test_the_benchmark_finds_the_same_hits_and_writes_its_table(tmp_path: Path) -> None:
    (tmp_path / "datasets").mkdir()
    data = tiny_datasets(tmp_path / "datasets")
    out = tmp_path / "shards.json"
    args = ["--size", "90", "--shards", "2,3", "--questions", "8", "--data", str(data), "--out", str(out)]
    shards.main(args)
    result = json.loads(out.read_text())
    assert [r["system"] for r in result["rows"]] == ["one index", "2 shards (threads)", "3 shards (threads)"]
    for row in result["rows"][1:]:
        for mode in ("hybrid", "dense"):
            assert row[mode]["same_hits"] == 1.0 and row[mode]["largest_score_gap"] < 1e-5
    table = shards.readme_body(result)
    assert "| 3 shards (threads) |" in table and "100.0% / 100.0%" in table
