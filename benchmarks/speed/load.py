"""Load time of an index with and without checksum verification, and SHA-256 throughput.

``Ranker.load`` verifies the size and SHA-256 of every file of the index and of its model
copy by default, and scans the content (finite vectors inside the ball, every record strict
JSON with its fields, unique ids: :mod:`qaindex.store.index_checks`); ``verify=False`` opts out of
both. This measures what that costs, and the content scan on its own: for each corpus
size it builds a ``flat`` index with the built-in default model (synthetic answers of words
from ``examples/faq.jsonl``), then times ``Ranker.load`` (median of several loads, page cache
warm) with ``verify=True`` and ``verify=False``, and the streamed SHA-256 rate of this machine.
It also times the first hybrid search after a load, reading the stored BM25 postings, against
the same index without them (as a qaindex that did not store them saved it: derived on that
first search), and measures the resident memory of a fresh process after it imports qaindex
and after it loads the index (both ways; memory-mapped files count once their pages are read).

Usage::

    python -m benchmarks.speed.load [--sizes 10000,100000] [--reps 5] [--out FILE]

Prints a table and writes JSON (default ``benchmarks/results/load.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import ROOT, argument_parser, index_bytes, median_seconds, write_results
from qaindex import Ranker
from qaindex.corpus import read_corpus
from qaindex.store.index_format import manifest_checksum
from qaindex.text.lexical import POSTING_FILES


def sha256_rate(megabytes: int = 256) -> float:
    """Streamed SHA-256 throughput (GB/s) over an in-memory buffer, 1 MiB chunks."""
    data = np.random.default_rng(0).integers(0, 256, size=megabytes << 20, dtype=np.uint8).tobytes()
    view = memoryview(data)
    start = time.perf_counter()
    digest = hashlib.sha256()
    for pos in range(0, len(data), 1 << 20):
        digest.update(view[pos : pos + (1 << 20)])
    return len(data) / (time.perf_counter() - start) / 1e9


def median_load(index: Path, verify: bool, reps: int) -> float:
    return median_seconds(lambda: Ranker.load(index, verify=verify), reps)


def content_checks(index: Path, reps: int) -> float:
    """Median seconds of the content scan alone (vectors and records) on a loaded index."""
    from qaindex.store.index_checks import check_records, check_vectors

    ranker = Ranker.load(index, verify=False)
    snap = index / json.loads((index / "manifest.json").read_text())["snapshot"]
    records = ranker.state().records
    ball = ranker.model.geometry == "poincare"
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        check_vectors(snap / "vectors.npy", ranker.state().vectors, ball=ball, scan=True)
        check_records(snap / "records.jsonl", records.data, records.offsets)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


_RSS_AFTER_LOAD = """
import sys
from benchmarks.common import rss_mb
from qaindex import Ranker
before = rss_mb()
ranker = Ranker.load(sys.argv[1], verify=sys.argv[2] == "verify")
print(before, rss_mb())
"""


def rss_after_load(index: Path, verify: bool) -> tuple[float, float]:
    """``(MiB after importing qaindex, MiB after loading the index)`` of a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", _RSS_AFTER_LOAD, str(index), "verify" if verify else "trust"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    before, after = (float(v) for v in done.stdout.split())
    return before, after


def without_postings(index: Path, target: Path) -> Path:
    """A copy of ``index`` as a qaindex that did not store the BM25 postings saved it: the
    postings files gone from the snapshot and from the manifest (checksum recomputed)."""
    shutil.copytree(index, target)
    manifest = json.loads((target / "manifest.json").read_text())
    snap = target / manifest["snapshot"]
    for name in list(manifest["files"]):
        if name.rsplit("/", 1)[-1] in POSTING_FILES:
            (snap / name).unlink()
            del manifest["files"][name]
    manifest["checksum"] = manifest_checksum(manifest)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def first_search(index: Path, question: str, reps: int) -> float:
    """Median seconds of the first hybrid search after a load (``verify=False``), the load not counted."""
    times = []
    for _ in range(reps):
        ranker = Ranker.load(index, verify=False)
        start = time.perf_counter()
        ranker.search(question, k=10)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argument_parser(__doc__, out=ROOT / "benchmarks" / "results" / "load.json")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    words = sorted({w for r in read_corpus(ROOT / "examples" / "faq.jsonl") for w in r.answer.lower().split()})
    rng = np.random.default_rng(0)
    rate = sha256_rate()
    print(f"streamed SHA-256: {rate:.2f} GB/s")
    rows = []
    with tempfile.TemporaryDirectory(prefix="qaindex-bench-load-") as tmp:
        for n in [int(s) for s in args.sizes.split(",")]:
            answers = [
                {"id": i, "answer": " ".join(rng.choice(words, size=int(rng.integers(8, 30))))} for i in range(n)
            ]
            index = Path(tmp) / f"index-{n}"
            Ranker.build(answers, model=None, device="cpu", index_kind="flat").save(index)
            median_load(index, True, 1)  # warm the page cache
            verified = median_load(index, True, args.reps)
            unverified = median_load(index, False, args.reps)
            size = index_bytes(index)
            content = content_checks(index, args.reps)
            question = " ".join(rng.choice(words, size=6))
            first = first_search(index, question, args.reps)
            derived = first_search(without_postings(index, Path(tmp) / f"older-{n}"), question, args.reps)
            imported, after_load = rss_after_load(index, verify=False)
            _, after_verified = rss_after_load(index, verify=True)
            row = {
                "answers": n,
                "index_bytes": size,
                "load_verify_s": round(verified, 4),
                "load_no_verify_s": round(unverified, 4),
                "verify_cost_s": round(verified - unverified, 4),
                "verify_gb_per_s": round(size / max(1e-9, verified - unverified) / 1e9, 2),
                "content_checks_s": round(content, 4),
                "content_share_of_verify": round(content / max(1e-9, verified - unverified), 3),
                "first_search_s": round(first, 4),
                "first_search_derived_s": round(derived, 4),
                "rss_after_import_mib": round(imported, 1),
                "rss_after_load_mib": round(after_load, 1),
                "rss_after_verified_load_mib": round(after_verified, 1),
            }
            rows.append(row)
            print(
                f"{n:>7} answers, {size / 1e6:7.1f} MB: load {verified * 1e3:8.1f} ms verified, "
                f"{unverified * 1e3:8.1f} ms with verify=False (verification {row['verify_cost_s'] * 1e3:.1f} ms, "
                f"of which content scan {content * 1e3:.1f} ms); first hybrid search {first * 1e3:.1f} ms "
                f"(postings stored) against {derived * 1e3:.1f} ms (derived, as indexes saved without them); "
                f"resident memory {after_load:.0f} MiB after a load ({after_verified:.0f} MiB verified; "
                f"{imported:.0f} MiB after importing qaindex)"
            )
    result = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "model": "built-in default",
        "index_kind": "flat",
        "reps": args.reps,
        "sha256_gb_per_s": round(rate, 2),
        "sizes": rows,
    }
    write_results(args.out, result, run=True)


if __name__ == "__main__":
    main()
