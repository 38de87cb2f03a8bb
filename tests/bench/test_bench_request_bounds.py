"""The request-bounds benchmark (benchmarks.speed.request_bounds) at a tiny size: every request runs
in its own process, the bounded ones succeed and the endless input is refused by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.speed import request_bounds

pytest.importorskip("Stemmer")


@pytest.mark.skipif(not os.access(request_bounds.TIME, os.X_OK), reason="needs GNU time")
def test_the_benchmark_measures_every_request(tmp_path: Path) -> None:
    out = request_bounds.measure(tmp_path, answers=300, line_mb=1, cli_questions=2)
    runs = [*out["long_questions"].values(), out["huge_k"]["run"], out["huge_k_baseline"]]
    runs += [out["long_line"]["hybrid"], out["long_line"]["no-hybrid"]]
    assert all(r["exit_code"] == 0 and r["peak_rss_mb"] > 0 for r in runs), runs
    assert out["huge_k"]["run"]["output"].startswith('{"question": ')
    assert out["dev_zero"]["exit_code"] == 1
    assert out["dev_zero"]["output"].startswith("Error: /dev/zero:1: line longer than 67,108,864 bytes")
