"""Ranking metrics for answer selection, exact under ties.

Every metric here ranks one question's candidates by score (higher is better) and returns
the **expected value under uniformly random tie-breaking**: candidates with equal scores
are never ordered by their position in the input. This matters for the benchmarks: in
TrecQA every correct candidate is listed first, so a tie-breaking rule that keeps input
order gives a model that scores everything equally a MAP of 1.0. Here such a model scores
exactly at chance, the mean over questions of the metric's expectation under a random
permutation of the candidates.

Closed forms, per tie group (candidates with one score, in decreasing score order). Let a
group hold ``n`` candidates of which ``r`` are correct, with ``A`` candidates and ``B``
correct candidates in strictly better groups, and ``R`` correct candidates in all.

- Precision at 1: the best group is ranked first; ``r / n`` of that group.
- Reciprocal rank: in the first group with ``r > 0``, the first correct candidate is at
  position ``p`` of the group with probability ``C(n - p, r - 1) / C(n, r)``, so
  ``E[RR] = sum_p C(n - p, r - 1) / C(n, r) / (A + p)``.
- Average precision, by linearity: ``E[AP] = (1/R) sum_i E[precision at rank of i]`` over
  correct ``i``. A correct candidate of a group lands at position ``p`` (uniform on
  ``1..n``); given ``p`` the other ``r - 1`` correct candidates of its group occupy each of
  the ``p - 1`` places ahead of it with probability ``(r - 1)/(n - 1)``, and its rank
  ``A + p`` is fixed, so
  ``E[AP] = (1/R) sum_groups (r/n) sum_{p=1..n} (B + 1 + (p - 1)(r - 1)/(n - 1)) / (A + p)``
  (the formula of McSherry & Najork, ECIR 2008).
- Recall at ``k`` (R@k): groups wholly inside the top ``k`` count all their ``r`` correct
  candidates, the group straddling place ``k`` counts ``r × (places left) / n``; the sum is
  divided by ``R``.

Scores are compared exactly (no tolerance), as ``trec_eval`` does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import positive_int

RECALL_AT = (1, 2, 5)
"""The cut-offs of :func:`evaluate_scores`'s ``r@k`` (the Ubuntu Dialogue Corpus's 1-in-10 R@1, R@2, R@5)."""

__all__ = [
    "average_precision",
    "evaluate_groups",
    "evaluate_scores",
    "precision_at_1",
    "recall_at",
    "reciprocal_rank",
    "tie_groups",
]


def _check(scores: Any, labels: Any) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels)
    if s.ndim != 1 or y.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"scores and labels must be 1-D arrays of the same length, got shapes {s.shape} and {y.shape}")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN; every candidate needs a comparable score")
    if y.dtype != np.bool_:
        yf = y.astype(np.float64)
        if np.isnan(yf).any():
            raise ValueError("labels contain NaN; use 1 for a correct candidate and 0 otherwise")
        return s, yf > 0
    return s, y


def tie_groups(scores: Any, labels: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Sizes and correct counts of the tie groups, best score first.

    Parameters
    ----------
    scores : array-like (m,)
        Higher is better; equal values (exactly) form one tie group.
    labels : array-like (m,)
        1 (or any positive value, or True) marks a correct candidate.

    Returns
    -------
    sizes, correct : numpy.ndarray of int64
        ``sizes[g]`` candidates share the g-th best score, ``correct[g]`` of them correct.

    Example
    -------
    >>> tie_groups([0.5, 0.9, 0.5, 0.1], [1, 0, 1, 0])
    (array([1, 2, 1]), array([0, 2, 0]))
    """
    s, y = _check(scores, labels)
    if s.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy()
    # -0.0 == 0.0, so both land in one group; -s sorts best first
    _, inverse, sizes = np.unique(-s, return_inverse=True, return_counts=True)
    correct = np.bincount(inverse.ravel(), weights=y.astype(np.float64), minlength=len(sizes))
    return sizes.astype(np.int64), np.rint(correct).astype(np.int64)


def average_precision(scores: Any, labels: Any) -> float:
    """Expected average precision under random tie-breaking.

    Parameters
    ----------
    scores : array-like (m,)
        One question's candidate scores, higher is better.
    labels : array-like (m,)
        1 for a correct candidate, 0 otherwise.

    Returns
    -------
    float
        In [0, 1]; 0.0 when no candidate is correct (such questions are skipped by
        :func:`evaluate_scores`).

    Example
    -------
    >>> average_precision([0.9, 0.5, 0.1], [0, 1, 1])
    0.5833333333333333
    >>> average_precision([1.0, 1.0], [1, 0])   # a tie: half the time first, half second
    0.75
    """
    return _average_precision(*tie_groups(scores, labels))


def _average_precision(sizes: npt.NDArray[np.int64], correct: npt.NDArray[np.int64]) -> float:
    total = int(correct.sum())
    if total == 0:
        return 0.0
    value = 0.0
    before = 0  # A: candidates in better groups
    correct_before = 0  # B: correct candidates in better groups
    for n_, r_ in zip(sizes.tolist(), correct.tolist(), strict=True):
        if r_:
            p = np.arange(1, n_ + 1, dtype=np.float64)
            ahead = (p - 1.0) * ((r_ - 1) / (n_ - 1)) if n_ > 1 else np.zeros(1)
            value += r_ / n_ * float(np.sum((correct_before + 1.0 + ahead) / (before + p)))
        before += n_
        correct_before += r_
    return min(1.0, value / total)


def reciprocal_rank(scores: Any, labels: Any) -> float:
    """Expected reciprocal rank of the first correct candidate under random tie-breaking.

    Parameters
    ----------
    scores : array-like (m,)
        One question's candidate scores, higher is better.
    labels : array-like (m,)
        1 for a correct candidate, 0 otherwise.

    Returns
    -------
    float
        In [0, 1]; 0.0 when no candidate is correct.

    Example
    -------
    >>> reciprocal_rank([0.9, 0.5, 0.1], [0, 1, 1])
    0.5
    >>> round(reciprocal_rank([0.0, 0.0, 0.0], [0, 0, 1]), 6)   # (1 + 1/2 + 1/3) / 3
    0.611111
    """
    return _reciprocal_rank(*tie_groups(scores, labels))


def _reciprocal_rank(sizes: npt.NDArray[np.int64], correct: npt.NDArray[np.int64]) -> float:
    before = 0
    for n_, r_ in zip(sizes.tolist(), correct.tolist(), strict=True):
        if r_:
            # P(first correct at position p) = C(n-p, r-1) / C(n, r), p = 1..n-r+1, by the
            # recurrence P(p+1) / P(p) = (n - p - r + 1) / (n - p)
            k = np.arange(1, n_ - r_ + 1, dtype=np.float64)
            ratios = (n_ - k - r_ + 1) / (n_ - k)
            prob = (r_ / n_) * np.concatenate([[1.0], np.cumprod(ratios)])
            ranks = before + np.arange(1, n_ - r_ + 2, dtype=np.float64)
            return min(1.0, float(np.sum(prob / ranks)))
        before += n_
    return 0.0


def precision_at_1(scores: Any, labels: Any) -> float:
    """Probability that the top-ranked candidate is correct, under random tie-breaking.

    Parameters
    ----------
    scores : array-like (m,)
        One question's candidate scores, higher is better.
    labels : array-like (m,)
        1 for a correct candidate, 0 otherwise.

    Returns
    -------
    float
        The fraction of correct candidates among those sharing the best score (0.0 when
        there are no candidates).

    Example
    -------
    >>> precision_at_1([0.9, 0.9, 0.1, 0.9], [1, 0, 1, 0])
    0.3333333333333333
    """
    return _precision_at_1(*tie_groups(scores, labels))


def _precision_at_1(sizes: npt.NDArray[np.int64], correct: npt.NDArray[np.int64]) -> float:
    if sizes.size == 0:
        return 0.0
    return int(correct[0]) / int(sizes[0])


def recall_at(scores: Any, labels: Any, k: int) -> float:
    """Expected share of a question's correct candidates ranked in the top ``k``, under random
    tie-breaking: ``E[|correct ∩ top k|] / |correct|``.

    With one correct candidate among ``n`` this is the "1-in-n R@k" of response-selection
    benchmarks (the Ubuntu Dialogue Corpus reports R@1, R@2 and R@5 of 1 in 10). A tie group
    straddling position ``k`` contributes its correct share of the places left.

    Parameters
    ----------
    scores : array-like (m,)
        One question's candidate scores, higher is better.
    labels : array-like (m,)
        1 for a correct candidate, 0 otherwise.
    k : int
        Cut-off (at least 1).

    Returns
    -------
    float
        In [0, 1]; 0.0 when no candidate is correct.

    Example
    -------
    >>> recall_at([0.9, 0.5, 0.5, 0.1], [0, 1, 0, 1], 2)   # one of two correct; the tie splits place 2
    0.25
    """
    return _recall_at(*tie_groups(scores, labels), positive_int(k, "k"))


def _recall_at(sizes: npt.NDArray[np.int64], correct: npt.NDArray[np.int64], k: int) -> float:
    total = int(correct.sum())
    if total == 0:
        return 0.0
    found, before = 0.0, 0
    for n_, r_ in zip(sizes.tolist(), correct.tolist(), strict=True):
        if before >= k:
            break
        found += r_ * min(n_, k - before) / n_
        before += n_
    return found / total


def evaluate_scores(groups_scores: Sequence[tuple[Any, Any]]) -> dict[str, Any]:
    """MAP, MRR, P@1 and R@1, R@2, R@5 over questions with at least one correct candidate.

    Parameters
    ----------
    groups_scores : sequence of (scores, labels)
        One pair of 1-D arrays per question: its candidates' scores (higher is better)
        and labels (1 correct, 0 not). Questions with no correct candidate are skipped.

    Returns
    -------
    dict
        ``map``, ``mrr``, ``p@1``, ``r@1``, ``r@2``, ``r@5`` (means of the per-question
        expected values under random tie-breaking, :func:`recall_at` for ``r@k``; NaN when no
        question counts), ``questions`` (questions evaluated) and ``skipped`` (questions
        without a correct candidate).

    Example
    -------
    >>> r = evaluate_scores([([0.9, 0.1], [1, 0]), ([0.5, 0.5], [1, 0]), ([0.3], [0])])
    >>> r["map"], r["mrr"], r["p@1"], r["questions"], r["skipped"]
    (0.875, 0.875, 0.75, 2, 1)
    """
    aps: list[float] = []
    rrs: list[float] = []
    p1s: list[float] = []
    recalls: dict[int, list[float]] = {k: [] for k in RECALL_AT}
    skipped = 0
    for scores, labels in groups_scores:
        sizes, correct = tie_groups(scores, labels)
        if not correct.any():
            skipped += 1
            continue
        aps.append(_average_precision(sizes, correct))
        rrs.append(_reciprocal_rank(sizes, correct))
        p1s.append(_precision_at_1(sizes, correct))
        for k, values in recalls.items():
            values.append(_recall_at(sizes, correct, k))
    count = len(aps)
    return {
        "map": math.fsum(aps) / count if count else math.nan,
        "mrr": math.fsum(rrs) / count if count else math.nan,
        "p@1": math.fsum(p1s) / count if count else math.nan,
        **{f"r@{k}": math.fsum(v) / count if count else math.nan for k, v in recalls.items()},
        "questions": count,
        "skipped": skipped,
    }


def evaluate_groups(groups: Sequence[Any], scores: Sequence[Any]) -> dict[str, Any]:
    """:func:`evaluate_scores` for labelled question groups and one score array per group.

    Parameters
    ----------
    groups : sequence of qaindex.eval.datasets.QuestionGroup
        Each group's ``candidates`` carry the labels.
    scores : sequence of 1-D arrays
        ``scores[i][j]`` is the score of ``groups[i].candidates[j]``, higher is better.

    Returns
    -------
    dict
        As :func:`evaluate_scores`.

    Example
    -------
    >>> from qaindex.eval.datasets import Candidate, QuestionGroup
    >>> g = QuestionGroup("q", "?", (Candidate("a", "x", 1), Candidate("b", "y", 0)))
    >>> evaluate_groups([g], [np.array([0.0, 0.0])])["map"]
    0.75
    """
    if len(groups) != len(scores):
        raise ValueError(f"{len(groups)} question groups but {len(scores)} score arrays")
    return evaluate_scores(
        [(s, np.array([c.label for c in g.candidates], dtype=np.int64)) for g, s in zip(groups, scores, strict=True)]
    )
