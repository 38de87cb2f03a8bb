"""The load benchmark (benchmarks/speed/load.py): resident memory of a fresh process after a load."""

from __future__ import annotations

from pathlib import Path

from benchmarks.common import rss_mb
from benchmarks.speed import load
from qaindex import Ranker

FAQ = Path(__file__).resolve().parents[2] / "examples" / "faq.jsonl"


def test_rss_after_a_load_is_measured_in_a_fresh_process(tmp_path: Path) -> None:
    index = tmp_path / "index"
    Ranker.build(FAQ, index_kind="flat").save(index)
    for verify in (False, True):
        imported, loaded = load.rss_after_load(index, verify=verify)
        # loading (the model's ONNX sessions, the index's files) adds to what importing qaindex
        # holds; both are a separate process's figures, of the order of this test process's
        assert 10 < imported < loaded < rss_mb() + 500
