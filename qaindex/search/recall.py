"""Recall@k of an index's coarse stage and of its full pipeline against exact search.

The ground truth is a brute-force float64 ranking of every stored answer in the model's
geometry (:func:`qaindex.vector_index.exact_search`). :meth:`qaindex.Ranker.recall` checks its
arguments (:func:`qaindex.search.plan.check_recall`) and calls :func:`measure_recall` with its
index state, the coarse index brought up to date first.

Example
-------
>>> measure_recall(ranker.state(), 10)["recall"]
1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..vector_index import exact_search
from . import budget
from .pipeline import candidate_rows, search_vectors
from .plan import check_questions

if TYPE_CHECKING:
    from .state import IndexState

__all__ = ["measure_recall"]


def measure_recall(
    state: IndexState, k: int = 10, *, questions: Sequence[str] | None = None, sample: int = 200, seed: int = 0
) -> dict[str, Any]:
    """Recall@k of the coarse stage and of the full pipeline against exact search.

    Questions default to a seeded sample of ``sample`` questions stored with the answers, or
    the answer texts themselves when none are stored.

    Parameters
    ----------
    state : IndexState
    k : int
        Positive; bounded by the index size.
    questions : list of str, keyword-only, optional
        Questions to measure with, checked (default: a sample of the stored ones).
    sample : int, keyword-only
        How many stored questions to sample (positive).
    seed : int, keyword-only
        Seed of the sample (non-negative).

    Returns
    -------
    dict
        ``{"k", "queries", "candidates", "coarse_recall", "recall", "source"}``.
    """
    source = "given"
    if questions is None:
        records = [state.records.get(row) for row in range(len(state))]
        stored = [q for rec in records for q in rec.questions]
        source = "stored questions"
        if not stored:
            stored = [rec.answer for rec in records]
            source = "answer texts"
        rng = np.random.default_rng(seed)
        pick = rng.choice(len(stored), size=min(sample, len(stored)), replace=False)
        questions = check_questions([stored[i] for i in sorted(pick)])
    qs = list(questions)
    kk = min(k, len(state))
    budget.check_result(
        len(qs) * (kk * budget.RECALL_PAIR_BYTES + min(len(state), kk * state.overfetch) * 8),
        budget.request_budget(state.memory_budget),
        f"recall@{kk:,} over {len(qs):,} questions",
        "use a smaller k or sample",
    )
    qv = state.model.encode(qs, role="question")
    _, truth = exact_search(qv, state.vectors, kk, geometry=state.model.space)
    m = min(len(state), kk * state.overfetch)
    coarse_rows = candidate_rows(state, qv, m)
    _, _, final_rows = search_vectors(state, qv, kk)

    def overlap(found: np.ndarray) -> float:
        hits = sum(len(set(f[f >= 0].tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
        return hits / max(1, truth.size)

    return {
        "k": kk,
        "queries": len(qs),
        "source": source,
        "candidates": m,
        "coarse_recall": overlap(coarse_rows),
        "recall": overlap(final_rows),
    }
