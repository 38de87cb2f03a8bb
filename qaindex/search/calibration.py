"""Calibrated scores: every hit's ``score`` in [0, 1] estimates P(the answer is relevant).

A model's raw score (``Hit.raw_score``, what the ONNX scorer gives: unbounded, comparable
only within one model) is mapped through the model's *calibration*, stored in its manifest
under ``"calibration"`` and fitted on held-out data when the model is trained or exported,
or later with ``qaindex calibrate MODEL_DIR DATA.jsonl``
(:func:`qaindex.eval.calibrate.calibrate_model`):

- ``platt`` (Platt, 1999), with the hit's distance below the best hit of its search as a
  second feature: ``p = 1 / (1 + exp(-(a * raw + c * (raw - best) + b)))``, ``a``, ``c`` ≥ 0,
  where ``best`` is the highest raw score among the hits the search ranked (a hit far below
  the question's best match is less likely relevant than its raw score alone says; ``c`` = 0
  is plain Platt scaling);
- ``isotonic`` (Zadrozny & Elkan, 2002): a non-decreasing piecewise-linear map through the
  points ``(x_i, y_i)`` found by pool-adjacent-violators, constant beyond its ends.

The fitting data are the ``(raw score, relevant?)`` pairs of the top ``depth`` hits of each
held-out question searched against all the answers of its data (the hits a user sees), so
``score`` estimates the share of hits scored like this one that are relevant. A model
directory without ``"calibration"`` (written before calibration existed) still loads: its
hits get ``score = sigmoid(raw_score)``, a number in [0, 1] that is *not* a probability;
``qaindex info`` then says ``uncalibrated``.

Expected calibration error (:func:`expected_calibration_error`): hits are put into 10
equal-width bins of ``score``, and ECE is the mean, weighted by bin size, of ``|mean score -
share relevant|`` over the bins.

Example
-------
>>> cal = fit([0.0, 1.0, 2.0, 3.0] * 25, [0, 0, 1, 1] * 25, method="platt")
>>> p = cal(np.array([0.0, 3.0]))
>>> bool(p[0] < 0.2 and p[1] > 0.8), cal.calibrated
(True, True)
>>> Calibration.uncalibrated()(np.array([0.0])).tolist()
[0.5]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError, QueryError
from ..store.field_ranges import CALIBRATION, CALIBRATION_METHODS, field_error

__all__ = [
    "CALIBRATION_METHODS",
    "Calibration",
    "calibration_pairs",
    "expected_calibration_error",
    "fit",
    "fit_fused_score",
    "labelled_pool",
    "reliability_bins",
]

ECE_BINS = 10
DEFAULT_DEPTH = 10


@dataclass(frozen=True)
class Calibration:
    """A map from raw model scores to probabilities of relevance.

    Attributes
    ----------
    method : {"platt", "isotonic", "sigmoid"}
        ``sigmoid``: the uncalibrated fallback ``1 / (1 + exp(-raw))``.
    a, b, c : float
        Platt's slope and offset, and the slope of ``raw - best``.
    x, y : tuple of float
        Isotonic points (x increasing, y non-decreasing in [0, 1]).
    info : dict
        Provenance and measurements (data, pairs, ECE), stored with it.
    """

    method: str
    a: float = 1.0
    b: float = 0.0
    c: float = 0.0
    x: tuple[float, ...] = ()
    y: tuple[float, ...] = ()
    info: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def uncalibrated(cls) -> Calibration:
        """The fallback of models without a calibration: ``sigmoid(raw)``."""
        return cls("sigmoid")

    @property
    def calibrated(self) -> bool:
        return self.method != "sigmoid"

    def __call__(self, raw: Any, best: Any = None) -> np.ndarray:
        """Probabilities (float64, in [0, 1]) of raw scores (any shape; ``-inf`` gives 0).

        ``best``: the best raw score of each hit's search (broadcast against ``raw``); None
        treats every hit as the best of its search.
        """
        r = np.asarray(raw, dtype=np.float64)
        if self.method == "isotonic":
            return np.interp(r, self.x, self.y)
        if self.method == "platt":
            gap = 0.0 if best is None or self.c == 0 else np.minimum(r - np.asarray(best, dtype=np.float64), 0.0)
            with np.errstate(invalid="ignore"):
                z = self.a * r + self.c * np.nan_to_num(gap, nan=0.0, neginf=0.0) + self.b
        else:
            z = r
        with np.errstate(over="ignore", invalid="ignore"):
            out = 1.0 / (1.0 + np.exp(-z))
        return np.nan_to_num(out, nan=0.0)

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``calibration`` object."""
        out: dict[str, Any] = {"method": self.method}
        if self.method == "platt":
            out.update(a=self.a, b=self.b, c=self.c)
        elif self.method == "isotonic":
            out.update(x=list(self.x), y=list(self.y))
        out.update(self.info)
        return out

    @classmethod
    def from_manifest(cls, entry: Any, mpath: Path | str = "manifest.json") -> Calibration:
        """Validate a manifest's ``calibration`` (None: the uncalibrated fallback).

        Raises
        ------
        ModelFormatError
            Naming the field and what it must be.
        """
        if entry is None:
            return cls.uncalibrated()

        remedy = "recalibrate the model with `qaindex calibrate`, or remove the field"

        def bad(what: str) -> ModelFormatError:
            return ModelFormatError(f'{mpath}: field "calibration" {what}; {remedy}')

        def in_range(name: str, values: list[Any]) -> None:  # the ranges: qaindex.store.field_ranges
            for value in values:
                if not CALIBRATION[name].holds(value):
                    raise ModelFormatError(field_error(mpath, f"calibration.{name}", value, CALIBRATION[name], remedy))

        if not isinstance(entry, dict):
            raise bad(f"must be an object, got {entry!r}")
        method = entry.get("method")
        info = {k: v for k, v in entry.items() if k not in ("method", "a", "b", "c", "x", "y")}
        if method == "platt":
            a, b, c = entry.get("a"), entry.get("b"), entry.get("c", 0.0)
            if (
                not (_finite(a) and _finite(b) and _finite(c))
                or float(a) < 0  # type: ignore[arg-type]
                or float(c) < 0
                or float(a) + float(c) <= 0  # type: ignore[arg-type]
            ):
                raise bad(f'needs finite "a", "c" >= 0 (not both 0) and "b" for platt, got a={a!r}, b={b!r}, c={c!r}')
            for name, value in (("a", a), ("b", b), ("c", c)):
                in_range(name, [value])
            return cls("platt", a=float(a), b=float(b), c=float(c), info=info)  # type: ignore[arg-type]
        if method == "isotonic":
            x, y = entry.get("x"), entry.get("y")
            if (
                not isinstance(x, list)
                or not isinstance(y, list)
                or not x
                or len(x) != len(y)
                or not all(_finite(v) for v in [*x, *y])
                or any(b <= a for a, b in itertools.pairwise(x))
                or any(b < a for a, b in itertools.pairwise(y))
                or min(y) < 0
                or max(y) > 1
            ):
                raise bad('needs "x" (increasing) and "y" (non-decreasing, in [0, 1]) lists of one length')
            in_range("x", x)
            return cls("isotonic", x=tuple(map(float, x)), y=tuple(map(float, y)), info=info)
        raise bad(f'"method" must be one of {", ".join(CALIBRATION_METHODS)}, got {method!r}')

    def describe(self) -> dict[str, Any]:
        """What ``info`` shows."""
        if not self.calibrated:
            return {"calibrated": False, "method": "sigmoid(raw_score), not a probability"}
        return {"calibrated": True, **self.to_json()}


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
    if method == "isotonic":
        return _fit_isotonic(r, y)
    gap = None if best is None else np.minimum(r - np.asarray(best, dtype=np.float64).ravel(), 0.0)
    if gap is not None and (gap.shape != r.shape or not np.isfinite(gap).all()):
        raise QueryError("best must hold one finite score per pair")
    return _fit_platt(r, y, gap)


def _logistic(features: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Logistic regression weights (Newton's method) of targets ``t`` on standardised ``features``."""
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale[scale == 0] = 1.0
    x = np.concatenate([(features - mean) / scale, np.ones((len(t), 1))], axis=1)
    w = np.zeros(x.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (p - t)
        hess = x.T @ (x * (p * (1 - p))[:, None]) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-10:
            break
    coef = w[:-1] / scale
    return np.append(coef, w[-1] - float(coef @ mean))


def _fit_platt(r: np.ndarray, y: np.ndarray, gap: np.ndarray | None) -> Calibration:
    """Logistic regression of y on r (and ``raw - best``), with Platt's smoothed targets."""
    pos = y.sum()
    neg = len(y) - pos
    t = np.where(y > 0, (pos + 1) / (pos + 2), 1 / (neg + 2))
    a = c = -1.0
    b = 0.0
    if gap is not None and np.ptp(gap) > 0:
        a, c, b = _logistic(np.stack([r, gap], axis=1), t)
    if a < 0 or c < 0:  # no second feature, or one against the ranking: plain Platt scaling
        (a, b), c = _logistic(r[:, None], t), 0.0
    if not a > 0:  # a score that does not rank relevant answers higher cannot be calibrated upwards
        a, c, b = 1e-6, 0.0, float(math.log(pos / neg))
    return Calibration("platt", a=float(a), b=float(b), c=float(c))


def fit_fused_score(features: Any, labels: Any) -> tuple[float, float, float, float]:
    """The hybrid score calibration of the fused value (``fused_score``,
    :func:`qaindex.search.scoring.fused_probability`): logistic regression of 0/1 ``labels`` on
    ``features`` (n, 3): each hit's fused value, the calibrated logit of its question's best
    model score, the question's BM25 match. The fused value's weight is kept >= 0 (a fit
    against the order refits without it), so the score falls with the fused order.

    Returns
    -------
    tuple
        ``(bias, w_fused, w_top, w_match)``.

    Example
    -------
    >>> x = np.array([[f, 0.0, 0.5] for f in (0.1, 0.4, 0.6, 0.9)] * 25)
    >>> bias, w_fused, w_top, w_match = fit_fused_score(x, [0, 0, 1, 1] * 25)
    >>> w_fused > 0
    True
    """
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64).ravel()
    if x.ndim != 2 or x.shape != (len(y), 3) or not np.isfinite(x).all():
        raise QueryError(f"fused score features must be finite numbers of shape (n, 3), got {x.shape}")
    positives = int(y.sum())
    if not np.isin(y, (0.0, 1.0)).all() or positives in (0, len(y)):
        raise QueryError(f"the fused score fit needs 0/1 labels, both present; got {positives} relevant of {len(y)}")
    w = _logistic(x, y)  # the weights of (fused, top, match), then the bias
    if w[0] < 0:
        w = np.concatenate([[0.0], _logistic(x[:, 1:], y)])
    return float(w[3]), float(w[0]), float(w[1]), float(w[2])


def _fit_isotonic(r: np.ndarray, y: np.ndarray) -> Calibration:
    """Pool adjacent violators on the scores sorted ascending; one point per block (at its mean score)."""
    order = np.argsort(r, kind="stable")
    xs, ys = r[order], y[order]
    sums: list[float] = []
    counts: list[float] = []
    xsum: list[float] = []
    for xv, yv in zip(xs.tolist(), ys.tolist(), strict=True):
        sums.append(yv)
        counts.append(1.0)
        xsum.append(xv)
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


def as_calibration(value: Mapping[str, Any] | Calibration) -> Calibration:
    """A Calibration from itself or its manifest object."""
    return value if isinstance(value, Calibration) else Calibration.from_manifest(dict(value))
