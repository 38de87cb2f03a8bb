"""Load time of an index, verified three ways, its first search, and SHA-256 throughput.

``Ranker.load`` verifies by default that no byte is used before it is proved to be the one
the index's writer saved: every file's size and SHA-256 now, but the large files' (vectors,
records, BM25 terms, counts and postings) chunk by chunk as a search first reads them
(:mod:`qaindex.store.chunk_checks`); records are checked strict JSON as they are decoded.
``verify="full"`` hashes every file and scans all content now (finite vectors inside the
ball, every record strict JSON with its fields, unique ids, BM25 postings:
:mod:`qaindex.store.index_checks`); ``verify=False`` checks neither. For each corpus size
this builds an index (``--kind``, default ``flat``) with the built-in default model
(synthetic answers of words from ``examples/faq.jsonl``), then times the three loads (median
of several, page cache warm), the content scan on its own, and the streamed SHA-256 rate of
this machine. It times the first hybrid search after a default load (which verifies the
chunks it reads) and after a ``verify=False`` one, and the latter against the same index
without its BM25 postings (as a qaindex that did not store them saved it: derived on that
first search), the median of the next ``--searches`` hybrid searches after a load verified
on first touch only (``verify="lazy"``), after a default load (its background thread
verifying the rest meanwhile) and after a full one, and measures the resident memory of a
fresh process after it imports qaindex and after each load (memory-mapped files count once
their pages are read).

Usage::

    python -m benchmarks.speed.load [--sizes 10000,100000] [--kind flat] [--reps 5] [--searches 300] [--out FILE]

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

from benchmarks.common import ROOT, argument_parser, index_bytes, median_seconds, per_call_ms, write_results
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


def median_load(index: Path, verify: bool | str, reps: int) -> float:
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
ranker = Ranker.load(sys.argv[1], verify={"full": "full", "default": True, "trust": False}[sys.argv[2]])
print(before, rss_mb())
"""


def rss_after_load(index: Path, verify: bool | str) -> tuple[float, float]:
    """``(MiB after importing qaindex, MiB after loading the index)`` of a fresh process."""
    how = "full" if verify == "full" else ("default" if verify else "trust")
    done = subprocess.run(
        [sys.executable, "-c", _RSS_AFTER_LOAD, str(index), how],
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


def first_search(index: Path, question: str, reps: int, verify: bool = False) -> float:
    """Median seconds of the first hybrid search after a load, the load not counted."""
    times = []
    for _ in range(reps):
        ranker = Ranker.load(index, verify=verify)
        start = time.perf_counter()
        ranker.search(question, k=10)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def searches_after_load(index: Path, questions: list[str], verify: bool | str) -> float:
    """Median milliseconds of the hybrid searches of ``questions``, one after another, right after
    a load: with ``verify="lazy"`` each pays for the chunks it reads first; a default load's
    background thread verifies the rest meanwhile."""
    ranker = Ranker.load(index, verify=verify)
    return float(np.median(per_call_ms(lambda q: ranker.search(q, k=10), questions, warm=0)))


def main() -> None:
    parser = argument_parser(__doc__, out=ROOT / "benchmarks" / "results" / "load.json")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--kind", default="flat", help="index kind to build (flat, auto, pq, hnsw, ...)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--searches", type=int, default=300, help="searches timed one after another after a load")
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
            ranker = Ranker.build(answers, model=None, device="cpu", index_kind=args.kind)
            kind = ranker.info()["index"]["kind"]
            ranker.save(index)
            del ranker
            median_load(index, "full", 1)  # warm the page cache
            lazy = median_load(index, True, args.reps)
            full = median_load(index, "full", args.reps)
            unverified = median_load(index, False, args.reps)
            size = index_bytes(index)
            content = content_checks(index, args.reps)
            question = " ".join(rng.choice(words, size=6))
            first = first_search(index, question, args.reps, verify=True)
            trusted = first_search(index, question, args.reps)
            derived = first_search(without_postings(index, Path(tmp) / f"older-{n}"), question, args.reps)
            asked = [" ".join(rng.choice(words, size=6)) for _ in range(args.searches)]
            after = {how: searches_after_load(index, asked, how) for how in ("lazy", True, "full")}
            imported, after_load = rss_after_load(index, verify=False)
            _, after_lazy = rss_after_load(index, verify=True)
            _, after_full = rss_after_load(index, verify="full")
            row = {
                "answers": n,
                "index_kind": kind,
                "index_bytes": size,
                "load_s": round(lazy, 4),
                "load_full_s": round(full, 4),
                "load_no_verify_s": round(unverified, 4),
                "full_verify_gb_per_s": round(size / max(1e-9, full - unverified) / 1e9, 2),
                "content_checks_s": round(content, 4),
                "first_search_s": round(first, 4),
                "first_search_no_verify_s": round(trusted, 4),
                "first_search_derived_s": round(derived, 4),
                "searches_after_load": args.searches,
                "search_p50_ms_after_lazy_load": round(after["lazy"], 3),
                "search_p50_ms_after_default_load": round(after[True], 3),
                "search_p50_ms_after_full_load": round(after["full"], 3),
                "rss_after_import_mib": round(imported, 1),
                "rss_after_load_mib": round(after_lazy, 1),
                "rss_after_full_load_mib": round(after_full, 1),
                "rss_after_no_verify_load_mib": round(after_load, 1),
            }
            rows.append(row)
            print(
                f"{n:>7} answers ({kind}), {size / 1e6:7.1f} MB: load {lazy * 1e3:8.1f} ms (default: large files "
                f"verified as read), {full * 1e3:8.1f} ms full (content scan {content * 1e3:.1f} ms of it), "
                f"{unverified * 1e3:8.1f} ms with verify=False; first hybrid search {first * 1e3:.1f} ms after the "
                f"default load, {trusted * 1e3:.1f} ms after verify=False, "
                f"{derived * 1e3:.1f} ms with postings derived (as indexes saved without them); the next "
                f"{args.searches} searches p50 {after['lazy']:.2f} ms verified on first touch only, "
                f"{after[True]:.2f} ms with the default background verification, {after['full']:.2f} ms after a "
                f"full load; resident memory "
                f"{after_lazy:.0f} MiB after the default load ({after_full:.0f} MiB full, {after_load:.0f} MiB with "
                f"verify=False; {imported:.0f} MiB after importing qaindex)"
            )
    result = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "model": "built-in default",
        "index_kind": args.kind,
        "reps": args.reps,
        "sha256_gb_per_s": round(rate, 2),
        "sizes": rows,
    }
    write_results(args.out, result, run=True)


if __name__ == "__main__":
    main()
