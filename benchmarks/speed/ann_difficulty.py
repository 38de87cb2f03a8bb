"""Why the coarse stage is hard on the built-in model's vectors, in figures.

The scale target is 1M answers under 1 ms at recall@10 >= 0.99. This script measures what
stands in the way, on the same corpus as ``benchmarks.speed.scale`` (real WikiQA + TrecQA sentences,
beyond 76,693 two joined; 1,000 real questions, of which ``--tune`` tune and the rest measure):

- **contrast**: cosine between a question's direction and its 1st / 10th / 100th best and
  median answer's, against the same figures answer to answer; the length of the answers'
  mean direction (how much of every vector is one shared direction);
- **depth**: recall@10 after the exact rerank when the candidates are the top ``m`` of an
  *exhaustive* coarse score (the relative lift the ``flat``/``ivf``/``pq`` kinds search, the
  cosine of directions, L2 on ball coordinates), i.e. what a perfect ANN index could give;
- **curves**: for ``hnsw`` (ef_search), ``ivf`` (nprobe) and ``pq`` (refine; ``pq:C`` for ``C``
  coordinates per sub-quantiser instead of the default), each breadth's
  recall@10 of the candidates against float64 brute force (the pipeline's recall, as the exact
  rerank orders the candidates) and the coarse stage's p50 per question on 1 thread, plus
  each kind's build time. ``flat`` is the no-index reference.

Writes ``benchmarks/results/ann_difficulty.json``. Usage::

    python -m benchmarks.speed.ann_difficulty [--size 100000] [--kinds flat,hnsw,ivf,pq,pq:2]
        [--data ../shared/datasets]
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.common import (
    ROOT,
    argument_parser,
    make_corpus,
    pick_questions,
    read_texts,
    save_results,
    set_faiss_threads,
)
from qaindex.geometry import hyperbolic
from qaindex.indexing.tuning import recall_at
from qaindex.model import Model
from qaindex.vector_index import CoarseIndex, exact_search

BREADTHS = {
    "hnsw": [64, 128, 256, 512, 1024, 2048],
    "ivf": [8, 16, 32, 64, 128, 256, 512],
    "pq": [1, 2, 4, 8, 16, 32, 64],
}


def unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row, a text the model puts at the centre, stays 0)."""
    x64 = np.asarray(x, dtype=np.float64)
    return x64 / np.maximum(np.linalg.norm(x64, axis=1, keepdims=True), 1e-300)


def contrast(q: np.ndarray, a: np.ndarray) -> dict[str, Any]:
    """Cosine quantiles question→answer and answer→answer (300 answers as queries), over the
    answers that have a direction (texts at the ball's centre have none)."""
    a = a[np.linalg.norm(np.asarray(a, dtype=np.float64), axis=1) > 0]
    ua, uq = unit(a), unit(q)
    n = len(a)
    ranks = [0, min(9, n - 1), min(99, n - 1), n // 2]
    qa = np.sort(uq @ ua.T, axis=1)[:, ::-1][:, ranks]
    aa = np.sort(ua[:300] @ ua.T, axis=1)[:, ::-1][:, [min(r + 1, n - 1) for r in ranks[:3]] + [n // 2]]  # not itself
    mean = ua.mean(axis=0)
    names = ["1st", "10th", "100th", "median"]
    return {
        "question_to_answer_cosine": dict(zip(names, np.round(np.median(qa, axis=0), 4).tolist(), strict=True)),
        "answer_to_answer_cosine": dict(zip(names, np.round(np.median(aa, axis=0), 4).tolist(), strict=True)),
        "mean_direction_length": round(float(np.linalg.norm(mean)), 4),
        "question_cosine_to_mean_direction": round(float(np.median(uq @ (mean / np.linalg.norm(mean)))), 4),
    }


def rerank(q: np.ndarray, a: np.ndarray, candidates: np.ndarray, ranking: str, k: int = 10) -> np.ndarray:
    """The exact (float64) top ``k`` of each question's candidate rows."""
    out = np.zeros((len(q), k), dtype=np.int64)
    for i, rows in enumerate(candidates):
        x, y = q[i].astype(np.float64)[None, :], a[rows].astype(np.float64)
        d = hyperbolic.relative_distance(x, y) if ranking == "relative" else hyperbolic.distance(x, y)
        out[i] = rows[np.argsort(d, kind="stable")[:k]]
    return out


def depth(q: np.ndarray, a: np.ndarray, truth: np.ndarray, ranking: str) -> dict[str, Any]:
    """Recall@10 after the exact rerank of an exhaustive coarse score's top m."""
    scores = {
        "relative lift (flat/ivf/pq)": hyperbolic.relative_lift_query(q) @ hyperbolic.relative_lift(a).T,
        "cosine of directions": unit(q) @ unit(a).T,
        "L2 on ball coordinates (hnsw, plain distance)": -(
            (a.astype(np.float64) ** 2).sum(1)[None, :] - 2.0 * q.astype(np.float64) @ a.astype(np.float64).T
        ),
    }
    out: dict[str, Any] = {}
    for name, s in scores.items():
        width = min(400, s.shape[1])
        top = np.argpartition(-s, width - 1, axis=1)[:, :width]
        order = np.take_along_axis(top, np.argsort(-np.take_along_axis(s, top, axis=1), axis=1), axis=1)
        row = {}
        for m in (10, 20, 40, 100, 400):
            row[str(m)] = round(recall_at(rerank(q, a, order[:, :m], ranking), truth), 4)
        out[name] = row
    return out


def curve(
    kind: str, a: np.ndarray, q: np.ndarray, truth: np.ndarray, ranking: str, breadths: Sequence[int]
) -> dict[str, Any]:
    set_faiss_threads(2)
    t = time.perf_counter()
    kind, _, coordinates = kind.partition(":")  # "pq:2": two coordinates per sub-quantiser
    params = {"M": 32, "ef_construction": 100} if kind == "hnsw" else {}
    if coordinates:
        searched = CoarseIndex("poincare", a.shape[1], kind, ranking=ranking, count=len(a)).searched_dimension
        params["M"] = -(-searched // int(coordinates))
    ix = CoarseIndex("poincare", a.shape[1], kind, params, ranking=ranking, count=len(a))
    ix.add(a)
    build = time.perf_counter() - t
    set_faiss_threads(1)
    rows = []
    for b in breadths:
        ix.set_breadth(b)
        found = np.zeros((len(q), 100), dtype=np.int64)
        ms = []
        for i in range(len(q)):
            t0 = time.perf_counter()
            found[i] = ix.search(q[i : i + 1], 100, vectors=a)[0]
            ms.append((time.perf_counter() - t0) * 1e3)
        rows.append(
            {"breadth": b, "recall_at_10": round(recall_at(found, truth), 4), "p50_ms": round(float(np.median(ms)), 3)}
        )
        print(f"  {kind} {b}: {rows[-1]}", flush=True)
    return {"params": dict(ix.params), "build_s": round(build, 1), "rows": rows}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(
        __doc__, data=True, out=ROOT / "benchmarks" / "results" / "ann_difficulty.json", variant=True
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--kinds", default="flat,hnsw,ivf,pq,pq:2")
    parser.add_argument("--questions", type=int, default=300, help="questions measured (of the 1,000)")
    args = parser.parse_args(argv)
    sentences, all_questions = read_texts(args.data)
    texts, _ = make_corpus(sentences, args.size)
    questions = pick_questions(all_questions, 1000)[: args.questions]
    model = Model.load(None, threads=2, device="cpu")
    a = np.concatenate([model.encode(texts[s : s + 50_000], role="answer") for s in range(0, len(texts), 50_000)])
    q = model.encode(questions, role="question")
    _, truth = exact_search(q, a, 10, geometry="poincare", ranking=model.ranking)
    out: dict[str, Any] = {
        "command": "python -m benchmarks.speed.ann_difficulty " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": model.name,
        "answers": len(a),
        "questions": len(q),
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "contrast": contrast(q, a),
    }
    print(json.dumps(out["contrast"]), flush=True)
    out["depth"] = depth(q, a, truth, model.ranking)
    print(json.dumps(out["depth"]), flush=True)
    out["curves"] = {}
    for kind in args.kinds.split(","):
        out["curves"][kind] = curve(kind, a, q, truth, model.ranking, BREADTHS.get(kind.partition(":")[0], [0]))
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    save_results(args.out, out, args.variant, run=True)
    return out


if __name__ == "__main__":
    main()
