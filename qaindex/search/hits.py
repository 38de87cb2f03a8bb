"""Search results: the :class:`Hit` type, hits from score arrays, and the cut to ``k``.

Example
-------
>>> Hit("a1", "Open Settings.", 0.9, 0.3).to_json()["raw_score"] is None
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..arguments import numeric_table
from ..errors import QueryError
from ..store.records import RecordStore
from . import budget

__all__ = ["MATCHED", "Hit", "cut", "hit_bytes", "make_hits"]

#: ``Hit.matched`` by its code in a ``matched`` array (:mod:`qaindex.search.keys`)
MATCHED = ("answer", "question")


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
        calibration (:mod:`qaindex.eval.calibration`) of ``raw_score``; ``sigmoid(raw_score)`` for a
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
    matched : {"answer", "question"}
        Which key of the record the search matched: its answer, or one of its stored
        questions (:mod:`qaindex.search.keys`); ``score`` and ``distance`` are that key's.
    """

    id: str | int
    answer: str
    score: float
    distance: float
    metadata: dict[str, Any] = field(default_factory=dict)
    row: int = field(default=-1, compare=False)
    raw_score: float = math.nan
    matched: str = "answer"

    def to_json(self) -> dict[str, Any]:
        """``{"id", "answer", "score", "raw_score", "distance", "metadata", "matched"}`` (NaN raw_score: null)."""
        return {
            "id": self.id,
            "answer": self.answer,
            "score": self.score,
            "raw_score": None if math.isnan(self.raw_score) else self.raw_score,
            "distance": self.distance,
            "metadata": self.metadata,
            "matched": self.matched,
        }


def cut(hits: list[Hit], k: int, min_score: float | None) -> list[Hit]:
    """The first ``k`` hits, without those scoring below ``min_score`` (hits are best first)."""
    if min_score is not None:
        hits = [h for h in hits if h.score >= min_score]
    return hits[:k]


def hit_bytes(records: RecordStore) -> int:
    """About what one Hit costs in memory (:mod:`qaindex.search.budget`)."""
    return budget.HIT_OVERHEAD + int(records.offsets[-1]) // max(1, len(records))


def make_hits(
    records: RecordStore,
    calibration: Any,
    scores: Any,
    distances: Any,
    rows: Any,
    memory_budget: int | None,
    probabilities: Any = None,
    matched: Any = None,
) -> list[list[Hit]]:
    """Hits from score, distance and row arrays (rows ``-1`` skipped), one list per query.

    Scores become probabilities through the model's ``calibration`` (a raw score and its
    distance below the best of its row), unless ``probabilities`` (hybrid search's calibrated
    scores, :mod:`qaindex.search.fusion`) are given; the arrays are checked first (same 2-D shape, rows
    of this store) and the result is bounded by the request's memory budget. ``matched``:
    each hit's key code (:data:`MATCHED` order; None: every hit an answer's).
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
        r.size * hit_bytes(records),
        budget.request_budget(memory_budget),
        f"hits for {r.shape[0]:,} x {r.shape[1]:,} rows",
        "pass fewer rows per call",
    )
    out: list[list[Hit]] = []
    # raw score (and its distance below the best of its row) -> P(relevant), qaindex.eval.calibration
    best = np.where(r >= 0, s, -np.inf).max(axis=1, keepdims=True) if s.size else s
    probs = calibration(s, best) if probabilities is None else np.asarray(probabilities, np.float64)
    codes = np.zeros(r.shape, np.int8) if matched is None else np.asarray(matched)
    for srow, prow, drow, rrow, mrow in zip(s, probs, d, r, codes, strict=True):
        found = []
        for score, prob, dist, row, code in zip(
            srow.tolist(), prow.tolist(), drow.tolist(), rrow.tolist(), mrow.tolist(), strict=True
        ):
            if row < 0:
                continue
            rec = records.get(row)
            key = MATCHED[code]
            found.append(Hit(rec.id, rec.answer, prob, dist + 0.0, dict(rec.metadata), row, score + 0.0, key))
        out.append(found)
    return out
