"""Recall@k of an index's coarse stage and of its full pipeline against exact search.

The ground truth is a brute-force float64 ranking of every stored answer in the model's
geometry (:func:`qaindex.vector_index.exact_search`). :meth:`qaindex.Ranker.recall` calls
:func:`measure_recall`.

Example
-------
>>> measure_recall(ranker, 10)["recall"]
1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..arguments import MAX_INT64, positive_int
from ..errors import QueryError
from ..vector_index import exact_search
from . import budget
from .pipeline import candidate_rows, check_k, check_questions, search_vectors

if TYPE_CHECKING:
    from ..ranker import Ranker

__all__ = ["measure_recall"]


def measure_recall(
    ranker: Ranker, k: int = 10, *, questions: Sequence[str] | None = None, sample: int = 200, seed: int = 0
) -> dict[str, Any]:
    """Recall@k of the coarse stage and of the full pipeline against exact search.

    Questions default to a seeded sample of ``sample`` questions stored with the answers, or
    the answer texts themselves when none are stored.

    Parameters
    ----------
    ranker : Ranker
    k : int
        Positive; bounded by the index size.
    questions : list of str, keyword-only, optional
        Questions to measure with (default: a sample of the stored ones).
    sample : int, keyword-only
        How many stored questions to sample (positive).
    seed : int, keyword-only
        Seed of the sample (non-negative).

    Returns
    -------
    dict
        ``{"k", "queries", "candidates", "coarse_recall", "recall", "source"}``.
    """
    k = check_k(k)
    sample = positive_int(sample, "sample")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed <= MAX_INT64:
        raise QueryError(f"seed must be a non-negative integer, got {seed!r}")
    source = "given"
    if questions is None:
        stored = [q for rec in ranker.records() for q in rec.questions]
        source = "stored questions"
        if not stored:
            stored = [rec.answer for rec in ranker.records()]
            source = "answer texts"
        rng = np.random.default_rng(seed)
        pick = rng.choice(len(stored), size=min(sample, len(stored)), replace=False)
        questions = [stored[i] for i in sorted(pick)]
    qs = check_questions(questions)
    if not qs:
        raise QueryError("no questions to measure recall with; give at least one question")
    kk = min(k, len(ranker))
    budget.check_result(
        len(qs) * (kk * budget.RECALL_PAIR_BYTES + min(len(ranker), kk * ranker.overfetch) * 8),
        budget.request_budget(ranker.memory_budget),
        f"recall@{kk:,} over {len(qs):,} questions",
        "use a smaller k or sample",
    )
    qv = ranker.model.encode(qs, role="question")
    _, truth = exact_search(qv, ranker._vectors, kk, geometry=ranker.model.space)
    m = min(len(ranker), kk * ranker.overfetch)
    coarse_rows = candidate_rows(ranker, qv, m)
    _, _, final_rows = search_vectors(ranker, qv, kk)

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
