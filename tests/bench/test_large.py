"""Smoke test of benchmarks/speed/large.py at a tiny size: the corpus it streams equals the
scale benchmark's, the build runs as the CLI in a child process, and the JSON and table it
writes hold every figure; recall of the exact (flat) index is 1. No timing is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.bench_data import tiny_datasets

from benchmarks import common
from benchmarks.speed import large


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_datasets(tmp_path_factory.mktemp("datasets"))


def test_streamed_corpus_equals_the_scale_benchmarks(data: Path, tmp_path: Path) -> None:
    sentences, _ = common.read_texts(data)
    path = tmp_path / "c.jsonl"
    size = large.write_corpus(sentences, 150, path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert size == path.stat().st_size
    assert [r["answer"] for r in rows] == common.make_corpus(sentences, 150)[0]
    assert [r["id"] for r in rows] == list(range(150))


def test_a_tiny_run_writes_every_figure_and_its_table(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "large.json"
    argv = ["--answers", "120", "--work", str(tmp_path / "w"), "--questions", "30", "--truth-questions", "10"]
    results = large.main([*argv, "--data", str(data), "--out", str(out)])
    assert json.loads(out.read_text())["sizes"] == results["sizes"]
    (size,) = results["sizes"]
    assert size["answers"] == 120 and size["recombined"] == 60
    assert size["index"]["kind"] == "flat" and size["recall_at_10"] == {
        "recall": 1.0,
        "questions": 10,
        "exact_seconds": size["recall_at_10"]["exact_seconds"],
    }
    build = size["build"]
    assert build["peak_anon_mb"] > 0 and build["peak_rss_mb"] >= build["peak_anon_mb"] and build["disk_bytes"] > 0
    for memory in (size["load"]["memory_before_mb"], size["load"]["memory_after_mb"], size["memory_after_searches_mb"]):
        assert 0 < memory["anon"] <= memory["rss"]
    assert not (tmp_path / "w" / "index").exists() and not (tmp_path / "w" / "corpus.jsonl").exists()
    table = large.readme_body(results)
    assert table.count("\n| 120 |") == 2 and "flat" in table  # its row, and its split row
    again = large.main([*argv, "--answers", "90", "--data", str(data), "--out", str(out), "--merge"])
    assert [s["answers"] for s in again["sizes"]] == [90, 120]  # --merge keeps the other size
