"""A distributed build on a local Ray cluster against the local build of the same corpus file.

The corpus is ``bench_scale``'s (real WikiQA + TrecQA answers, then seeded joins of two),
written as a JSONL file. In one run, each in turn:

- ``local``: ``Ranker.build(path)``, what ``qaindex build corpus.jsonl`` does;
- ``ray N``: :func:`qaindex.indexing.distributed.build_on_ray` with ``N`` encoder actors
  (``--workers``, default 1 and 2) on a Ray instance started on this machine for the run
  (``ray.init`` with ``--cpus``; the driver validates the corpus, analyses the BM25 rows and
  assembles the index, the actors encode).

Each row records wall seconds, answers/s, the load average, and whether its vectors and
stored records equal the local build's (they must: the chunks and encoder calls are the
same). The Ray instance's start-up is timed apart (``ray_start_s``). Writes
``benchmarks/results/ray_build.json``; needs ``pip install 'qaindex[ray]'``.

Usage::

    python -m benchmarks.speed.ray_build [--size 200000] [--workers 1,2] [--cpus 2] [--index-kind auto]
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, argument_parser, make_corpus, read_texts, write_results
from qaindex import Ranker
from qaindex.indexing.distributed import build_on_ray, import_ray

RESULTS = ROOT / "benchmarks" / "results" / "ray_build.json"


def _row(label: str, size: int, seconds: float, ranker: Ranker, local: Ranker | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "build": label,
        "seconds": round(seconds, 2),
        "answers_per_s": round(size / seconds),
        "load_average": round(os.getloadavg()[0], 2),
        "index": ranker.info()["index"]["kind"],
        "hybrid": ranker.has_hybrid,
    }
    if local is not None:
        row["same_vectors"] = bool(
            np.array_equal(np.asarray(ranker.state().vectors), np.asarray(local.state().vectors))
        )
        row["same_records"] = ranker.state().records.content() == local.state().records.content()
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__doc__, data=True, out=RESULTS)
    parser.add_argument("--size", type=int, default=200_000, help="answers in the corpus")
    parser.add_argument("--workers", default="1,2", help="encoder actors per Ray build, comma-separated")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs of the local Ray instance")
    parser.add_argument("--index-kind", default="auto", help="index kind of every build")
    args = parser.parse_args(argv)
    ray = import_ray()
    sentences, _ = read_texts(args.data)
    texts, _ = make_corpus(sentences, args.size)
    out: dict[str, Any] = {
        "command": "python -m benchmarks.speed.ray_build " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "ray": ray.__version__,
        "answers": args.size,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="qaindex-bench-ray-") as tmp:
        path = Path(tmp) / "corpus.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(
                json.dumps({"id": i, "answer": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts)
            )
        t = time.perf_counter()
        local = Ranker.build(path, index_kind=args.index_kind, device="cpu")
        out["rows"].append(_row("local", args.size, time.perf_counter() - t, local, None))
        t = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        out["ray_start_s"] = round(time.perf_counter() - t, 2)
        try:
            for workers in (int(w) for w in args.workers.split(",")):
                t = time.perf_counter()
                built = build_on_ray(path, index_kind=args.index_kind, device="cpu", workers=workers)
                out["rows"].append(_row(f"ray {workers}", args.size, time.perf_counter() - t, built, local))
        finally:
            ray.shutdown()
    write_results(args.out, out, run=True)
    return out


if __name__ == "__main__":
    main()
