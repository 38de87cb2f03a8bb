"""Fitting a model's fusion rule: the ``adaptive`` constants that keep hybrid search at least
as good as the better of its two halves, and the calibration that follows.

A *fit pool* is a labelled corpus searched whole (:func:`collect`): per question, its
candidates (the model's :data:`~qaindex.search.fusion.CANDIDATE_FLOOR` best answers and
BM25's), both scores of each, its BM25 term count and lexical coverage, and the corpus's
label-free dense/BM25 ratio. :func:`fit_fusion` chooses the ``adaptive`` constants
(:func:`~qaindex.search.fusion.dense_weight`) on a grid by::

    margin(pool) = MRR@10(fused) - max(MRR@10(dense), MRR@10(BM25))
    objective    = (min over pools of margin, then the mean fused MRR@10)

A ``start`` rule (the safe fallback, :data:`~qaindex.search.fusion.SAFE_FUSION`) is kept
unless a grid point beats its worst-case margin by ``min_gain``; with pools of a single
dense/BM25 ratio the slope ``b`` cannot be told from the intercept ``a`` and stays ``start``'s.

:func:`fit_written_model` is what ``qaindex export-model`` and ``qaindex train`` run on the
model they wrote: the fusion fitted on the example FAQ shipped with the package
(:data:`EXAMPLE_FAQ`, 732 labelled questions written for this project) and on the user's
held-out labelled questions when there are some, stored in the manifest, then the model's
calibration (dense and hybrid, :func:`~.calibrate.calibrate_model`) with the built-in
off-topic questions' ``fit`` split as not relevant.

Example
-------
>>> pool = FitPool("p", 1.0, [np.array([0, 1])], [np.array([2.0, 1.0])], [np.array([1.0, 3.0])],
...                [2], [1.0], [{0}])
>>> pool.parts()
(1.0, 0.5)
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError
from ..model import Model
from ..ranker import Ranker
from ..search.fusion import CANDIDATE_FLOOR, SAFE_FUSION, Fusion, best_coverage, dense_weight, fuse
from ..store.atomic_files import read_json_object, write_json_atomic
from ..text.lexical import tokenizer_available
from .calibration_fit import calibrate_model, labelled_pool
from .datasets import read_labelled

__all__ = [
    "EXAMPLE_FAQ",
    "FIT_GRID",
    "FitPool",
    "collect",
    "fit_fusion",
    "fit_written_model",
    "ranked",
]

K = 10
EXAMPLE_FAQ = Path(__file__).resolve().parent / "data" / "faq.jsonl"  # a copy of examples/faq.jsonl
# (a, b, (d, e), terms) of the grid fit_written_model searches (ties: the point nearest the start)
FIT_GRID: dict[str, list[Any]] = {
    "a": [round(x, 2) for x in np.arange(1.0, -1.01, -0.25)],
    "b": [2.0, 1.5, 1.0, 0.5, 0.0],
    "de": [(1.0, 0.0), (1.5, 1.0), (1.25, 0.5), (1.5, 2.0), (1.0, 0.5), (1.25, 1.0), (1.25, 1.5)],
    "terms": [math.inf, 30.0, 15.0, 10.0],
}
MIN_GAIN = 0.005  # a fit replaces the safe fallback only when its worst-case margin is this much better


@dataclass
class FitPool:
    """One labelled corpus, searched: what a fusion rule needs per question."""

    name: str
    ratio: float | None  # the corpus's dense/BM25 ratio (None: not measured)
    rows: list[np.ndarray]  # candidate rows: the model's best and BM25's best
    dense: list[np.ndarray]  # the model's scores of the candidates
    lexical: list[np.ndarray]  # their BM25 scores
    terms: list[int]  # the question's BM25 term count
    coverage: list[float]  # lexical coverage of BM25's best candidate
    relevant: list[set[int]]

    def __len__(self) -> int:
        return len(self.rows)

    def parts(self, mask: np.ndarray | None = None) -> tuple[float, float]:
        """MRR@10 of the dense and of the BM25 ranking of the candidates (questions in ``mask``)."""
        idx = np.arange(len(self)) if mask is None else np.flatnonzero(mask)
        d, b = [], []
        for i in idx.tolist():
            rows, dense, lex = self.rows[i], self.dense[i], self.lexical[i]
            d.append(_rr(rows[np.lexsort((rows, -dense.astype(np.float64)))].tolist(), self.relevant[i]))
            hit = lex > 0
            b.append(_rr(rows[hit][np.lexsort((rows[hit], -lex[hit]))].tolist(), self.relevant[i]))
        return float(np.mean(d)) if d else 0.0, float(np.mean(b)) if b else 0.0


def _rr(ranking: list[int], good: set[int]) -> float:
    return next((1.0 / r for r, row in enumerate(ranking[:K], start=1) if row in good), 0.0)


def ranked(fusion: Fusion, pool: FitPool, i: int) -> list[int]:
    """The runtime's top :data:`K` of question ``i`` of ``pool`` under ``fusion``
    (:func:`qaindex.search.fusion.hybrid_arrays`: fused value, then model score, then row)."""
    rule = fusion
    if fusion.rule == "adaptive":
        rule = Fusion("convex", weight=dense_weight(fusion, pool.ratio, pool.terms[i], pool.coverage[i]))
    rows, dense = pool.rows[i], pool.dense[i]
    fused = fuse(dense, pool.lexical[i], rule, CANDIDATE_FLOOR)
    return [int(r) for r in rows[np.lexsort((rows, -dense.astype(np.float64), -fused))][:K]]


def collect(
    model: Any, records: Sequence[Any], questions: Sequence[str], relevant: Sequence[set[int]], name: str
) -> FitPool:
    """Search every question of a labelled corpus (``records``, rows as in ``relevant``) in a
    flat hybrid index of its answers (no keys: the fit ranks answers) and keep what
    :func:`fit_fusion` needs."""
    ranker = Ranker.build(list(records), model=model, index_kind="flat", hybrid=True, question_keys=False)
    state = ranker.state()
    lexical = state.lexical
    assert lexical is not None
    qv = ranker.model.encode(list(questions), role="question")
    m = min(len(ranker), CANDIDATE_FLOOR)
    _, _, dense_rows = ranker.search_vectors(qv, m)
    vectors = np.asarray(state.vectors)
    pool = FitPool(name, lexical.ratio, [], [], [], [], [], list(relevant))
    for i, question in enumerate(questions):
        terms, length = lexical.query(question)
        full = lexical.scores_of_terms(terms)
        bm25_rows, _ = lexical.top(question, m)
        rows = np.union1d(dense_rows[i][dense_rows[i] >= 0], bm25_rows).astype(np.int64)
        s, _ = ranker.model.score_checked(qv[i : i + 1], vectors[rows][None].astype(np.float32))
        lex = full[rows]
        pool.rows.append(rows)
        pool.dense.append(np.asarray(s[0]))
        pool.lexical.append(np.asarray(lex))
        pool.terms.append(length)
        pool.coverage.append(best_coverage(lexical, terms, length, rows, lex))
    return pool


def fit_fusion(
    pools: Sequence[FitPool],
    *,
    masks: Sequence[np.ndarray] | None = None,
    grid: dict[str, list[Any]] | None = None,
    start: Fusion | None = SAFE_FUSION,
    min_gain: float = MIN_GAIN,
) -> tuple[Fusion, dict[str, Any]]:
    """The ``adaptive`` fusion with the best worst-case margin of fused MRR@10 over the better
    of dense and BM25 across ``pools`` (ties: the best mean fused MRR@10), on ``grid``.

    Parameters
    ----------
    pools : list of FitPool
    masks : list of bool arrays, optional
        The questions of each pool that count (default: all).
    grid : dict, optional
        ``{"a": [...], "b": [...], "de": [(d, e), ...], "terms": [...]}`` (default :data:`FIT_GRID`).
    start : Fusion or None
        Kept unless a grid point's worst-case margin beats it by ``min_gain``; ties of the
        objective go to the grid point nearest it; with a single distinct ratio among the
        pools, ``b`` is fixed at ``start.b``. None: the grid's first best.
    min_gain : float

    Returns
    -------
    fusion : Fusion
    info : dict
        ``worst_margin``, ``mean_mrr`` (of the chosen rule), ``margins`` (per pool), and
        ``kept_start`` (whether ``start`` was kept).

    Example
    -------
    >>> pool = FitPool("p", 1.0, [np.array([0, 1])] * 2, [np.array([2.0, 1.0])] * 2,
    ...                [np.array([0.0, 3.0])] * 2, [1, 1], [1.0, 1.0], [{0}, {1}])
    >>> fit_fusion([pool], start=None)[1]["worst_margin"]
    0.0
    """
    grid = FIT_GRID if grid is None else grid
    masks = [np.ones(len(p), dtype=bool) for p in pools] if masks is None else list(masks)
    chosen = [np.flatnonzero(mk) for mk in masks]
    best_part = [max(p.parts(mk)) for p, mk in zip(pools, masks, strict=True)]
    seen: dict[tuple[int, int, float], float] = {}

    def rr_at(j: int, i: int, w: float) -> float:
        if (j, i, w) not in seen:
            seen[j, i, w] = _rr(ranked(Fusion("convex", weight=w), pools[j], i), pools[j].relevant[i])
        return seen[j, i, w]

    def score(fusion: Fusion) -> tuple[tuple[float, float], list[float]]:
        fused = [
            float(
                np.mean([rr_at(j, i, dense_weight(fusion, p.ratio, p.terms[i], p.coverage[i])) for i in idx.tolist()])
            )
            if len(idx)
            else 0.0
            for j, (p, idx) in enumerate(zip(pools, chosen, strict=True))
        ]
        margins = [f - b for f, b in zip(fused, best_part, strict=True)]
        return (round(min(margins), 4), float(np.mean(fused))), margins

    b_grid = list(grid["b"])
    if start is not None and len({None if p.ratio is None else round(p.ratio, 4) for p in pools}) < 2:
        b_grid = [start.b]
    best: tuple[tuple[float, float], Fusion, list[float]] | None = None
    near: float | None = None
    for a, b, (d, e), terms in itertools.product(grid["a"], b_grid, grid["de"], grid["terms"]):
        fusion = Fusion("adaptive", weight=0.5 if start is None else start.weight, a=a, b=b, terms=terms, d=d, e=e)
        key, margins = score(fusion)
        distance = _distance(fusion, start)
        if best is None or key > best[0] or (key == best[0] and near is not None and distance < near):
            best, near = (key, fusion, margins), distance
    assert best is not None
    kept = False
    if start is not None:
        start_key, start_margins = score(start)
        if best[0][0] < start_key[0] + min_gain:
            best, kept = (start_key, start, start_margins), True
    key, fusion, margins = best
    return fusion, {
        "worst_margin": key[0],
        "mean_mrr": round(key[1], 4),
        "margins": {p.name: round(m, 4) for p, m in zip(pools, margins, strict=True)},
        "kept_start": kept,
    }


def _distance(fusion: Fusion, start: Fusion | None) -> float:
    """How far a grid point is from ``start`` (0 without one): ties of the objective go to the
    nearest, so a fit on pools that cannot tell two rules apart keeps the start's corpus part."""
    if start is None:
        return 0.0
    inv = [0.0 if math.isinf(t) else 1.0 / t for t in (fusion.terms, start.terms)]
    return (
        abs(fusion.a - start.a)
        + abs(fusion.b - start.b)
        + abs(fusion.d - start.d)
        + abs(fusion.e - start.e)
        + abs(inv[0] - inv[1])
    )


def faq_pool_groups() -> list[Any]:
    """The example FAQ's question groups (:data:`EXAMPLE_FAQ`)."""
    return read_labelled(EXAMPLE_FAQ)


def fit_written_model(
    model_dir: str | os.PathLike[str],
    *,
    held_out: Sequence[Any] = (),
    held_out_source: str = "",
    calibration_groups: Sequence[Any] | None = None,
    calibration_source: str = "",
    labels: str = "labelled",
    offtopic: Sequence[str] = (),
    offtopic_source: str = "",
) -> dict[str, Any]:
    """Fit the fusion of a model qaindex just wrote, store it, then calibrate the model.

    The fusion (:func:`fit_fusion`, safe fallback as ``start``) is fitted on the example FAQ
    (:data:`EXAMPLE_FAQ`) and on ``held_out`` (labelled question groups the model did not
    train on) when given; it is stored as the manifest's ``"fusion"`` with what it was fitted
    on. Skipped without the ``hybrid`` extra. Then :func:`~.calibrate.calibrate_model` on
    ``calibration_groups`` (default: ``held_out`` and the example FAQ) with ``offtopic`` as not
    relevant, which also fits the hybrid score on the fused value of the stored fusion: on
    the same questions, or on the example FAQ's where ``labels`` says they are not labelled
    but a teacher's judgements of pseudo-questions (cut from the answers, they share far more
    words with their answer than a user's question does, and a hybrid score fitted on them
    scores real questions too low).

    Returns
    -------
    dict
        ``{"fusion": ..., "calibration": ...}``: the stored objects (``fusion`` None when not fitted).
    """
    directory = Path(model_dir)
    faq = faq_pool_groups()
    fitted_on = ["example FAQ (qaindex/eval/data/faq.jsonl)"]
    stored_fusion = None
    if tokenizer_available():
        model = Model.load(directory)
        pools = [collect(model, *labelled_pool(faq), name=fitted_on[0])]
        if any(g.has_positive for g in held_out):
            pools.append(collect(model, *labelled_pool(held_out), name=held_out_source or "held-out questions"))
            fitted_on.append(pools[-1].name)
        fusion, info = fit_fusion(pools)
        stored_fusion = {**replace(fusion, fused_score=None, score=None).to_json(), "fitted_on": fitted_on, **info}
        path = directory / "manifest.json"
        manifest = read_json_object(path, error=ModelFormatError, what="model directory")
        manifest["fusion"] = stored_fusion
        write_json_atomic(path, manifest)
    if calibration_groups is None:
        calibration_groups = [*held_out, *faq]
        calibration_source = calibration_source or " + ".join(
            s for s in (held_out_source if held_out else "", fitted_on[0]) if s
        )
    labelled = labels == "labelled"  # else pseudo-questions: the hybrid score is fitted on the example FAQ
    calibration = calibrate_model(
        directory,
        calibration_groups,
        source=calibration_source,
        labels=labels,
        offtopic=offtopic,
        offtopic_source=offtopic_source,
        hybrid=True,
        hybrid_groups=None if labelled else faq,
        hybrid_source="" if labelled else fitted_on[0],
    )
    return {"fusion": stored_fusion, "calibration": calibration}
