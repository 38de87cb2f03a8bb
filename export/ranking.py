"""Answer-selection metrics (MAP, MRR, P@1) as expected values under random tie-breaking.

Candidate order in the benchmark files leaks labels (TrecQA lists every correct candidate
first), so ties between candidate scores must never be broken by file order. These functions
compute the *exact expectation* over uniformly random orderings of tied candidates, so a
model that gives every candidate the same score scores at chance level.

:func:`evaluate_scores` uses ``qaindex.metrics.evaluate_scores`` (the project's shared
implementation of the same closed forms) when it is importable, and this module's otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["evaluate_scores", "expected_ranking_metrics", "group_metrics"]


def _tie_groups(scores: np.ndarray, labels: np.ndarray) -> list[tuple[int, int]]:
    """(size, relevant) of each group of equal scores, best group first."""
    order = np.argsort(-scores, kind="stable")
    s = scores[order]
    lab = labels[order]
    bounds = np.flatnonzero(np.diff(s) != 0) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(s)]])
    return [(int(e - b), int(lab[b:e].sum())) for b, e in zip(starts, ends, strict=True)]


def group_metrics(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> dict[str, float] | None:
    """Expected AP, RR and P@1 of one question's candidates under random tie-breaking.

    Parameters
    ----------
    scores : sequence of float
        Higher is better. NaN scores are treated as the worst score.
    labels : sequence of {0, 1}

    Returns
    -------
    dict or None
        ``{"ap", "rr", "p@1"}``, or None when no candidate is correct.

    Example
    -------
    >>> group_metrics([1.0, 1.0], [0, 1])        # a coin flip for the top spot
    {'ap': 0.75, 'rr': 0.75, 'p@1': 0.5}
    >>> group_metrics([0.1, 0.9, 0.5], [1, 0, 0])
    {'ap': 0.3333333333333333, 'rr': 0.3333333333333333, 'p@1': 0.0}
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.int64)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError(f"scores and labels must be 1-d and of equal length, got {s.shape} and {y.shape}")
    total_rel = int(y.sum())
    if total_rel == 0:
        return None
    s = np.where(np.isnan(s), -np.inf, s)
    ap = 0.0
    rr = 0.0
    p1 = 0.0
    before = 0  # candidates ranked before the current tie group
    rel_before = 0
    first = True
    for size, rel in _tie_groups(s, y):
        if rel:
            j = np.arange(1, size + 1, dtype=np.float64)
            # a correct item at position j of the group has, in expectation,
            # (j - 1)(rel - 1)/(size - 1) other correct items before it in the group
            others = (j - 1) * (rel - 1) / (size - 1) if size > 1 else np.zeros(1)
            ap += rel * float(np.mean((rel_before + 1 + others) / (before + j)))
            if rel_before == 0:
                # position k of the first correct item: P(k) = C(size-k, rel-1) / C(size, rel)
                p = 1.0
                expect = 0.0
                for k in range(1, size - rel + 2):
                    # P(first = k) = prod_{i<k} (size-rel-i+1)/(size-i+1) * rel/(size-k+1)
                    pk = p * rel / (size - k + 1)
                    expect += pk / (before + k)
                    p *= (size - rel - k + 1) / (size - k + 1)
                rr = expect
            if first:
                p1 = rel / size
        first = False
        before += size
        rel_before += rel
        if rel_before == total_rel and rr:
            break
    return {"ap": ap / total_rel, "rr": rr, "p@1": p1}


def expected_ranking_metrics(
    scores: Sequence[Sequence[float] | np.ndarray], labels: Sequence[Sequence[int] | np.ndarray]
) -> dict[str, Any]:
    """MAP, MRR and P@1 over questions with at least one correct candidate.

    Parameters
    ----------
    scores : sequence of 1-d arrays
        One array of candidate scores per question, higher is better.
    labels : sequence of 1-d arrays
        The matching 0/1 labels.

    Returns
    -------
    dict
        ``{"map", "mrr", "p@1", "questions", "skipped"}`` (``skipped``: questions without a
        correct candidate, left out as in the papers).

    Example
    -------
    >>> round(expected_ranking_metrics([[0.9, 0.1], [0.0, 0.0, 0.0]], [[1, 0], [0, 1, 0]])["map"], 4)
    0.8056
    """
    aps: list[float] = []
    rrs: list[float] = []
    p1s: list[float] = []
    skipped = 0
    for s, y in zip(scores, labels, strict=True):
        m = group_metrics(s, y)
        if m is None:
            skipped += 1
            continue
        aps.append(m["ap"])
        rrs.append(m["rr"])
        p1s.append(m["p@1"])
    n = len(aps)
    return {
        "map": float(np.mean(aps)) if n else float("nan"),
        "mrr": float(np.mean(rrs)) if n else float("nan"),
        "p@1": float(np.mean(p1s)) if n else float("nan"),
        "questions": n,
        "skipped": skipped,
    }


def evaluate_scores(groups: Sequence[Any], scores: Sequence[np.ndarray]) -> dict[str, Any]:
    """Metrics of per-question candidate scores; ``qaindex.metrics`` when available.

    Parameters
    ----------
    groups : sequence of qaindex.datasets.QuestionGroup
    scores : sequence of 1-d arrays
        ``scores[i][j]`` is the score of ``groups[i].candidates[j]``, higher is better.

    Returns
    -------
    dict
        At least ``{"map", "mrr", "p@1", "questions"}`` and ``"implementation"``.

    Example
    -------
    >>> from qaindex.datasets import Candidate, QuestionGroup
    >>> g = QuestionGroup("q", "?", (Candidate("a", "x", 1), Candidate("b", "y", 0)))
    >>> evaluate_scores([g], [np.array([0.0, 0.0])])["map"]
    0.75
    """
    labels = [np.array([c.label for c in g.candidates], dtype=np.int64) for g in groups]
    arrays = [np.asarray(x, dtype=np.float64) for x in scores]
    try:  # the project's shared implementation (same closed forms)
        from qaindex.metrics import evaluate_scores as shared
    except ImportError:
        ours = expected_ranking_metrics(arrays, labels)
        ours["implementation"] = "qaindex_export.ranking"
        return ours
    result = dict(shared(list(zip(arrays, labels, strict=True))))
    result["implementation"] = "qaindex.metrics"
    return result
