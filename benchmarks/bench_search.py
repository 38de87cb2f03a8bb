"""Search latency, recall and size of qaindex against brute-force exact search, in one run.

For each corpus size it builds a ``flat`` and an ``hnsw`` index over synthetic answers (word
sequences sampled from ``examples/faq.jsonl``, encoded by the model), then measures:

- single-question latency of ``Ranker.search`` (encode + FAISS + exact ONNX rerank), p50/p99;
- the baseline in the same run: exact brute-force Poincaré search over every stored vector
  (numpy, float32 stable formula) after the same encoding; reported as a speed-up ratio;
- recall@10 of the coarse stage and of the pipeline against float64 exact search;
- bytes on disk of vectors and FAISS index.

Usage::

    python benchmarks/bench_search.py [--model DIR] [--sizes 1000,10000,100000] [--out FILE]

Prints a table and writes JSON (default ``benchmarks/results/search.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from qaindex import Ranker, hyperbolic
from qaindex.corpus import read_corpus
from qaindex.model import Model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from readme_markers import replace_section  # noqa: E402


def synthetic(n: int, rng: np.random.Generator, words: list[str], lo: int, hi: int) -> list[str]:
    lengths = rng.integers(lo, hi, size=n)
    picks = rng.integers(0, len(words), size=int(lengths.sum()))
    out, pos = [], 0
    for length in lengths:
        out.append(" ".join(words[i] for i in picks[pos : pos + length]))
        pos += length
    return out


def timed(fn, reps: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    times = []
    for i in range(reps):
        t = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t)
    return np.array(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: built-in)")
    parser.add_argument("--sizes", default="1000,10000,100000", help="corpus sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=300, help="timed questions per configuration")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search.json"), help="results file")
    parser.add_argument("--no-readme", dest="readme", action="store_false", help="do not update README.md's table")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    faq = read_corpus(ROOT / "examples" / "faq.jsonl")
    words = " ".join(r.answer for r in faq).split()
    questions = [q for r in faq for q in r.questions]
    model = Model.load(args.model, threads=1)
    results: dict[str, object] = {
        "model": model.name,
        "dimension": model.dimension,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "processor": platform.machine()},
        "runs": [],
    }
    print(f"model {model.name} (dim {model.dimension}); latency in ms per single question, 1 onnxruntime thread")
    head = ("answers", "kind", "p50", "p99", "exact p50", "speed-up", "recall@10", "coarse", "MB")
    widths = (8, 10, 7, 7, 9, 8, 9, 7, 7)
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, widths, strict=True)))
    for n in (int(s) for s in args.sizes.split(",")):
        texts = synthetic(n - len(faq), rng, words, 8, 40) if n > len(faq) else []
        records = [{"id": r.id, "answer": r.answer, "questions": list(r.questions)} for r in faq[:n]]
        records += [{"id": f"s{i}", "answer": t} for i, t in enumerate(texts)]
        qs = [questions[i % len(questions)] for i in range(args.queries)]
        for kind, ef in (("flat", None), ("hnsw", 256), ("hnsw", 512)):
            if ef != 512:  # the ef=512 row reuses the ef=256 index
                ranker = Ranker.build(records, model=model, index_kind=kind)
            ranker.configure(ef_search=ef)
            ranker.search(qs[0], k=10)  # warm up
            lat = timed(lambda i, r=ranker, qs=qs: r.search(qs[i], k=10), args.queries)
            vectors = np.asarray(ranker._vectors)

            def exact(i: int, vectors: np.ndarray = vectors, qs: list[str] = qs) -> None:
                qv = model.encode([qs[i]], role="question")
                d = hyperbolic.distance(qv, vectors)
                np.argpartition(d, 10)[:10]

            base = timed(exact, args.queries)
            rec = ranker.recall(10, questions=qs[:200])
            with tempfile.TemporaryDirectory() as tmp:
                ranker.save(Path(tmp) / "ix")
                snap = next(p for p in (Path(tmp) / "ix").iterdir() if p.name.startswith("data-"))
                size = sum(p.stat().st_size for p in snap.rglob("*") if p.is_file() and "model" not in p.parts)
            row = {
                "answers": n,
                "kind": kind if ef is None else f"{kind} ef={ef}",
                "p50_ms": float(np.percentile(lat, 50)),
                "p99_ms": float(np.percentile(lat, 99)),
                "exact_p50_ms": float(np.percentile(base, 50)),
                "speedup_vs_exact": float(np.percentile(base, 50) / np.percentile(lat, 50)),
                "recall@10": rec["recall"],
                "coarse_recall@10": rec["coarse_recall"],
                "index_mb": size / 1e6,
            }
            results["runs"].append(row)  # type: ignore[attr-defined]
            print(
                f"{n:>8} {row['kind']:>10} {row['p50_ms']:>7.3f} {row['p99_ms']:>7.3f} {row['exact_p50_ms']:>9.3f} "
                f"{row['speedup_vs_exact']:>7.2f}x {row['recall@10']:>9.4f} {row['coarse_recall@10']:>7.4f} "
                f"{row['index_mb']:>7.1f}"
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    rows = [
        "| answers | index | p50 ms | p99 ms | exact brute force p50 ms | speed-up | recall@10 vs exact | MB on disk |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:  # type: ignore[attr-defined]
        rows.append(
            f"| {r['answers']:,} | {r['kind']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['exact_p50_ms']:.3f} | "
            f"{r['speedup_vs_exact']:.1f}x | {r['recall@10']:.4f} | {r['index_mb']:.1f} |"
        )
    body = (
        "\n".join(rows)
        + f"\n\nModel `{model.name}`, one question at a time, 1 onnxruntime thread, {os.cpu_count()} cores; "
        "generated by `python benchmarks/bench_search.py`.\n"
    )
    if args.readme:
        replace_section("search-bench", body)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
