"""The ``score`` of hybrid hits: a probability of relevance that falls with the fused order.

A fused search (:mod:`qaindex.search.fusion`) orders its hits by their fused value; the score
it reports is, where the model's manifest has one, a calibration of that fused value
(:func:`fused_probability`, ``"fused_score"`` in the manifest's ``"fusion"``), fitted by
logistic regression on the top hits of held-out labelled questions
(``tools/fit_default_fusion.py``). Without one, :func:`hybrid_scores` keeps each hit's per-hit probability capped by
those above it, so the order and the score never disagree.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import QueryError

__all__ = ["fused_probability", "hybrid_probability", "hybrid_scores"]


def hybrid_probability(fusion: Any, dense_probability: Any, bm25: Any, fused: Any, match: Any = 0.0) -> np.ndarray:
    """The calibrated ``score`` of hybrid hits, from what a fused search knows of each hit::

        p = sigmoid(bias + w_d * logit(p_dense) + w_l * bm25 + w_f * fused + w_m * match)

    ``p_dense`` is the model's calibrated probability, ``bm25`` the hit's BM25 score over the
    best among the candidates, ``fused`` its fused value, ``match`` the best candidate's
    BM25 score over the question's bound
    (:meth:`~qaindex.text.lexical.LexicalIndex.score_bound`: how much of the question's term
    evidence the corpus matches at all; one value per question, so it changes no order within
    a search, and low for questions the corpus does not answer). ``w_m`` is 0 for a 4-weight
    ``fusion.score``. Without ``fusion.score`` the model's probability is returned unchanged.

    Example
    -------
    >>> from qaindex.search.fusion import Fusion
    >>> rule = Fusion("adaptive", score=(0.0, 1.0, 0.0, 0.0))
    >>> hybrid_probability(rule, np.array([0.25]), np.array([1.0]), np.array([0.5])).round(6).tolist()
    [0.25]
    """
    p = np.asarray(dense_probability, dtype=np.float64)
    if fusion.score is None:
        return p
    bias, w_dense, w_bm25, w_fused = fusion.score[:4]
    w_match = fusion.score[4] if len(fusion.score) > 4 else 0.0
    clipped = np.clip(p, 1e-6, 1.0 - 1e-6)
    z = bias + w_dense * np.log(clipped / (1.0 - clipped)) + w_bm25 * np.asarray(bm25) + w_fused * np.asarray(fused)
    z = z + w_match * np.asarray(match, dtype=np.float64)
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


def fused_probability(
    fusion: Any, fused: Any, top: Any, match: Any = 0.0, coverage: float = 0.0, terms: int = 0
) -> np.ndarray:
    """The calibrated ``score`` of one search's hybrid hits from their fused value (``fusion.fused_score``)::

        p = sigmoid(bias + w_f * fused + w_t * logit(p_top) + w_m * match + w_1 * first
                    + w_c * coverage + w_n * ln(1 + n(q)))

    ``fused`` holds the hits' fused values (:func:`~qaindex.search.fusion.fuse`) in fused order,
    ``p_top`` is the model's calibrated probability of the question's best model score among
    the candidates, ``match`` the question's BM25 match (:func:`hybrid_probability`),
    ``coverage`` its lexical coverage (the IDF share of its terms that BM25's best candidate
    holds, :meth:`~qaindex.text.lexical.LexicalIndex.coverage`) and ``n(q)`` its number of BM25
    terms (``terms``); all four are one value per question, so they change no order within a
    search. ``first`` is 1 for the search's first hit and 0 for the others: a first hit is
    right more often than its fused value alone says (its rivals are ranked below it), and a
    calibration fitted on the top hits of many searches underestimates it without this term.
    ``w_f`` and ``w_1`` are >= 0, so the score falls with the fused order.

    The coverage and length terms are what carries a threshold from corpus to corpus: the
    match (a BM25 score over its bound) grows with the answers' length and repeated words, so
    one common word of a short question matched in long documents looks like a strong match,
    while the coverage does not count repeats; and a model's best score falls with the length
    of the question (a forum post reads as weaker evidence than a short question), which the
    length term corrects. A calibration of four or five weights has neither (nor ``w_1``, for
    four).

    Example
    -------
    >>> from qaindex.search.fusion import Fusion
    >>> rule = Fusion("adaptive", fused_score=(0.0, 2.0, 0.0, 0.0))
    >>> fused_probability(rule, np.array([1.0, 0.0]), 0.5).round(4).tolist()
    [0.8808, 0.5]
    >>> lifted = Fusion("adaptive", fused_score=(0.0, 2.0, 0.0, 0.0, 1.0))  # the first hit + 1 in logit
    >>> fused_probability(lifted, np.array([1.0, 0.0]), 0.5).round(4).tolist()
    [0.9526, 0.5]
    >>> covered = Fusion("adaptive", fused_score=(0.0, 2.0, 0.0, 0.0, 0.0, 1.0, 0.0))  # coverage + 1 in logit
    >>> fused_probability(covered, np.array([1.0, 0.0]), 0.5, coverage=1.0).round(4).tolist()
    [0.9526, 0.7311]
    """
    if fusion.fused_score is None:
        raise QueryError("this fusion has no fused score calibration (fused_score)")
    bias, w_fused, w_top, w_match, *optional = fusion.fused_score
    w_first, w_coverage, w_terms = (*optional, 0.0, 0.0, 0.0)[:3]
    top_p = float(np.clip(np.asarray(top, dtype=np.float64), 1e-6, 1.0 - 1e-6))
    values = np.asarray(fused, dtype=np.float64)
    question = w_top * math.log(top_p / (1.0 - top_p)) + w_match * float(match)
    question += w_coverage * float(coverage) + w_terms * math.log1p(max(0, int(terms)))
    z = bias + w_fused * values + question
    if values.ndim == 1 and values.size:
        z[0] += w_first
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


def hybrid_scores(
    fusion: Any,
    dense_probability: Any,
    top: Any,
    bm25: Any,
    fused: Any,
    match: float = 0.0,
    coverage: float = 0.0,
    terms: int = 0,
) -> np.ndarray:
    """The ``score`` of one question's hybrid hits, given in fused order: non-increasing.

    With ``fusion.fused_score``, :func:`fused_probability` of the fused values (``match``,
    ``coverage`` and ``terms``: the question's, as that function reads them). Without one
    (a fusion stored without it, or none), each hit's :func:`hybrid_probability` (the model's
    calibrated probability ``dense_probability`` where ``fusion.score`` is None) capped by
    those of the hits above it (a running minimum), so that a hit never scores above one
    ranked before it and ``min_score`` keeps a prefix of the ranking.

    Example
    -------
    >>> from qaindex.search.fusion import Fusion
    >>> hybrid_scores(Fusion("rrf"), np.array([0.25, 0.5, 0.125]), 0.5, 0, np.zeros(3)).tolist()
    [0.25, 0.25, 0.125]
    """
    if fusion.fused_score is not None:
        p = fused_probability(fusion, fused, top, match, coverage, terms)
    else:
        p = hybrid_probability(fusion, dense_probability, bm25, fused, match)
    p = np.asarray(p, dtype=np.float64)
    return np.minimum.accumulate(p) if p.size else p
