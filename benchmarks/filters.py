"""Filtered search (``where``) latency at every selectivity, against brute force, in one run.

Builds a ``pq`` index (the ``auto`` kind above 20,000 answers) of synthetic answers (word
sequences sampled from ``examples/faq.jsonl``, encoded by the model) with metadata fields of
known selectivity, then times single-question ``Ranker.search(q, k=10, where=...)``:

- ``id``: one matching answer; ``shard`` 0.1 %; ``pct`` 1 %; ``decile`` 10 %; ``half`` 50 %;
  and no filter;
- beside each, in the same run: brute force (every answer scored by the model's ONNX
  scorer, the matching ones kept, top 10) after the same encoding, and for the one-answer
  filter the previous behaviour (post-filtering an ANN search that widens ×4 until it has
  ``k`` matches);
- agreement: the share of questions whose filtered top 10 equals brute force's.

The field index is built by the first filtered search; its time is reported apart.

Usage::

    python -m benchmarks.filters [--answers 50000] [--questions 100] [--out FILE]

Prints a table and writes JSON (default ``benchmarks/results/filters.json``).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, synthetic, write_results
from qaindex import Ranker
from qaindex.corpus import read_corpus
from qaindex.search.filters import compile_where, matching_rows

RESULTS = ROOT / "benchmarks" / "results" / "filters.json"


def brute(ranker: Ranker, qv: np.ndarray, rows: np.ndarray, vectors: np.ndarray, k: int) -> list[Any]:
    """Every answer scored by the model's scorer, the matching rows kept, best k (ids)."""
    score, dist = ranker.model.score_checked(qv, vectors[None])
    keep = np.zeros(len(vectors), bool)
    keep[rows] = True
    s = np.where(keep, score[0], -np.inf)
    order = np.lexsort((np.arange(len(s)), dist[0], -s))[: min(k, len(rows))]
    return [ranker._records.get(int(r)).id for r in order]


def widening(ranker: Ranker, qv: np.ndarray, where: dict[str, Any], k: int) -> list[Any]:
    """The previous behaviour: post-filter an ANN search widened ×4 until it has k matches."""
    flt = compile_where(where)
    assert flt is not None
    width = min(len(ranker), 4 * k)
    while True:
        hits = ranker.hits(*ranker.search_vectors(qv, width))[0]
        kept = [h for h in hits if flt.matches(ranker._records.get(h.row))][:k]
        if len(kept) >= k or width >= len(ranker):
            return [h.id for h in kept]
        width = min(len(ranker), width * 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=50_000)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--model", default=None, help="model directory (default: the built-in model)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    words = sorted({w for r in read_corpus(ROOT / "examples" / "faq.jsonl") for w in r.answer.lower().split()})
    texts = synthetic(args.answers, rng, words, 8, 40)
    records = [
        {"id": f"doc-{i}", "answer": t, "half": i % 2, "decile": i % 10, "pct": i % 100, "shard": i % 1000}
        for i, t in enumerate(texts)
    ]
    started = time.perf_counter()
    ranker = Ranker.build(records, model=args.model, device="cpu")
    build_s = time.perf_counter() - started
    questions = synthetic(args.questions, rng, words, 4, 12)
    qvs = [ranker.model.encode([q], role="question") for q in questions]
    vectors = np.ascontiguousarray(np.asarray(ranker._vectors), dtype=np.float32)

    # first filtered search: builds the field index (one pass over the records)
    t = time.perf_counter()
    ranker.search(questions[0], 10, where={"half": 1})
    first_ms = (time.perf_counter() - t) * 1e3

    target = args.answers // 2 + 1  # one answer, in the middle of the corpus
    cases: list[tuple[str, dict[str, Any] | None]] = [
        ("none", None),
        ("1 answer (id)", {"id": f"doc-{target}"}),
        ("0.1% (shard)", {"shard": 7}),
        ("1% (pct)", {"pct": 7}),
        ("10% (decile)", {"decile": 7}),
        ("50% (half)", {"half": 1}),
    ]
    runs = []
    for label, where in cases:
        flt = compile_where(where)
        rows = matching_rows(ranker._records, flt) if flt is not None else np.arange(len(ranker))
        for q in questions[:5]:  # warm-up
            ranker.search(q, 10, where=where)
        times, brute_times, agree = [], [], 0
        for q in questions:
            t = time.perf_counter()
            hits = ranker.search(q, 10, where=where)
            times.append(time.perf_counter() - t)
            t = time.perf_counter()
            want = brute(ranker, ranker.model.encode([q], role="question"), rows, vectors, 10)
            brute_times.append(time.perf_counter() - t)
            agree += [h.id for h in hits] == want
        run = {
            "filter": label,
            "matches": len(rows),
            "p50_ms": float(np.percentile(times, 50) * 1e3),
            "p99_ms": float(np.percentile(times, 99) * 1e3),
            "brute_force_p50_ms": float(np.percentile(brute_times, 50) * 1e3),
            "same_top10_as_brute_force": agree / len(questions),
        }
        if where is not None and len(rows) == 1:
            old = []
            for qv in qvs[:5]:
                t = time.perf_counter()
                widening(ranker, qv, where, 10)
                old.append(time.perf_counter() - t)
            run["previous_widening_p50_ms"] = float(np.percentile(old, 50) * 1e3)
        runs.append(run)
        print(
            f"{label:>16}  matches {len(rows):>6}  p50 {run['p50_ms']:8.2f} ms  p99 {run['p99_ms']:8.2f} ms  "
            f"brute force {run['brute_force_p50_ms']:8.2f} ms  same top-10 {run['same_top10_as_brute_force']:.2f}"
            + (f"  previous {run['previous_widening_p50_ms']:.0f} ms" if "previous_widening_p50_ms" in run else "")
        )
    results = {
        "answers": args.answers,
        "questions": args.questions,
        "index": ranker.info()["index"],
        "model": ranker.model.name,
        "build_s": build_s,
        "first_filtered_search_ms": first_ms,
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "command": "python -m benchmarks.filters",
    }
    print(f"first filtered search (builds the field index): {first_ms:.0f} ms; index {results['index']['kind']}")
    write_results(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
