"""Search results: the :class:`Hit` type, hits from score arrays, and the cut to ``k``.

Example
-------
>>> Hit("a1", "Open Settings.", 0.9, 0.3).to_json()["raw_score"] is None
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..checks import numeric_table
from ..errors import QueryError
from ..store.records import RecordStore
from . import budget
from .budget import hit_bytes

__all__ = ["MATCHED", "Explanation", "Hit", "cut", "dense_explanations", "hit_bytes", "make_hits"]

#: ``Hit.matched`` by its code in a ``matched`` array (:mod:`qaindex.search.keys`)
MATCHED = ("answer", "question", "passage")


@dataclass(frozen=True)
class Explanation:
    """Why a hit has its rank (``search(..., explain=True)``).

    Attributes
    ----------
    key : str
        What of the record matched the question: ``"answer"``, ``"question"`` when one of
        its stored questions did, or ``"passage"`` when a window of its long answer did
        (:mod:`qaindex.search.keys`; the scores and ranks are then that key's). Always the
        hit's ``matched``.
    dense_score : float
        The model's raw score of the hit (higher is better).
    dense_rank : int
        Its 1-based rank by that score among the answers the search scored (ties by row).
    bm25_score : float or None
        Its BM25 score (0: no question term matched); None in a dense search.
    bm25_rank : int or None
        Its 1-based rank by BM25 among the scored answers; None when no term matched or in
        a dense search.
    matched_terms : tuple of str
        The question's BM25 terms (lower-cased, stemmed) the answer holds, in question order.
    fused : float or None
        The fused value the hybrid order sorts by (:func:`qaindex.search.fusion.fuse`); None
        in a dense search.
    dense_weight : float or None
        The weight of the model's part in a ``convex``/``adaptive`` fusion (None otherwise).
    question_top : float or None
        The question's best model score over the candidates' answers and stored questions
        (passages left out): the calibrated ``p_top`` the hybrid ``score`` reads
        (docs/scores.md); the same for every hit of a search; None in a dense search.
    question_coverage : float or None
        The question's lexical coverage: the share of its terms' IDF that BM25's best
        candidate holds (:meth:`~qaindex.text.lexical.LexicalIndex.coverage`); the same for
        every hit; None in a dense search.
    question_match : float or None
        The question's BM25 match: the best BM25 score among the candidates over the most any
        answer could score for it (read by calibrations fitted before the coverage); the same
        for every hit; None in a dense search.

    Example
    -------
    >>> Explanation(dense_score=1.5, dense_rank=1).to_json()["key"]
    'answer'
    """

    dense_score: float
    dense_rank: int
    bm25_score: float | None = None
    bm25_rank: int | None = None
    matched_terms: tuple[str, ...] = ()
    fused: float | None = None
    dense_weight: float | None = None
    key: str = "answer"
    question_top: float | None = None
    question_coverage: float | None = None
    question_match: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Every attribute, ``matched_terms`` as a list."""
        return {
            "key": self.key,
            "dense_score": self.dense_score,
            "dense_rank": self.dense_rank,
            "bm25_score": self.bm25_score,
            "bm25_rank": self.bm25_rank,
            "matched_terms": list(self.matched_terms),
            "fused": self.fused,
            "dense_weight": self.dense_weight,
            "question_top": self.question_top,
            "question_coverage": self.question_coverage,
            "question_match": self.question_match,
        }

    def line(self) -> str:
        """One line for the CLI table: ``dense 1.2345 (#2)  bm25 3.4000 (#1: refund)  fused 0.9000  key answer``."""
        parts = [f"dense {self.dense_score:.4f} (#{self.dense_rank})"]
        if self.bm25_score is not None:
            rank = "-" if self.bm25_rank is None else f"#{self.bm25_rank}"
            terms = f": {', '.join(self.matched_terms)}" if self.matched_terms else ""
            parts.append(f"bm25 {self.bm25_score:.4f} ({rank}{terms})")
        if self.fused is not None:
            parts.append(f"fused {self.fused:.4f}")
        return "  ".join([*parts, f"key {self.key}"])


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes
    ----------
    id : str or int
        The answer's id.
    answer : str
        The answer text.
    score : float
        The estimated probability, in [0, 1], that the answer is relevant: the model's
        calibration (:mod:`qaindex.search.calibration`) of ``raw_score``; ``sigmoid(raw_score)`` for a
        model without one (``info`` says ``uncalibrated``). ``min_score`` filters on it.
    distance : float
        Poincaré distance between question and answer (1 - cosine for cosine models).
    metadata : dict
        The answer's other corpus fields.
    row : int
        The answer's row in the index (as in :meth:`Ranker.search_vectors`), valid until the
        next ``add`` or ``remove``; -1 for a Hit made by hand. Not part of equality or JSON.
    raw_score : float
        The model's own score, higher is better, unbounded (the reranker's with a reranker);
        NaN for a Hit made by hand without one.
    explanation : Explanation or None
        Why the hit has its rank (the first stage's parts), with ``explain=True``; else None.
        Not part of equality.
    matched : {"answer", "question", "passage"}
        Which key of the record the search matched: its answer, one of its stored
        questions, or a passage of its long answer (:mod:`qaindex.search.keys`); ``score``
        and ``distance`` are that key's.

    Hits are hashable (sets, dict keys): equal hits hash equally.

    Example
    -------
    >>> a = Hit("a1", "Open Settings.", 0.9, 0.3, {"tags": ["ui"]})
    >>> len({a, Hit("a1", "Open Settings.", 0.9, 0.3, {"tags": ["ui"]})})
    1
    """

    id: str | int
    answer: str
    score: float
    distance: float
    metadata: dict[str, Any] = field(default_factory=dict)
    row: int = field(default=-1, compare=False)
    raw_score: float = math.nan
    matched: str = "answer"
    explanation: Explanation | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        # equality compares id, answer, score, distance, metadata and raw_score; hashing the
        # hashable ones of them (not the metadata dict) keeps equal hits at equal hashes
        return hash((self.id, self.answer, self.score, self.distance))

    def to_json(self) -> dict[str, Any]:
        """``{"id", "answer", "score", "raw_score", "distance", "metadata", "matched"}`` (NaN
        raw_score: null), and ``"explanation"`` when the hit has one."""
        out = {
            "id": self.id,
            "answer": self.answer,
            "score": self.score,
            "raw_score": None if math.isnan(self.raw_score) else self.raw_score,
            "distance": self.distance,
            "metadata": self.metadata,
            "matched": self.matched,
        }
        if self.explanation is not None:
            out["explanation"] = self.explanation.to_json()
        return out


def cut(hits: list[Hit], k: int, min_score: float | None) -> list[Hit]:
    """The first ``k`` hits, without those scoring below ``min_score`` (hits are best first)."""
    if min_score is not None:
        hits = [h for h in hits if h.score >= min_score]
    return hits[:k]


def make_hits(
    records: RecordStore,
    calibration: Any,
    scores: Any,
    distances: Any,
    rows: Any,
    memory_budget: int | None,
    probabilities: Any = None,
    explanations: list[list[Explanation]] | None = None,
    matched: Any = None,
    hit_size: int | None = None,
) -> list[list[Hit]]:
    """Hits from score, distance and row arrays (rows ``-1`` skipped), one list per query.

    Scores become probabilities through the model's ``calibration`` (a raw score and its
    distance below the best of its row), unless ``probabilities`` (hybrid search's calibrated
    scores, :mod:`qaindex.search.fusion`) are given; the arrays are checked first (same 2-D shape, rows
    of this store) and the result is bounded by the request's memory budget. ``explanations``:
    one per valid row, in order, attached to the hits (their ``key`` set to the hit's
    ``matched``). ``matched``: each hit's key code (:data:`MATCHED` order; None: every hit an
    answer's). ``hit_size``: the bytes of one hit (default :func:`~.budget.hit_bytes` of ``records``).
    """
    s = numeric_table(scores, "scores")
    d = numeric_table(distances, "distances")
    r = numeric_table(rows, "rows", integer=True)
    if s.ndim != 2 or s.shape != d.shape or s.shape != r.shape:
        raise QueryError(
            f"scores, distances and rows must be 2-D arrays of one shape, got {s.shape}, {d.shape}, {r.shape}"
        )
    count = len(records)
    if r.size and (not np.issubdtype(r.dtype, np.integer) or r.max() >= count or r.min() < -1):
        raise QueryError(f"rows must be integers in [-1, {count - 1}] (from search_vectors of this index)")
    budget.check_result(
        r.size * (hit_bytes(records) if hit_size is None else hit_size),
        budget.request_budget(memory_budget),
        f"hits for {r.shape[0]:,} x {r.shape[1]:,} rows",
        "pass fewer rows per call",
    )
    out: list[list[Hit]] = []
    # raw score (and its distance below the best of its row) -> P(relevant), qaindex.search.calibration
    best = np.where(r >= 0, s, -np.inf).max(axis=1, keepdims=True) if s.size else s
    probs = calibration(s, best) if probabilities is None else np.asarray(probabilities, np.float64)
    codes = np.zeros(r.shape, np.int8) if matched is None else np.asarray(matched)
    for i, (srow, prow, drow, rrow, mrow) in enumerate(zip(s, probs, d, r, codes, strict=True)):
        found = []
        why = iter(explanations[i]) if explanations is not None else None
        for score, prob, dist, row, code in zip(
            srow.tolist(), prow.tolist(), drow.tolist(), rrow.tolist(), mrow.tolist(), strict=True
        ):
            if row < 0:
                continue
            rec = records.get(row)
            key = MATCHED[code]
            explanation = None if why is None else next(why)
            if explanation is not None and explanation.key != key:  # the key that matched, as `matched` says
                explanation = replace(explanation, key=key)
            found.append(
                Hit(rec.id, rec.answer, prob, dist + 0.0, dict(rec.metadata), row, score + 0.0, key, explanation)
            )
        out.append(found)
    return out


def dense_explanations(scores: np.ndarray, rows: np.ndarray) -> list[list[Explanation]]:
    """Explanations of dense hits (best first): their raw score and position (``-1`` rows skipped)."""
    out = []
    for srow, rrow in zip(np.asarray(scores).tolist(), np.asarray(rows).tolist(), strict=True):
        kept = [score for score, row in zip(srow, rrow, strict=True) if row >= 0]
        out.append([Explanation(dense_score=score + 0.0, dense_rank=j + 1) for j, score in enumerate(kept)])
    return out
