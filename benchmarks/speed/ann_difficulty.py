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
  coordinates per sub-quantiser instead of the default; ``hnsw:M`` for ``M`` links per node
  instead of 32), each breadth's recall@10 of the candidates against float64 brute force (the
  pipeline's recall, as the exact rerank orders the candidates) and the coarse stage's p50 per
  question on 1 thread, plus each kind's build time. ``flat`` is the no-index reference. With
  ``--query-sets``, each breadth's recall also for other real questions and for the
  pseudo-questions a build-time tuning could cut from the answers (:func:`query_sets`);
- **routing** (``--routing L``): inverted lists of ``L`` lists routed by the answers (what
  ``ivf`` builds) against lists routed by pseudo-questions (:func:`routing`).

Writes ``benchmarks/results/ann_difficulty.json``. Usage::

    python -m benchmarks.speed.ann_difficulty [--size 100000] [--kinds flat,hnsw,ivf,pq,pq:2]
        [--query-sets] [--routing 2000] [--data ../shared/datasets]
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
from qaindex.indexing.tuning import answer_spans, recall_at
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
    kind: str,
    a: np.ndarray,
    q: np.ndarray,
    truth: np.ndarray,
    ranking: str,
    breadths: Sequence[int],
    others: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> dict[str, Any]:
    """One kind's recall@10 and coarse p50 at each breadth; also the recall of each of ``others``
    (name -> query vectors and their true top 10), searched in one batch (not timed)."""
    set_faiss_threads(2)
    t = time.perf_counter()
    kind, _, option = kind.partition(":")  # "pq:2": two coordinates per sub-quantiser; "hnsw:48": M = 48
    params = {"M": int(option or 32), "ef_construction": 100} if kind == "hnsw" else {}
    if option and kind == "pq":
        searched = CoarseIndex("poincare", a.shape[1], kind, ranking=ranking, count=len(a)).searched_dimension
        params["M"] = -(-searched // int(option))
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
        if others:
            rows[-1]["recall_by_queries"] = {
                name: round(recall_at(ix.search(vq, 100, vectors=a), vt), 4) for name, (vq, vt) in others.items()
            }
        print(f"  {kind} {b}: {rows[-1]}", flush=True)
    return {"params": dict(ix.params), "build_s": round(build, 1), "rows": rows}


def cut_words(
    texts: Sequence[str], n: int, lo: int, hi: int, *, scattered: bool, seed: int
) -> tuple[list[str], np.ndarray]:
    """``n`` pseudo-questions of ``lo``-``hi`` words of seeded answers: a run of consecutive words,
    or words picked across the answer (in order) when ``scattered``; and their answers' rows."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(texts), size=min(n, len(texts)), replace=False))
    out = []
    for row in rows:
        words = texts[row].split()
        length = min(len(words), int(rng.integers(lo, hi + 1)))
        if scattered:
            picked = np.sort(rng.choice(len(words), size=length, replace=False))
            out.append(" ".join(words[i] for i in picked) or texts[row])
        else:
            start = int(rng.integers(0, len(words) - length + 1)) if words else 0
            out.append(" ".join(words[start : start + length]) or texts[row])
    return out, rows.astype(np.int64)


def query_sets(
    a: np.ndarray, texts: Sequence[str], other: Sequence[str], model: Model, n: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Queries besides the measured questions, each with its exact top 10 (a query cut from an
    answer leaves that answer out, as the tuning does): ``other`` real questions, the tuning's
    answer spans (:func:`qaindex.indexing.tuning.answer_spans`), spans of 2-4 words and 4-8
    words scattered across an answer."""
    sets: dict[str, tuple[Sequence[str], np.ndarray | None]] = {
        "other questions": (other, None),
        "answer spans (the tuning's)": answer_spans(texts, n),
        "spans of 2-4 words": cut_words(texts, n, 2, 4, scattered=False, seed=2),
        "4-8 scattered words": cut_words(texts, n, 4, 8, scattered=True, seed=3),
    }
    out = {}
    for name, (queries, own) in sets.items():
        vq = model.encode(list(queries), role="question")
        _, top = exact_search(vq, a, 11, geometry="poincare", ranking=model.ranking)
        if own is None:
            out[name] = (vq, top[:, :10])
        else:
            out[name] = (vq, np.array([row[row != skip][:10] for row, skip in zip(top, own, strict=True)]))
    return out


ROUTING_PROBES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def _one_list_each(order: np.ndarray, assign: np.ndarray, truth: np.ndarray, nlist: int) -> list[dict[str, Any]]:
    """:func:`_routed` of lists that hold each answer once (``assign``: each answer's list)."""
    return _routed(
        order, [[assign[[t]] for t in row] for row in truth], np.bincount(assign, minlength=nlist), len(assign)
    )


def _routed(
    order: np.ndarray, truth_lists: list[list[np.ndarray]], sizes: np.ndarray, total: int
) -> list[dict[str, Any]]:
    """Recall@10 and the share of answers scanned when each question probes its first ``p``
    lists (``order``: its lists, best first; ``truth_lists[i][j]``: the lists holding its
    ``j``-th true answer)."""
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(order.shape[1])[None, :], axis=1)
    first = np.array([[rank[i, held].min() for held in row] for i, row in enumerate(truth_lists)])
    scanned = np.cumsum(sizes[order], axis=1)
    return [
        {
            "probe": p,
            "recall_at_10": round(float((first < p).mean()), 4),
            "scanned": round(float(scanned[:, p - 1].mean()) / total, 4),
        }
        for p in ROUTING_PROBES
        if p <= order.shape[1]
    ]


def routing(
    a: np.ndarray, q: np.ndarray, truth: np.ndarray, texts: Sequence[str], model: Model, nlist: int, spans: int
) -> dict[str, Any]:
    """Inverted lists routed by answers against lists routed by questions, each list scanned
    exactly (an upper bound of any inverted-list index over these lists), in the relative lift:

    - *answer lists*: k-means of the lifted answers, each answer in its nearest list, a
      question probing the lists nearest its lifted vector (what ``ivf`` does);
    - *question lists*: k-means of lifted pseudo-questions (answer spans, as the tuning cuts
      them, encoded as questions), each answer in the list whose centroid, taken as a
      question, scores it highest, a question probing the centroids of highest inner product
      with it (the better of that and the nearest centroids);
    - *question lists + spill*: as above, and each answer also in the list of every
      pseudo-question that has it among its 20 best (lists learn where questions look).
    """
    import faiss

    set_faiss_threads(2)
    db = hyperbolic.relative_lift(a)
    lq = hyperbolic.relative_lift_query(q)
    cut, _ = answer_spans(texts, spans, seed=1)
    pseudo = hyperbolic.relative_lift_query(
        np.concatenate([model.encode(cut[s : s + 50_000], role="question") for s in range(0, len(cut), 50_000)])
    )
    rng = np.random.default_rng(0)
    schemes: dict[str, Any] = {}
    km = faiss.Kmeans(db.shape[1], nlist, niter=10, seed=1)
    km.train(db[rng.choice(len(db), min(len(db), 100 * nlist), replace=False)])
    near = faiss.IndexFlatL2(db.shape[1])
    near.add(km.centroids)
    schemes["answer lists"] = _one_list_each(near.search(lq, nlist)[1], near.search(db, 1)[1][:, 0], truth, nlist)
    kq = faiss.Kmeans(pseudo.shape[1], nlist, niter=20, seed=1)
    kq.train(pseudo)
    as_question = faiss.IndexFlatIP(pseudo.shape[1])
    as_question.add(kq.centroids)
    assign = as_question.search(db, 1)[1][:, 0]
    order = as_question.search(lq, nlist)[1]
    schemes["question lists"] = _one_list_each(order, assign, truth, nlist)
    everything = faiss.IndexFlatIP(db.shape[1])
    everything.add(db)
    found = everything.search(pseudo[: min(len(pseudo), 20_000)], 20)[1]
    home = as_question.search(pseudo[: len(found)], 1)[1][:, 0]
    n = len(a)
    spilled = np.repeat(home, 20) * n + found.ravel()
    pairs = np.unique(np.concatenate([assign * n + np.arange(n), spilled]))  # list * n + row, each once
    sizes = np.bincount(pairs // n, minlength=nlist)
    by_row = np.sort(pairs % n * nlist + pairs // n)  # row * nlist + list: a row's lists side by side
    true_rows = np.unique(truth)
    bounds = np.searchsorted(by_row, np.stack([true_rows * nlist, (true_rows + 1) * nlist]))
    where = {int(t): by_row[lo:hi] % nlist for t, lo, hi in zip(true_rows, *bounds, strict=True)}
    held = [[where[int(t)] for t in row] for row in truth]
    schemes["question lists + spill"] = _routed(order, held, sizes, n)
    for name, rows in schemes.items():
        print(f"  {name}: {rows}", flush=True)
    return {"lists": nlist, "pseudo_questions": len(pseudo), "spilled_from": len(found), "schemes": schemes}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(
        __doc__, data=True, out=ROOT / "benchmarks" / "results" / "ann_difficulty.json", variant=True
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--kinds", default="flat,hnsw,ivf,pq,pq:2")
    parser.add_argument("--questions", type=int, default=300, help="questions measured (of the 1,000)")
    parser.add_argument(
        "--routing",
        type=int,
        default=0,
        help="also compare inverted lists of this many lists routed by answers and by questions (0: no)",
    )
    parser.add_argument("--spans", type=int, default=100_000, help="pseudo-questions of --routing")
    parser.add_argument(
        "--query-sets",
        action="store_true",
        help="also measure each curve's recall for other real questions and for pseudo-questions cut from answers",
    )
    args = parser.parse_args(argv)
    sentences, all_questions = read_texts(args.data)
    texts, _ = make_corpus(sentences, args.size)
    picked = pick_questions(all_questions, 1000)
    questions = picked[: args.questions]
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
    others = None
    if args.query_sets:
        others = query_sets(a, texts, picked[args.questions : 2 * args.questions], model, args.questions)
    for kind in args.kinds.split(","):
        breadths = BREADTHS.get(kind.partition(":")[0], [0])
        out["curves"][kind] = curve(kind, a, q, truth, model.ranking, breadths, others)
    if args.routing:
        out["routing"] = routing(a, q, truth, texts, model, args.routing, args.spans)
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    save_results(args.out, out, args.variant, run=True)
    return out


if __name__ == "__main__":
    main()
