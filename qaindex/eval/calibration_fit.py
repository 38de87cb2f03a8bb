"""Fitting a model's score calibration (:class:`qaindex.search.calibration.Calibration`, what
every search applies) and measuring it; calibrating a model directory.

The fitting data are the ``(raw score, relevant?)`` pairs of the top ``depth`` hits of each
held-out question searched against all the answers of its data (the hits a user sees), so
``score`` estimates the share of hits scored like this one that are relevant
(:func:`calibration_pairs`); the top hits of off-topic questions (:mod:`.offtopic`) join them
as pairs that are not relevant. :func:`fit` fits ``platt`` (logistic regression on the raw
score and ``raw - best``, with Platt's smoothed targets) or ``isotonic`` (pool adjacent
violators) to them; :func:`calibrate_model` stores the fit in the model's manifest and, where
hybrid search is available, the calibration of the fused value of hybrid hits
(:func:`hybrid_pairs`, :func:`fit_fused_score`, stored as the manifest's ``fusion.fused_score``).

Expected calibration error (:func:`expected_calibration_error`): hits are put into 10
equal-width bins of ``score``, and ECE is the mean, weighted by bin size, of ``|mean score -
share relevant|`` over the bins.

``qaindex calibrate MODEL_DIR DATA.jsonl`` calls :func:`calibrate_model`.

Example
-------
>>> cal = fit([0.0, 1.0, 2.0, 3.0] * 25, [0, 0, 1, 1] * 25, method="platt")
>>> p = cal(np.array([0.0, 3.0]))
>>> bool(p[0] < 0.2 and p[1] > 0.8), cal.calibrated
(True, True)
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import flag
from ..errors import ModelFormatError, QueryError
from ..model import Model
from ..ranker import Ranker
from ..search.calibration import CALIBRATION_METHODS, Calibration
from ..store.atomic_files import read_json_object, write_json_atomic
from ..store.field_ranges import FUSED_SCORE, FUSED_SCORE_WEIGHTS
from ..text.lexical import tokenizer_available

__all__ = [
    "DEFAULT_DEPTH",
    "FITTED_FEATURES",
    "FUSED_FEATURES",
    "OFFTOPIC_SHARE",
    "calibrate_model",
    "calibration_pairs",
    "expected_calibration_error",
    "fit",
    "fit_fused_score",
    "fused_features",
    "fused_scores",
    "hybrid_features",
    "hybrid_pairs",
    "labelled_pool",
    "measure",
    "offtopic_weight",
    "reliability_bins",
    "stacked_pairs",
    "summary",
]

ECE_BINS = 10
DEFAULT_DEPTH = 10
# The share of the questions asked that the calibration assumes are off-topic: the off-topic
# questions' pairs are weighted so that they count as this share of the questions, whatever
# the number of labelled and off-topic questions at hand.
OFFTOPIC_SHARE = 0.25


def offtopic_weight(answerable: int, offtopic: int, share: float = OFFTOPIC_SHARE) -> float:
    """The fit weight of each off-topic question's pairs, so that the ``offtopic`` questions
    count as ``share`` of all the questions::

        w = share / (1 - share) * answerable / offtopic

    Example
    -------
    >>> offtopic_weight(300, 100)
    1.0
    """
    return share / (1.0 - share) * answerable / max(offtopic, 1)


def _check_pairs(raw: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    r = np.asarray(raw, dtype=np.float64).ravel()
    y = np.asarray(labels, dtype=np.float64).ravel()
    if r.shape != y.shape or not len(r):
        raise QueryError(f"calibration needs as many labels as scores, at least one; got {r.shape} and {y.shape}")
    if not np.isfinite(r).all():
        raise QueryError("calibration scores must be finite numbers")
    if not np.isin(y, (0.0, 1.0)).all():
        raise QueryError("calibration labels must be 0 or 1")
    return r, y


def fit(
    raw: Sequence[float] | np.ndarray,
    labels: Sequence[int] | np.ndarray,
    *,
    method: str = "platt",
    best: Sequence[float] | np.ndarray | None = None,
    weights: Sequence[float] | np.ndarray | None = None,
) -> Calibration:
    """Fit a calibration of raw scores to 0/1 relevance labels.

    Parameters
    ----------
    raw : array (n,)
        Raw model scores.
    labels : array (n,)
        1 relevant, 0 not; both must occur.
    method : {"platt", "isotonic"}
    best : array (n,), optional
        The best raw score of each pair's search (Platt's second feature ``raw - best``);
        None fits plain Platt scaling (``c`` = 0).
    weights : array (n,), optional
        Positive weight of each pair (default 1): how much it counts in the fit, e.g. off-topic
        questions weighted to a chosen share of the questions (:func:`offtopic_weight`).

    Returns
    -------
    Calibration

    Example
    -------
    >>> cal = fit([0, 1, 2, 3], [0, 0, 1, 1], method="isotonic")
    >>> cal(np.array([-5.0, 5.0])).tolist()
    [0.0, 1.0]
    """
    r, y = _check_pairs(raw, labels)
    if method not in CALIBRATION_METHODS:
        raise QueryError(f"calibration method must be one of {', '.join(CALIBRATION_METHODS)}; got {method!r}")
    positives = int(y.sum())
    if positives == 0 or positives == len(y):
        raise QueryError(f"calibration needs both relevant and irrelevant pairs; got {positives} relevant of {len(y)}")
    sw = _check_weights(weights, len(r))
    if method == "isotonic":
        return _fit_isotonic(r, y, sw)
    gap = None if best is None else np.minimum(r - np.asarray(best, dtype=np.float64).ravel(), 0.0)
    if gap is not None and (gap.shape != r.shape or not np.isfinite(gap).all()):
        raise QueryError("best must hold one finite score per pair")
    return _fit_platt(r, y, gap, sw)


def _check_weights(weights: Any, n: int) -> np.ndarray:
    """Per-pair fit weights: ones by default; else ``n`` finite positive numbers."""
    if weights is None:
        return np.ones(n)
    w = np.asarray(weights, dtype=np.float64).ravel()
    if w.shape != (n,) or not np.isfinite(w).all() or not (w > 0).all():
        raise QueryError(f"calibration weights must be {n} finite positive numbers, one per pair")
    return w


def _logistic(features: np.ndarray, t: np.ndarray, sample_weight: np.ndarray | None = None) -> np.ndarray:
    """Logistic regression weights (Newton's method) of targets ``t`` on standardised
    ``features``, each row counting ``sample_weight`` times (default once)."""
    sw = np.ones(len(t)) if sample_weight is None else sample_weight
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale[scale == 0] = 1.0
    x = np.concatenate([(features - mean) / scale, np.ones((len(t), 1))], axis=1)
    w = np.zeros(x.shape[1])
    for _ in range(100):
        with np.errstate(over="ignore"):  # separable data drives weights up: exp overflows to p = 0, as it should
            p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (sw * (p - t))
        hess = x.T @ (x * (sw * p * (1 - p))[:, None]) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    coef = w[:-1] / scale
    return np.append(coef, w[-1] - float(coef @ mean))


def _fit_platt(r: np.ndarray, y: np.ndarray, gap: np.ndarray | None, sw: np.ndarray) -> Calibration:
    """Logistic regression of y on r (and ``raw - best``), with Platt's smoothed targets
    (counts weighted by ``sw``)."""
    pos = float(sw[y > 0].sum())
    neg = float(sw[y == 0].sum())
    t = np.where(y > 0, (pos + 1) / (pos + 2), 1 / (neg + 2))
    a = c = -1.0
    b = 0.0
    if gap is not None and np.ptp(gap) > 0:
        a, c, b = _logistic(np.stack([r, gap], axis=1), t, sw)
    if a < 0 or c < 0:  # no second feature, or one against the ranking: plain Platt scaling
        (a, b), c = _logistic(r[:, None], t, sw), 0.0
    if not a > 0:  # a score that does not rank relevant answers higher cannot be calibrated upwards
        a, c, b = 1e-6, 0.0, float(math.log(pos / neg))
    return Calibration("platt", a=float(a), b=float(b), c=float(c))


# the columns of the fused score's features (hybrid_features), in the order of its weights after the bias
FUSED_FEATURES = FUSED_SCORE_WEIGHTS[1:]
# the features a new fit reads: all but the match, which the coverage replaces (a BM25 score over
# its bound grows with the answers' length and repeated words, so it does not carry across corpora)
FITTED_FEATURES = tuple(f for f in FUSED_FEATURES if f != "match")


def fit_fused_score(
    features: Any, labels: Any, weights: Any = None, reads: Sequence[str] = FITTED_FEATURES
) -> tuple[float, ...]:
    """The hybrid score calibration of the fused value (``fused_score``,
    :func:`qaindex.search.scoring.fused_probability`): logistic regression of 0/1 ``labels`` on
    ``features`` (n, 6), the columns :data:`FUSED_FEATURES`: each hit's fused value, the
    calibrated logit of its question's best model score, the question's BM25 match, whether the
    hit is its search's first (1 or 0), the question's lexical coverage and ``ln(1 + n(q))``,
    each row counting ``weights`` times (default once). The fit reads the columns named in
    ``reads`` (default :data:`FITTED_FEATURES`: all but the match), the others weigh 0. The
    weights of the fused value and of the first hit are kept >= 0, so the score falls with the
    fused order: a fit against the order refits without the first hit, then without the fused
    value too.

    Returns
    -------
    tuple
        ``(bias, w_fused, w_top, w_match, w_first, w_coverage, w_length)``.

    Example
    -------
    >>> x = np.array([[f, 0.0, 0.5, float(f == 0.9), 0.5, 1.0] for f in (0.1, 0.4, 0.6, 0.9)] * 25)
    >>> bias, w_fused, w_top, w_match, w_first, w_coverage, w_length = fit_fused_score(x, [0, 0, 1, 1] * 25)
    >>> w_fused > 0 and w_first >= 0, w_match
    (True, 0.0)
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64).ravel()
    width = len(FUSED_FEATURES)
    if x.ndim != 2 or x.shape != (len(y), width) or not np.isfinite(x).all():
        raise QueryError(f"fused score features must be finite numbers of shape (n, {width}), got {x.shape}")
    positives = int(y.sum())
    if not np.isin(y, (0.0, 1.0)).all() or positives in (0, len(y)):
        raise QueryError(f"the fused score fit needs 0/1 labels, both present; got {positives} relevant of {len(y)}")
    sw = _check_weights(weights, len(y))
    unknown = sorted(set(reads) - set(FUSED_FEATURES))
    if unknown or not reads:
        raise QueryError(f"the fused score fit reads some of {', '.join(FUSED_FEATURES)}; got {list(reads)}")
    fused, first = FUSED_FEATURES.index("fused"), FUSED_FEATURES.index("first")
    columns = [FUSED_FEATURES.index(f) for f in FUSED_FEATURES if f in reads]
    # the fused value and the first hit must not weigh < 0: drop the first hit, then the fused value
    for kept in (columns, [c for c in columns if c != first], [c for c in columns if c not in (fused, first)]):
        w = _logistic(x[:, kept], y, sw)
        out = dict(zip(kept, w[:-1], strict=True))
        if out.get(fused, 0.0) >= 0 and out.get(first, 0.0) >= 0:
            break
    return float(w[-1]), *(float(out.get(j, 0.0)) for j in range(width))


def fused_scores(fit: Sequence[float], features: Any) -> np.ndarray:
    """The hybrid score of hits with ``features`` (n, 6; :data:`FUSED_FEATURES` columns, as
    :func:`hybrid_features` gives them) under ``fit`` (:func:`fit_fused_score`'s ``(bias,
    *weights)``): ``sigmoid(bias + features @ weights)``, what the search computes from the
    same numbers (:func:`qaindex.search.scoring.fused_probability`).

    Example
    -------
    >>> fused_scores((-1.0, 2.0, 0, 0, 0, 0, 0), [[0.5, 0, 0, 0, 0, 0]]).tolist()
    [0.5]
    """
    z = float(fit[0]) + np.asarray(features, np.float64) @ np.asarray(fit[1:], np.float64)
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


def _fit_isotonic(r: np.ndarray, y: np.ndarray, sw: np.ndarray) -> Calibration:
    """Pool adjacent violators on the scores sorted ascending, pairs weighted by ``sw``; one
    point per block (at its weighted mean score)."""
    order = np.argsort(r, kind="stable")
    xs, ys, ws = r[order], y[order], sw[order]
    sums: list[float] = []
    counts: list[float] = []
    xsum: list[float] = []
    for xv, yv, wv in zip(xs.tolist(), ys.tolist(), ws.tolist(), strict=True):
        sums.append(yv * wv)
        counts.append(wv)
        xsum.append(xv * wv)
        while len(sums) > 1 and sums[-2] / counts[-2] >= sums[-1] / counts[-1]:
            s, c, xx = sums.pop(), counts.pop(), xsum.pop()
            sums[-1] += s
            counts[-1] += c
            xsum[-1] += xx
    px = [xx / c for xx, c in zip(xsum, counts, strict=True)]
    py = [s / c for s, c in zip(sums, counts, strict=True)]
    # strictly increasing x (blocks of equal mean score merge)
    out_x: list[float] = []
    out_y: list[float] = []
    for xv, yv in zip(px, py, strict=True):
        if out_x and xv <= out_x[-1]:
            out_y[-1] = max(out_y[-1], yv)
            continue
        out_x.append(xv)
        out_y.append(yv)
    return Calibration("isotonic", x=tuple(out_x), y=tuple(out_y))


def reliability_bins(prob: Any, labels: Any, bins: int = ECE_BINS) -> list[dict[str, float]]:
    """Per equal-width bin of ``prob``: count, mean probability, share relevant (empty bins left out)."""
    p, y = _check_pairs(prob, labels)
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    out = []
    for b in range(bins):
        mask = which == b
        if mask.any():
            out.append(
                {
                    "low": b / bins,
                    "count": int(mask.sum()),
                    "mean": float(p[mask].mean()),
                    "relevant": float(y[mask].mean()),
                }
            )
    return out


def expected_calibration_error(prob: Any, labels: Any, bins: int = ECE_BINS) -> float:
    """ECE: ``sum over bins of (count / n) * |mean probability - share relevant|``.

    Example
    -------
    >>> expected_calibration_error([0.9, 0.9, 0.1, 0.1], [1, 1, 0, 0])
    0.1
    """
    table = reliability_bins(prob, labels, bins)
    n = sum(b["count"] for b in table)
    return round(sum(b["count"] / n * abs(b["mean"] - b["relevant"]) for b in table), 12)


def calibration_pairs(
    ranker: Any,
    questions: Sequence[str],
    relevant: Sequence[set[int]],
    *,
    depth: int = DEFAULT_DEPTH,
    hybrid: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(raw scores, best raw score of their search, labels)`` of the top ``depth`` hits of
    each question in an index.

    Parameters
    ----------
    ranker : qaindex.Ranker
        An index of the answers (hits' ``row`` identifies them).
    questions : list of str
    relevant : list of set of int
        Per question, the rows of its relevant answers.
    depth : int
        Hits per question.
    hybrid : bool
        Search with hybrid fusion (the index must have a lexical index).
    """
    raw: list[float] = []
    best: list[float] = []
    labels: list[int] = []
    results = ranker.search_batch(list(questions), depth, rerank=False, hybrid=hybrid)
    for hits, good in zip(results, relevant, strict=True):
        top = max((h.raw_score for h in hits), default=0.0)
        for h in hits:
            raw.append(h.raw_score)
            best.append(top)
            labels.append(int(h.row in good))
    return np.asarray(raw, np.float64), np.asarray(best, np.float64), np.asarray(labels, np.int64)


def labelled_pool(groups: Sequence[Any]) -> tuple[list[dict[str, Any]], list[str], list[set[int]]]:
    """Records of every distinct answer of labelled question groups, the questions with at
    least one relevant answer, and the rows of their relevant answers.

    Example
    -------
    >>> from qaindex.eval.datasets import Candidate, QuestionGroup
    >>> g = QuestionGroup("q1", "who?", (Candidate("a", "Ann.", 1), Candidate("b", "Bob.", 0)))
    >>> records, questions, relevant = labelled_pool([g])
    >>> [r["answer"] for r in records], questions, relevant
    (['Ann.', 'Bob.'], ['who?'], [{0}])
    """
    where: dict[tuple[str, str], int] = {}
    records: list[dict[str, Any]] = []
    questions: list[str] = []
    relevant: list[set[int]] = []
    for group in groups:
        good = set()
        for cand in group.candidates:
            key = (cand.aid, cand.answer)
            if key not in where:
                where[key] = len(records)
                records.append({"id": f"a{len(records)}", "answer": cand.answer})
            if cand.label == 1:
                good.add(where[key])
        if good:
            questions.append(group.question)
            relevant.append(good)
    return records, questions, relevant


def summary(prob: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """ECE, pair counts and base rate of a set of calibrated pairs (for manifests and benchmarks)."""
    return {
        "ece": expected_calibration_error(prob, labels),
        "pairs": len(labels),
        "relevant": float(np.mean(labels)),
        "mean_score": float(np.mean(prob)),
    }


def measure(
    model: Any,
    groups: Sequence[Any],
    *,
    depth: int = DEFAULT_DEPTH,
    hybrid: bool = False,
    offtopic: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(raw scores, best raw score of their search, labels)`` of the top ``depth`` hits of
    labelled question groups: each question searched against every distinct answer of the
    groups (an in-memory flat index); then those of the ``offtopic`` questions, searched
    against the same answers, all labelled 0.

    Parameters
    ----------
    model : qaindex.Model
    groups : list of qaindex.eval.datasets.QuestionGroup
    depth : int
    hybrid : bool
        Fuse with BM25 (needs the ``hybrid`` extra).
    offtopic : list of str
        Questions the answers do not answer (:mod:`qaindex.eval.offtopic`).

    Example
    -------
    >>> from qaindex.eval.datasets import Candidate, QuestionGroup
    >>> g = QuestionGroup("q", "how do I reset my password?",
    ...                   (Candidate("a", "Click Forgot password on the sign-in page.", 1),
    ...                    Candidate("b", "Plus costs 5 dollars a month.", 0)))
    >>> raw, best, y = measure(Model.load(), [g], depth=2, offtopic=["tell me a joke"])
    >>> y.tolist()
    [1, 0, 0, 0]
    """
    raw, best, y, _ = _measure_weighted(model, groups, depth=depth, hybrid=hybrid, offtopic=offtopic)
    return raw, best, y


def _measure_weighted(
    model: Any, groups: Sequence[Any], *, depth: int, hybrid: bool = False, offtopic: Sequence[str] = ()
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`measure` with each pair's fit weight: 1, and :func:`offtopic_weight` for the
    off-topic questions' pairs."""
    records, questions, relevant = labelled_pool(groups)
    if not questions:
        raise QueryError("the calibration data has no question with a relevant answer")
    ranker = Ranker.build(records, model=model, index_kind="flat", hybrid=hybrid)
    raw, best, y = calibration_pairs(ranker, questions, relevant, depth=depth, hybrid=hybrid)
    if not offtopic:
        return raw, best, y, np.ones(len(y))
    o_raw, o_best, o_y = calibration_pairs(ranker, list(offtopic), [set()] * len(offtopic), depth=depth, hybrid=hybrid)
    weights = np.concatenate([np.ones(len(y)), np.full(len(o_y), offtopic_weight(len(questions), len(offtopic)))])
    return np.concatenate([raw, o_raw]), np.concatenate([best, o_best]), np.concatenate([y, o_y]), weights


def hybrid_features(
    ranker: Any,
    questions: Sequence[str],
    relevant: Sequence[set[int]],
    calibration: Calibration,
    *,
    depth: int = DEFAULT_DEPTH,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per question, the features and labels of its top ``depth`` hybrid hits in ``ranker``
    (best first; empty arrays when it has no hit): what
    :func:`qaindex.search.scoring.fused_probability` reads and :func:`fit_fused_score` fits.

    The features of a hit (:data:`FUSED_FEATURES`) are its fused value, the logit of
    ``calibration``'s probability of its question's best model score (over the answers and
    stored questions), the question's BM25 match (the best BM25 score of its candidates over
    the question's bound), whether it is the search's first hit (1, else 0), the question's
    lexical coverage (that of its best BM25 candidate) and ``ln(1 + n(q))``, ``n(q)`` its
    number of BM25 terms: the question's values as the search computed them
    (``Explanation.question_top``, ``question_match``, ``question_coverage``), over the
    candidates it scored, so that a fit reads what the served score reads at every index
    size (beyond :data:`~qaindex.search.fusion.LEXICAL_SCAN_LIMIT` answers BM25 does not
    scan every answer).

    Returns
    -------
    list of (numpy.ndarray (n, 6), numpy.ndarray (n,))
        One ``(features, labels)`` per question; a label is 1 when the hit's row is in the
        question's ``relevant`` set.
    """
    lexical = ranker.state().lexical
    if lexical is None:
        raise QueryError("hybrid features need an index with a BM25 index (build it with hybrid=True)")
    hits = ranker.search_batch(list(questions), depth, rerank=False, hybrid=True, explain=True)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for question, found, rows in zip(questions, hits, relevant, strict=True):
        if not found:
            out.append((np.zeros((0, len(FUSED_FEATURES))), np.zeros(0, np.int64)))
            continue
        _, length = lexical.query(question)
        fused = [h.explanation.fused if h.explanation is not None else None for h in found]
        why = found[0].explanation
        assert why is not None and all(f is not None for f in fused)
        top, coverage, match = why.question_top, why.question_coverage, why.question_match
        assert top is not None and coverage is not None and match is not None
        feats = fused_features(fused, float(calibration(top)), match, coverage, length)
        out.append((feats, np.asarray([int(h.row in rows) for h in found], np.int64)))
    return out


def fused_features(fused: Any, top: float, match: float, coverage: float, terms: int) -> np.ndarray:
    """The :data:`FUSED_FEATURES` of one search's hybrid hits (``fused``: their fused values in
    fused order): each hit's fused value, the logit of ``top`` (the calibrated probability of the
    question's best model score, clipped to [1e-6, 1 - 1e-6]), the question's BM25 ``match``,
    whether the hit is the first, the question's ``coverage`` and ``ln(1 + terms)``.

    Example
    -------
    >>> fused_features([0.9, 0.4], 0.5, 0.25, 0.75, 3).round(3).tolist()
    [[0.9, 0.0, 0.25, 1.0, 0.75, 1.386], [0.4, 0.0, 0.25, 0.0, 0.75, 1.386]]
    """
    values = np.asarray(fused, dtype=np.float64).ravel()
    p = float(np.clip(top, 1e-6, 1 - 1e-6))
    by_name = {
        "fused": values,
        "top": math.log(p / (1 - p)),
        "match": match,
        "first": np.arange(len(values)) == 0,
        "coverage": coverage,
        "length": math.log1p(terms),
    }
    return np.column_stack([np.broadcast_to(np.asarray(by_name[f], np.float64), values.shape) for f in FUSED_FEATURES])


def hybrid_pairs(
    model: Any,
    groups: Sequence[Any],
    calibration: Calibration,
    *,
    depth: int = DEFAULT_DEPTH,
    offtopic: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and fit weights of the top ``depth`` hybrid hits of labelled question
    groups (each question searched against every distinct answer of the groups, as
    :func:`measure`), then of the ``offtopic`` questions (all 0, weighted by
    :func:`offtopic_weight`), for :func:`fit_fused_score` (:func:`hybrid_features`).

    Returns
    -------
    features : numpy.ndarray (n, 6)
    labels : numpy.ndarray (n,)
    weights : numpy.ndarray (n,)
    """
    records, questions, relevant = labelled_pool(groups)
    ranker = Ranker.build(records, model=model, index_kind="flat", hybrid=True)
    per_question = hybrid_features(
        ranker, [*questions, *offtopic], [*relevant, *([set()] * len(offtopic))], calibration, depth=depth
    )
    return stacked_pairs(per_question[: len(questions)], per_question[len(questions) :])


def stacked_pairs(
    answerable: Sequence[tuple[np.ndarray, np.ndarray]], offtopic: Sequence[tuple[np.ndarray, np.ndarray]] = ()
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`fit_fused_score`'s features, labels and weights from :func:`hybrid_features`'
    per-question ``(features, labels)``: the answerable questions' pairs weigh 1, the off-topic
    questions' :func:`offtopic_weight` (so that they count as :data:`OFFTOPIC_SHARE` of the questions).

    Example
    -------
    >>> one = (np.ones((2, len(FUSED_FEATURES))), np.array([1, 0]))
    >>> x, y, w = stacked_pairs([one, one, one], [(np.ones((1, len(FUSED_FEATURES))), np.array([0]))])
    >>> x.shape, y.tolist(), w.tolist()
    ((7, 6), [1, 0, 1, 0, 1, 0, 0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    """
    w_off = offtopic_weight(len(answerable), len(offtopic))
    every = [*answerable, *offtopic]
    weights = [np.full(len(y), 1.0 if i < len(answerable) else w_off) for i, (_, y) in enumerate(every)]
    return (
        np.concatenate([x for x, _ in every]).reshape(-1, len(FUSED_FEATURES)),
        np.concatenate([y for _, y in every]),
        np.concatenate(weights) if weights else np.zeros(0),
    )


def _fused_score_fit(
    model: Any, groups: Sequence[Any], calibration: Calibration, *, depth: int, offtopic: Sequence[str]
) -> dict[str, Any] | None:
    """The hybrid score calibration of the fused value (:func:`hybrid_pairs`,
    :func:`fit_fused_score`) with its pairs and in-sample ECE; None when the top
    hybrid hits are all relevant or all not (nothing to fit), or when the fit diverged (a weight
    outside :data:`~qaindex.store.field_ranges.FUSED_SCORE`, as on data a single feature
    separates): hybrid hits then keep the model's probability capped by the hits above."""
    x, y, sw = hybrid_pairs(model, groups, calibration, depth=depth, offtopic=offtopic)
    if not 0 < int(y.sum()) < len(y):
        return None
    weights = fit_fused_score(x, y, sw)
    if not all(FUSED_SCORE[k].holds(v) for k, v in zip(FUSED_SCORE_WEIGHTS, weights, strict=True)):
        return None
    z = weights[0] + x @ np.asarray(weights[1:])
    return {
        "fused_score": {k: round(v, 6) for k, v in zip(FUSED_SCORE_WEIGHTS, weights, strict=True)},
        "pairs": len(y),
        "ece": expected_calibration_error(1 / (1 + np.exp(-z)), y),
    }


def calibrate_model(
    model_dir: str | os.PathLike[str],
    groups: Sequence[Any],
    *,
    method: str = "platt",
    depth: int = DEFAULT_DEPTH,
    source: str = "",
    labels: str = "labelled",
    write: bool = True,
    offtopic: Sequence[str] = (),
    offtopic_source: str = "",
    hybrid: bool | None = None,
    hybrid_groups: Sequence[Any] | None = None,
    hybrid_source: str = "",
) -> dict[str, Any]:
    """Fit a model's calibration on held-out labelled data and store it in its manifest.

    With ``hybrid``, the hybrid hits' score is calibrated on their fused value too
    (:func:`hybrid_pairs`, :func:`fit_fused_score`) and stored as the manifest's
    ``fusion.fused_score`` (the fusion rule itself is unchanged).

    Parameters
    ----------
    model_dir : path
        A dual-encoder model directory; its ``manifest.json`` gets a ``calibration`` field
        (rewritten atomically; the model's other files are unchanged).
    groups : list of QuestionGroup
        Held-out questions with their relevant answers (the model must not have been trained
        on them); every distinct answer forms the pool the questions are searched in.
    method : {"platt", "isotonic"}
    depth : int
        Hits per question used as pairs.
    source, labels : str
        Provenance stored with the calibration (e.g. the data file, ``"teacher: all-MiniLM-L6-v2"``).
    write : bool
        False: fit and report only.
    offtopic : list of str
        Questions the answers do not answer: their top ``depth`` hits join the fitting data
        as not relevant, so that the best hit of an off-topic question scores low
        (:mod:`qaindex.eval.offtopic`), weighted to count as :data:`OFFTOPIC_SHARE` of the
        questions (:func:`offtopic_weight`). Empty: answerable questions only.
    offtopic_source : str
        Provenance of ``offtopic`` stored with the calibration.
    hybrid : bool or None
        Fit the hybrid score calibration too (needs PyStemmer, the ``hybrid`` extra). A fit
        on pseudo-questions cut from the answers carries their high BM25 match over to real
        questions, so fit it on questions like the users'. None (default): as ``qaindex
        calibrate`` does, for ``labels="labelled"`` where PyStemmer is installed. The hybrid
        score reads the dense calibration's logit, so one left unfitted keeps weights fitted
        on the previous dense calibration.
    hybrid_groups : list of QuestionGroup, optional
        Labelled questions to fit the hybrid score on instead of ``groups`` (with the dense
        calibration just fitted on ``groups``): real questions where ``groups`` are
        pseudo-questions judged by a teacher. ``hybrid_source`` names them in the stored
        ``hybrid`` object (``data``).

    Returns
    -------
    dict
        The stored ``calibration`` object, with ``ece_before`` (the previous score's ECE on
        the same pairs) and ``ece`` (after; both in-sample), and with ``hybrid`` (the hybrid
        score's fit: ``fused_score``, ``pairs``, ``ece``) when it was fitted.
    """
    directory = Path(model_dir)
    model = Model.load(directory)
    raw, best, y, sw = _measure_weighted(model, groups, depth=depth, offtopic=offtopic)
    fitted = fit(raw, y, method=method, best=best, weights=sw)
    info: dict[str, Any] = {
        "data": source,
        "labels": labels,
        "depth": depth,
        "pairs": len(y),
        "relevant": round(float(y.mean()), 6),
        "ece_before": expected_calibration_error(model.calibration(raw, best), y),
        "ece": expected_calibration_error(fitted(raw, best), y),
    }
    if offtopic:
        info["offtopic"] = {"data": offtopic_source, "questions": len(offtopic), "share": OFFTOPIC_SHARE}
    if hybrid is None:
        hybrid = labels == "labelled" and tokenizer_available()
    if flag(hybrid, "hybrid") and tokenizer_available(strict=True):
        asked = groups if hybrid_groups is None else hybrid_groups
        fused = _fused_score_fit(model, asked, fitted, depth=depth, offtopic=offtopic)
        if fused is not None:
            info["hybrid"] = fused if hybrid_groups is None else {"data": hybrid_source, **fused}
    stored = Calibration(fitted.method, a=fitted.a, b=fitted.b, c=fitted.c, x=fitted.x, y=fitted.y, info=info)
    stored_json = stored.to_json()
    if write:
        mpath = directory / "manifest.json"
        Calibration.from_manifest(stored_json, mpath)  # in range (qaindex.store.field_ranges): the model loads
        manifest = read_json_object(mpath, error=ModelFormatError, what="model directory")
        manifest["calibration"] = stored_json
        if "hybrid" in info:
            manifest["fusion"] = {**(manifest.get("fusion") or {}), "fused_score": info["hybrid"]["fused_score"]}
        write_json_atomic(mpath, manifest)
    return stored_json
