"""Fast versions of tests/robustness/reliability.py: kill loop, concurrent writers, corruption matrix.

The full run (>= 200 kills per operation, 50 writer pairs, an index with files above 64 MiB)
is ``python -m tests.robustness.reliability``; these run the same code with small counts, or
with the full run's kill loop and writer pairs under ``QAINDEX_ROBUSTNESS=full``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FULL = os.environ.get("QAINDEX_ROBUSTNESS") == "full"

from qaindex import Ranker  # noqa: E402
from tests.robustness import reliability  # noqa: E402


def test_kill_loop_leaves_old_or_new_content_and_no_debris(tmp_path: Path) -> None:
    # in a subprocess: the loop forks, which must not happen in a process that ran onnxruntime
    out = tmp_path / "kill.json"
    cmd = [sys.executable, "-m", "tests.robustness.reliability", *["--quick"] * (not FULL), "--only", "kill"]
    subprocess.run([*cmd, "--out", str(out)], check=True, timeout=None if FULL else 600, capture_output=True, cwd=ROOT)
    loop = json.loads(out.read_text())["kill_loop"]
    assert set(loop) == {"build", "add", "remove", "save"}
    for op, stats in loop.items():
        assert stats["kills"] >= (200 if FULL else 10), op
        assert (stats["broken"], stats["mixed"], stats["errors"]) == (0, 0, []), op
        assert stats["debris_after_next_save"] == 0, op


def test_concurrent_cli_adds_both_land(tmp_path: Path) -> None:
    model = reliability.tiny_model(tmp_path / "model")
    runs = 50 if FULL else 5
    stats = reliability.concurrent_writers(tmp_path, model, runs)
    assert stats == {
        "runs": runs,
        "lost_updates": 0,
        "broken": 0,
        "tracebacks": 0,
        "failed_commands": 0,
        "errors": [],
    }


def test_corruption_matrix_is_fully_detected(tmp_path: Path) -> None:
    model = reliability.tiny_model(tmp_path / "model")
    index = tmp_path / "index"
    Ranker.build(reliability.records("s", 50), model=model).save(index)
    result = reliability.corruption_matrix(index, tmp_path / "outside", "test")
    # manifest.json + records.jsonl, offsets, vectors and the chunk digests of both, coarse.faiss + 4 model
    # files + 7 lexical (BM25) files and the chunk digests of 4 + the stored questions' and passages' keys:
    # vectors, owners, kinds and 7 BM25 files (the tiny model cuts its answers: 64-word passages by default)
    assert result["files"] == 32
    assert result["cases"] == 32 * len(reliability.CORRUPTIONS)
    assert (result["detected"], result["missed"], result["non_qaindex_errors"]) == (result["cases"], [], [])
    assert len(Ranker.load(index)) == 50  # every file restored


@pytest.mark.parametrize("how", reliability.CORRUPTIONS)
def test_each_corruption_really_changes_the_file(tmp_path: Path, how: str) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    outside = tmp_path / "outside"
    outside.mkdir()
    reliability.corrupt(path, how, outside)
    if how == "delete":
        assert not path.exists()
    elif how == "symlink":
        assert path.is_symlink() and path.read_bytes() == b"0123456789"
    else:
        assert path.read_bytes() != b"0123456789"


def test_readme_body_renders_the_hostile_file_figures() -> None:
    from tests.robustness import reliability_report

    results = json.loads(reliability.RESULTS.read_text())
    results["hostile_files"] = {
        "cases": 35,
        "runs": 182,
        "refused_by_full_load": 35,
        "refused_by_default_load_or_first_read": 34,
        "defects": 0,
        "foreign_folder_runs": 7,
        "foreign_folder_modified": False,
    }
    body = reliability_report.readme_body(results)
    assert (
        '| 182 | 35/35 refused by a full load (`verify="full"`), 34/35 by the default load or the first read of the '
        "damaged content (not: BM25 postings that disagree with their terms under valid checksums); 0 errors "
        "other than `QAIndexError`"
    ) in body
    assert "a folder named like a snapshot | 7 | all refused; the folder untouched |" in body
    del results["hostile_files"]  # results from before the hostile cases still render
    assert "hostile files" not in reliability_report.readme_body(results)
