"""Hybrid lexical + dense search: the fusion rule fitted on held-out data, quality on every
corpus, added latency at scale.

1. **The fitted rule.** The ``adaptive`` rule (``qaindex.search.fusion``: a convex combination of
   min-max normalised model and BM25 scores whose dense weight is ``clip(a + b * rho, 0, 1)
   * clip(d - e * cov(q), 0, 1) * min(1, terms / n(q))``, ``rho`` the corpus's label-free
   dense/BM25 ratio measured at build time, ``cov(q)`` the question's lexical coverage, the
   IDF share of its terms that BM25's best answer holds, ``n(q)`` the question's BM25 terms)
   has five constants, chosen on a grid (``GRID_A`` x ``GRID_B`` x ``GRID_DE`` x
   ``GRID_TERMS``, :func:`fit`) on **half A** (a seeded half of the questions) of the *fit
   pools* only (:func:`fit_pools`): the example FAQ (``examples/faq.jsonl``), ``product-faq``
   and ``aws-docs`` from ``--evaldata`` (permissive licences) and held-out WordNet pairs of
   the training corpus (``--traindata``: pairs the default model never trained on).
   Objective: the largest worst-case margin of the fused MRR@10 over the better of its two
   parts across the fit pools, then the largest mean. ``python -m tools.fit_default_fusion``
   fits them and writes them to the model manifest (``"fusion"``), where searches read them;
   this study measures what the manifest holds.
2. **Quality.** Every corpus (the fit pools, every ``--evaldata`` corpus with the 50 junk
   answers of ``benchmarks/quality/pooled.py``, MedQuAD held-out pairs) is indexed whole (flat
   index, ``k`` = 10, candidates: the model's and BM25's 100 best) and every question
   searched: dense, BM25, and every rule tried: RRF (c = 10, 60), convex (w = 0.2, 0.5,
   0.8), adaptive with the corpus ratio only (``terms`` = inf, refitted), the previous
   adaptive rule (no question part: ``e`` = 0, refitted), the fitted
   adaptive rule (the default; also through the real ``Ranker.search_batch`` path, which
   must agree), the default with BM25 scored on the model's top 100 / 300 / 1,000 only (no
   BM25 scan: the large-index path), and, for reference, the best convex weight per corpus
   chosen with its labels (an upper bound, not a rule). Figures on the whole corpus and on
   half B (never seen by the fit). Per corpus also the question part at work: the median
   lexical coverage, BM25's MRR@10 minus the model's above and below it, the default's mean
   dense weight.
3. **Added latency** at ``--latency-size`` answers (default 100,000: distinct WikiQA/TrecQA
   answers, then sentences recombined from them), default index kind: p50 of a
   single-question ``search(k=10)`` dense and hybrid, interleaved, and of the ranking stages
   alone: hybrid without a BM25 scan (the default above ``LEXICAL_SCAN_LIMIT`` answers) and
   with a full BM25 scan, and of the lexical work alone (p50 and p10: on a shared machine the
   p10 is the least disturbed figure).

How well the scores of hybrid hits are calibrated is measured where they are fitted and
used: ``benchmarks/quality/offtopic.py`` (expected calibration error before and after, off-topic
questions refused) and ``benchmarks/quality/trust.py`` (every corpus and model).

Writes ``benchmarks/results/hybrid.json`` and the tables of ``docs/hybrid.md``.

Usage::

    python -m benchmarks.quality.hybrid --evaldata DIR --traindata DIR [--data ../shared/datasets]
        [--skip quality latency]
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


from benchmarks.common import ROOT, argument_parser
from benchmarks.quality.hybrid_tables import CANDIDATE_ONLY, NO_SCAN, PREVIOUS, table
from benchmarks.quality.pooled import load_corpora
from benchmarks.quality.pooled_eval import JUNK_AID, JUNK_ANSWERS
from benchmarks.readme_markers import replace_section
from qaindex import Ranker
from qaindex.corpus import read_corpus
from qaindex.eval.calibration_fit import labelled_pool
from qaindex.eval.datasets import read_labelled
from qaindex.eval.fusion_fit import FitPool, fit_fusion
from qaindex.model import DEFAULT_MODEL_DIR, Model
from qaindex.search.fusion import (
    CANDIDATE_FLOOR,
    Fusion,
    best_coverage,
    dense_weight,
    fuse,
    fusion_from,
    hybrid_arrays,
    question_coverage,
)
from qaindex.text.lexical import top_rows

RESULTS = ROOT / "benchmarks" / "results" / "hybrid.json"
K = 10
M = CANDIDATE_FLOOR  # candidates per side (k x the default overfetch, the search's smallest pool)
FAQ = "faq (examples)"
WORDNET = "wordnet held-out pairs"
MEDQUAD = "medquad held-out pairs"
FIT_EVALDATA = ("product-faq", "aws-docs")  # permissive licences (Apache-2.0; CC BY 4.0 questions)
FIXED = {
    "rrf c=10": Fusion("rrf", c=10),
    "rrf c=60": Fusion("rrf", c=60),
    "convex w=0.2": Fusion("convex", weight=0.2),
    "convex w=0.5": Fusion("convex", weight=0.5),
    "convex w=0.8": Fusion("convex", weight=0.8),
}
GRID_A = [round(x, 2) for x in np.arange(-1.0, 1.01, 0.25)]
GRID_B = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
GRID_DE = [(1.0, 0.0)] + [(d, e) for d in (1.0, 1.25, 1.5, 1.75) for e in (0.5, 1.0, 1.5, 2.0, 2.5)]
GRID_TERMS = [8.0, 10.0, 15.0, math.inf]
ORACLE_W = [round(w, 1) for w in np.arange(0.0, 1.01, 0.1)]


# ------------------------------------------------------------------------------ pools


@dataclass
class Pool:
    records: list[dict[str, Any]]
    questions: list[str]
    relevant: list[set[int]]


def with_junk(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return records + [{"id": f"{JUNK_AID}{i}", "answer": t} for i, t in enumerate(JUNK_ANSWERS)]


def faq_pool() -> Pool:
    records = read_corpus(ROOT / "examples" / "faq.jsonl")
    recs = [{"id": r.id, "answer": r.answer} for r in records]
    questions = [q for r in records for q in r.questions]
    relevant = [{i} for i, r in enumerate(records) for _ in r.questions]
    return Pool(with_junk(recs), questions, relevant)


def traindata_pool(folder: Path, source: str, questions: int = 500, distractors: int = 3000) -> Pool:
    """Held-out pairs of the training corpus (``texts.jsonl`` + ``pairs.npy``): the pairs
    ``export/training/tokenlearn.py`` holds out (seed 0, first 2,000 of a permutation), those of one
    source, searched among their answers and ``distractors`` other answers of that source."""
    lines = (folder / "texts.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    pairs = np.load(folder / "pairs.npy").astype(np.int64)
    dev = pairs[np.random.default_rng(0).permutation(len(pairs))[:2000]]
    mine = dev[[rows[q]["source"] == source for q, _ in dev]][:questions]
    others = np.unique(pairs[[rows[q]["source"] == source for q, _ in pairs]][:, 1])
    others = np.setdiff1d(others, mine[:, 1])
    extra = np.random.default_rng(1).choice(others, min(distractors, len(others)), replace=False)
    answers = list(dict.fromkeys(mine[:, 1].tolist() + extra.tolist()))
    where = {a: i for i, a in enumerate(answers)}
    grouped: dict[str, set[int]] = {}
    for q, a in mine:
        grouped.setdefault(rows[q]["text"], set()).add(where[a])
    records = [{"id": f"t{a}", "answer": rows[a]["text"]} for a in answers]
    return Pool(with_junk(records), list(grouped), list(grouped.values()))


def evaldata_pools(folder: Path) -> dict[str, Pool]:
    out = {}
    for name, groups in load_corpora(folder).items():
        records, questions, relevant = labelled_pool(groups)
        out[name] = Pool(records, questions, relevant)
    return out


def fit_pools(evalpools: dict[str, Pool], traindata: Path) -> dict[str, Pool]:
    """The fit pools, in order: the example FAQ, :data:`FIT_EVALDATA` (taken out of
    ``evalpools``) and the WordNet held-out pairs of ``traindata``."""
    pools = {FAQ: faq_pool()}
    for name in FIT_EVALDATA:
        pools[name] = evalpools.pop(name)
    pools[WORDNET] = traindata_pool(traindata, "wordnet")
    return pools


def half_a(n: int) -> np.ndarray:
    """The fit half of a pool's questions (seeded)."""
    mask = np.zeros(n, dtype=bool)
    mask[np.random.default_rng(0).permutation(n)[: n // 2]] = True
    return mask


# ------------------------------------------------------------------------------ candidates


@dataclass
class Collected:
    """Everything a fusion rule needs, per question: candidates, both scores, question terms."""

    ranker: Ranker
    ratio: float | None
    rows: list[np.ndarray]  # full path: dense top M | BM25 top M
    dense: list[np.ndarray]
    lexical: list[np.ndarray]
    terms: list[int]
    query_terms: list[np.ndarray]  # the question's BM25 term ids (LexicalIndex.query)
    coverage: list[float]  # lexical coverage of BM25's best answer (the adaptive rule's cov(q))
    wide_rows: np.ndarray  # dense top max(CANDIDATE_ONLY), exact, best first
    wide_dense: np.ndarray
    wide_lexical: list[np.ndarray]
    dense_top: list[list[int]]
    bm25_top: list[list[int]]


def collect(model: Model, pool: Pool) -> Collected:
    ranker = Ranker.build(pool.records, model=model, index_kind="flat", hybrid=True)
    lexical = ranker.state().lexical
    assert lexical is not None
    qv = model.encode(pool.questions, role="question")
    wide = min(len(ranker), max(CANDIDATE_ONLY))
    w_scores, _, w_rows = ranker.search_vectors(qv, wide)
    out = Collected(ranker, lexical.ratio, [], [], [], [], [], [], w_rows, w_scores, [], [], [])
    vectors = np.asarray(ranker.state().vectors)
    for i, question in enumerate(pool.questions):
        terms, length = lexical.query(question)
        full = lexical.scores_of_terms(terms)
        bm25_rows, _ = lexical.top(question, M)
        rows = np.union1d(w_rows[i, :M], bm25_rows)
        s, _ = model.score_checked(qv[i : i + 1], vectors[rows][None].astype(np.float32))
        out.rows.append(rows)
        out.dense.append(s[0])
        out.lexical.append(full[rows])
        out.terms.append(length)
        out.query_terms.append(terms)
        lex = full[rows]
        out.coverage.append(best_coverage(lexical, terms, length, rows, lex))
        out.wide_lexical.append(full[w_rows[i]])
        out.dense_top.append(w_rows[i, :K].tolist())
        out.bm25_top.append(bm25_rows[:K].tolist())
    return out


def _rr(ranked: list[int], good: set[int]) -> float:
    for rank, row in enumerate(ranked[:K], start=1):
        if row in good:
            return 1.0 / rank
    return 0.0


def ranked_by(
    fusion: Fusion, rows: np.ndarray, dense: np.ndarray, lexical: np.ndarray, ratio: Any, terms: int, coverage: float
) -> list[int]:
    """The runtime's order of one question's candidates (qaindex.search.fusion.hybrid_arrays)."""
    rule = fusion
    if fusion.rule == "adaptive":
        rule = Fusion("convex", weight=dense_weight(fusion, ratio, terms, coverage))
    fused = fuse(dense, lexical, rule, CANDIDATE_FLOOR)
    return rows[np.lexsort((rows, -dense.astype(np.float64), -fused))][:K].tolist()


def rr_of(c: Collected, pool: Pool, fusion: Fusion, only: int | None = None) -> np.ndarray:
    """Reciprocal rank per question; ``only``: BM25 on the model's top ``only`` candidates only."""
    out = np.empty(len(pool.questions))
    for i, good in enumerate(pool.relevant):
        if only is None:
            cov = c.coverage[i] if fusion.rule == "adaptive" and fusion.e else 0.0
            ranked = ranked_by(fusion, c.rows[i], c.dense[i], c.lexical[i], c.ratio, c.terms[i], cov)
        else:
            rows, lex = c.wide_rows[i, :only], c.wide_lexical[i][:only]
            cov = question_coverage(fusion, c.ranker.state().lexical, c.query_terms[i], c.terms[i], rows, lex)
            ranked = ranked_by(fusion, rows, c.wide_dense[i, :only], lex, c.ratio, c.terms[i], cov)
        out[i] = _rr(ranked, good)
    return out


def no_scan_rr(c: Collected, pool: Pool, fusion: Fusion) -> np.ndarray:
    """Reciprocal ranks of the large-index path (``hybrid_arrays(..., scan=False)``): dense top
    ``M`` plus BM25's best among the impact-ordered postings, BM25 scored on the candidates."""
    model, lexical = c.ranker.model, c.ranker.state().lexical
    out = np.empty(len(pool.questions))
    for start in range(0, len(pool.questions), 64):
        qs = pool.questions[start : start + 64]
        qv = model.encode(qs, role="question")
        _, _, rows, _ = hybrid_arrays(
            model, c.ranker.state().vectors, lexical, qs, qv, c.wide_rows[start : start + 64, :M], K, fusion, scan=False
        )
        for i, ranked in enumerate(rows):
            out[start + i] = _rr([int(r) for r in ranked if r >= 0], pool.relevant[start + i])
    return out


def parts(c: Collected, pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    dense = np.array([_rr(r, g) for r, g in zip(c.dense_top, pool.relevant, strict=True)])
    bm25 = np.array([_rr(r, g) for r, g in zip(c.bm25_top, pool.relevant, strict=True)])
    return dense, bm25


# ------------------------------------------------------------------------------ fit


def fit(
    collected: dict[str, Collected],
    pools: dict[str, Pool],
    terms_grid: list[float],
    de_grid: list[tuple[float, float]],
) -> tuple[Fusion, dict[str, Any]]:
    """The adaptive constants with the best worst-case margin over the fit pools' half A (ties:
    the best mean MRR@10 there), on the grid ``GRID_A x GRID_B x de_grid x terms_grid``."""
    grid = {"a": GRID_A, "b": GRID_B, "de": de_grid, "terms": terms_grid}
    fit_pools = [fit_pool(n, c, pools[n]) for n, c in collected.items()]
    masks = [half_a(len(pools[n].questions)) for n in collected]
    fusion, info = fit_fusion(fit_pools, masks=masks, grid=grid, start=None)
    return fusion, {"worst_margin_half_a": info["worst_margin"], "mean_mrr_half_a": info["mean_mrr"]}


def fit_pool(name: str, c: Collected, pool: Pool) -> FitPool:
    """The runtime fit's view of a collected pool (:class:`qaindex.eval.fusion_fit.FitPool`)."""
    return FitPool(name, c.ratio, c.rows, c.dense, c.lexical, c.terms, c.coverage, pool.relevant)


# ------------------------------------------------------------------------------ quality


def quality_row(c: Collected, pool: Pool, rules: dict[str, Fusion]) -> dict[str, Any]:
    a = half_a(len(pool.questions))
    d, b = parts(c, pool)
    row: dict[str, Any] = {"answers": len(pool.records), "questions": len(pool.questions), "ratio": c.ratio}
    row["median coverage"] = round(float(np.median(c.coverage)), 4)

    def put(name: str, rr: np.ndarray) -> None:
        row[name] = round(float(rr.mean()), 4)
        row[f"{name} (half B)"] = round(float(rr[~a].mean()), 4)

    put("dense", d)
    put("BM25", b)
    # what the question part reads: is BM25 better where BM25's best answer holds more of the question?
    cov = np.asarray(c.coverage)
    high = cov >= np.median(cov)
    row["BM25 - dense, coverage >= median"] = round(float((b - d)[high].mean()), 4)
    row["BM25 - dense, coverage < median"] = round(float((b - d)[~high].mean()), 4) if (~high).any() else None
    default_rule = rules["adaptive (default)"]
    weights = [dense_weight(default_rule, c.ratio, t, v) for t, v in zip(c.terms, c.coverage, strict=True)]
    row["default mean dense weight"] = round(float(np.mean(weights)), 4)
    for name, fusion in rules.items():
        put(name, rr_of(c, pool, fusion))
    default = rules["adaptive (default)"]
    for n in CANDIDATE_ONLY:
        put(f"default, BM25 on dense top {n}", rr_of(c, pool, default, only=n))
    put(NO_SCAN, no_scan_rr(c, pool, default))
    oracle = {w: float(rr_of(c, pool, Fusion("convex", weight=w)).mean()) for w in ORACLE_W}
    w_best = max(oracle, key=lambda w: oracle[w])
    row["best convex (labels)"] = round(oracle[w_best], 4)
    row["best convex w"] = w_best
    # the real search path must rank as the rule above
    hits = c.ranker.search_batch(pool.questions, K)
    real = np.array([_rr([h.row for h in hs], g) for hs, g in zip(hits, pool.relevant, strict=True)])
    row["search_batch"] = round(float(real.mean()), 4)
    return row


# ------------------------------------------------------------------------------ latency


def latency_texts(data: Path, size: int) -> list[str]:
    """``size`` answer texts: the distinct answers of every split, then recombined sentences."""
    seen: dict[str, None] = {}
    for path in sorted(data.glob("*/*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            seen.setdefault(json.loads(line)["answer"], None)
    base = list(seen)
    rng = np.random.default_rng(0)
    out = base[:size]
    while len(out) < size:
        a, b = rng.integers(len(base), size=2)
        wa, wb = base[a].split(), base[b].split()
        out.append(" ".join(wa[: len(wa) // 2] + wb[len(wb) // 2 :]))
    return out


def measure_latency(
    model: Model, data: Path, size: int, questions: list[str], repeats: int, saved: Path | None = None
) -> dict[str, Any]:
    build_s = None
    if saved is not None and (saved / "manifest.json").is_file():
        ranker = Ranker.load(saved)
    else:
        texts = latency_texts(data, size)
        started = time.perf_counter()
        ranker = Ranker.build([{"id": i, "answer": t} for i, t in enumerate(texts)], model=model, hybrid=True)
        build_s = round(time.perf_counter() - started, 1)
        if saved is not None:
            ranker.save(saved)
    lexical = ranker.state().lexical
    assert lexical is not None
    model = ranker.model
    fusion = fusion_from(None, model)
    qv0 = model.encode(questions[:1], role="question")
    ranker.search(questions[0], k=K)  # postings, impact order, warm caches
    hybrid_arrays(
        model, ranker.state().vectors, lexical, questions[:1], qv0, ranker.candidates(qv0, M), K, fusion, scan=True
    )
    names = ("dense", "hybrid", "dense_stage", "cand_stage", "scan_stage", "lex_noscan", "lex_scan")
    t: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(repeats):
        for q in questions:
            t0 = time.perf_counter()
            ranker.search(q, k=K, hybrid=False)
            t1 = time.perf_counter()
            ranker.search(q, k=K, hybrid=True)
            t2 = time.perf_counter()
            t["dense"].append((t1 - t0) * 1e3)
            t["hybrid"].append((t2 - t1) * 1e3)
            qv = model.encode([q], role="question")
            t3 = time.perf_counter()
            ranker.search_vectors(qv, K)
            t4 = time.perf_counter()
            hybrid_arrays(
                model, ranker.state().vectors, lexical, [q], qv, ranker.candidates(qv, M), K, fusion, scan=False
            )
            t5 = time.perf_counter()
            hybrid_arrays(
                model, ranker.state().vectors, lexical, [q], qv, ranker.candidates(qv, M), K, fusion, scan=True
            )
            t6 = time.perf_counter()
            # the lexical work alone: no scan (impact-ordered candidates, scored on rows) vs a scan
            terms, _ = lexical.query(q)
            extra = lexical.impact_rows(terms, M)
            lexical.scores_of_rows(terms, extra[top_rows(lexical.scores_of_rows(terms, extra), M)])
            t7 = time.perf_counter()
            terms, _ = lexical.query(q)
            top_rows(lexical.scores_of_terms(terms), M)
            t8 = time.perf_counter()
            for name, (a, b) in {"dense_stage": (t3, t4), "cand_stage": (t4, t5), "scan_stage": (t5, t6),
                                 "lex_noscan": (t6, t7), "lex_scan": (t7, t8)}.items():  # fmt: skip
                t[name].append((b - a) * 1e3)

    def pct(xs: list[float], q: float = 50) -> float:
        return round(float(np.percentile(xs, q)), 3)

    def added(a: str, b: str, q: float = 50) -> float:
        return pct([x - y for x, y in zip(t[a], t[b], strict=True)], q)

    return {
        "answers": len(ranker),
        "index_kind": ranker.index_kind,
        "build_seconds": build_s,
        "dense_ratio": lexical.ratio,
        "load_average": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
        "questions": len(questions) * repeats,
        "dense_p50_ms": pct(t["dense"]),
        "hybrid_p50_ms": pct(t["hybrid"]),
        "added_p50_ms": added("hybrid", "dense"),
        "dense_stage_p50_ms": pct(t["dense_stage"]),
        "candidates_only_stage_p50_ms": pct(t["cand_stage"]),
        "added_candidates_only_p50_ms": added("cand_stage", "dense_stage"),
        "scan_stage_p50_ms": pct(t["scan_stage"]),
        "added_scan_p50_ms": added("scan_stage", "dense_stage"),
        "lexical_no_scan_p50_ms": pct(t["lex_noscan"]),
        "lexical_no_scan_p10_ms": pct(t["lex_noscan"], 10),
        "lexical_scan_p50_ms": pct(t["lex_scan"]),
        "lexical_scan_p10_ms": pct(t["lex_scan"], 10),
        "dense_stage_p10_ms": pct(t["dense_stage"], 10),
        "candidates_only_stage_p10_ms": pct(t["cand_stage"], 10),
        "scan_stage_p10_ms": pct(t["scan_stage"], 10),
    }


def readme_body(results: dict[str, Any]) -> str:
    """The generated section of ``docs/hybrid.md`` (checked by ``tests/docs/test_claims.py``)."""
    return table(results)


# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__doc__, out=RESULTS)
    parser.add_argument("--evaldata", type=Path, required=True, help="Folder of corpora (tools/corpora.py).")
    parser.add_argument("--traindata", type=Path, required=True, help="Training corpus (texts.jsonl + pairs.npy).")
    parser.add_argument(
        "--data", type=Path, default=ROOT.parent / "shared" / "datasets", help="WikiQA/TrecQA (latency texts)."
    )
    parser.add_argument(
        "--model", type=Path, default=DEFAULT_MODEL_DIR, help="Model directory (its fusion is measured)."
    )
    parser.add_argument("--latency-size", type=int, default=100_000, help="Answers of the latency index.")
    parser.add_argument("--latency-questions", type=int, default=200, help="Questions timed.")
    parser.add_argument("--repeats", type=int, default=2, help="Passes over the timed questions.")
    parser.add_argument(
        "--latency-index", type=Path, default=None, help="Save the latency index here (reused when it exists)."
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["quality", "latency"], help="Parts to skip.")
    args = parser.parse_args(argv)
    previous = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    results: dict[str, Any] = {"k": K, "candidates": M}
    model = Model.load(args.model)
    evalpools = evaldata_pools(args.evaldata)
    pools = fit_pools(evalpools, args.traindata)
    fit_names = list(pools)
    pools.update(evalpools)
    pools[MEDQUAD] = traindata_pool(args.traindata, "medquad")
    collected: dict[str, Collected] = {}
    needed = "quality" not in args.skip
    for name, pool in pools.items() if needed else []:
        collected[name] = collect(model, pool)
        print(
            f"{name}: {len(pool.records)} answers, {len(pool.questions)} questions, ratio {collected[name].ratio}",
            flush=True,
        )
    fit_set = {n: collected[n] for n in fit_names if n in collected}
    fusion = fusion_from(None, model)
    results["fitted"] = fusion.to_json()
    results["fit_pools"] = fit_names
    if "quality" not in args.skip:
        corpus_only, _ = fit(fit_set, pools, [math.inf], [(1.0, 0.0)])
        previous_rule, _ = fit(fit_set, pools, GRID_TERMS, [(1.0, 0.0)])
        rules = {
            **FIXED,
            "adaptive, corpus ratio only": corpus_only,
            PREVIOUS: previous_rule,
            "adaptive (default)": fusion,
        }
        results["rules"] = {n: f.to_json() for n, f in rules.items()}
        results["corpora"] = {}
        for name, pool in pools.items():
            row = quality_row(collected[name], pool, rules)
            if abs(row["search_batch"] - row["adaptive (default)"]) > 1e-9:
                print(f"warning: {name}: search_batch {row['search_batch']} != rule {row['adaptive (default)']}")
            results["corpora"][name] = row
            print(name, json.dumps(row), flush=True)
    else:
        for key in ("rules", "corpora"):
            if key in previous:
                results[key] = previous[key]
    if "latency" not in args.skip:
        groups = read_labelled(args.data / "wikiqa" / "test.filtered.jsonl")
        questions = [g.question for g in groups][: args.latency_questions]
        results["latency"] = measure_latency(
            model, args.data, args.latency_size, questions, args.repeats, args.latency_index
        )
        print("latency", json.dumps(results["latency"]), flush=True)
    elif "latency" in previous:
        results["latency"] = previous["latency"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    replace_section("hybrid-table", readme_body(results))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
