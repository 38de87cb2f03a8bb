"""Calibrating a model directory: its hits' ``(raw score, relevant?)`` pairs on held-out
labelled data, and the top hits of off-topic questions (:mod:`.offtopic`) as pairs that are
not relevant, a calibration fitted to them (:mod:`.calibration`), stored in its manifest;
and, where hybrid search is available, the calibration of the fused value of hybrid hits
(:func:`hybrid_pairs`, stored as the manifest's ``fusion.fused_score``).

``qaindex calibrate MODEL_DIR DATA.jsonl`` calls :func:`calibrate_model`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..arguments import flag
from ..errors import ModelFormatError, QueryError
from ..model import Model
from ..ranker import Ranker
from ..search.calibration import (
    DEFAULT_DEPTH,
    Calibration,
    calibration_pairs,
    expected_calibration_error,
    fit,
    fit_fused_score,
    labelled_pool,
)
from ..store.field_ranges import FUSED_SCORE, FUSED_SCORE_FIELDS
from ..store.storage import read_json_object, write_json_atomic
from ..text.lexical import tokenizer_available

__all__ = ["calibrate_model", "hybrid_pairs", "measure"]


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
    records, questions, relevant = labelled_pool(groups)
    if not questions:
        raise QueryError("the calibration data has no question with a relevant answer")
    ranker = Ranker.build(records, model=model, index_kind="flat", hybrid=hybrid)
    raw, best, y = calibration_pairs(ranker, questions, relevant, depth=depth, hybrid=hybrid)
    if not offtopic:
        return raw, best, y
    o_raw, o_best, o_y = calibration_pairs(ranker, list(offtopic), [set()] * len(offtopic), depth=depth, hybrid=hybrid)
    return np.concatenate([raw, o_raw]), np.concatenate([best, o_best]), np.concatenate([y, o_y])


def hybrid_pairs(
    model: Any,
    groups: Sequence[Any],
    calibration: Calibration,
    *,
    depth: int = DEFAULT_DEPTH,
    offtopic: Sequence[str] = (),
) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels of the top ``depth`` hybrid hits of labelled question groups (each
    question searched against every distinct answer of the groups, as :func:`measure`), then
    of the ``offtopic`` questions (all 0), for :func:`~.calibration.fit_fused_score`.

    The features of a hit are its fused value, the logit of ``calibration``'s probability of
    its question's best model score (the top of a dense search of the same index) and the
    question's BM25 match (the best BM25 score over the question's bound): what
    :func:`qaindex.search.scoring.fused_probability` reads.

    Returns
    -------
    features : numpy.ndarray (n, 3)
    labels : numpy.ndarray (n,)
    """
    records, questions, relevant = labelled_pool(groups)
    ranker = Ranker.build(records, model=model, index_kind="flat", hybrid=True)
    lexical = ranker._lexical
    assert lexical is not None
    asked = [*questions, *offtopic]
    good = [*relevant, *([set()] * len(offtopic))]
    hits = ranker.search_batch(asked, depth, rerank=False, hybrid=True, explain=True)
    tops = ranker.search_batch(asked, 1, rerank=False, hybrid=False)
    feats: list[list[float]] = []
    labels: list[int] = []
    for question, found, top, rows in zip(asked, hits, tops, good, strict=True):
        if not found:
            continue
        p = float(np.clip(calibration(top[0].raw_score), 1e-6, 1 - 1e-6))
        terms, length = lexical.query(question)
        bound = lexical.score_bound(terms, length)
        match = float(lexical.scores_of_terms(terms).max()) / bound if bound > 0 else 0.0
        for h in found:
            assert h.explanation is not None and h.explanation.fused is not None
            feats.append([h.explanation.fused, float(np.log(p / (1 - p))), match])
            labels.append(int(h.row in rows))
    return np.asarray(feats, np.float64).reshape(-1, 3), np.asarray(labels, np.int64)


def _fused_score_fit(
    model: Any, groups: Sequence[Any], calibration: Calibration, *, depth: int, offtopic: Sequence[str]
) -> dict[str, Any] | None:
    """The hybrid score calibration of the fused value (:func:`hybrid_pairs`,
    :func:`~.calibration.fit_fused_score`) with its pairs and in-sample ECE; None when the top
    hybrid hits are all relevant or all not (nothing to fit), or when the fit diverged (a weight
    outside :data:`~qaindex.store.field_ranges.FUSED_SCORE`, as on data a single feature
    separates): hybrid hits then keep the model's probability capped by the hits above."""
    x, y = hybrid_pairs(model, groups, calibration, depth=depth, offtopic=offtopic)
    if not 0 < int(y.sum()) < len(y):
        return None
    weights = fit_fused_score(x, y)
    if not all(FUSED_SCORE[k].holds(v) for k, v in zip(FUSED_SCORE_FIELDS, weights, strict=True)):
        return None
    z = weights[0] + x @ np.asarray(weights[1:])
    return {
        "fused_score": {k: round(v, 6) for k, v in zip(FUSED_SCORE_FIELDS, weights, strict=True)},
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
    hybrid: bool = False,
) -> dict[str, Any]:
    """Fit a model's calibration on held-out labelled data and store it in its manifest.

    With ``hybrid``, the hybrid hits' score is calibrated on their fused value too
    (:func:`hybrid_pairs`, :func:`~.calibration.fit_fused_score`) and stored as the manifest's
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
        (:mod:`qaindex.eval.offtopic`). Empty: answerable questions only (as before).
    offtopic_source : str
        Provenance of ``offtopic`` stored with the calibration.
    hybrid : bool
        Fit the hybrid score calibration too (needs PyStemmer, the ``hybrid`` extra). A fit
        on pseudo-questions cut from the answers carries their high BM25 match over to real
        questions, so fit it on questions like the users'.

    Returns
    -------
    dict
        The stored ``calibration`` object, with ``ece_before`` (the previous score's ECE on
        the same pairs) and ``ece`` (after; both in-sample), and with ``hybrid`` (the hybrid
        score's fit: ``fused_score``, ``pairs``, ``ece``) when it was fitted.
    """
    directory = Path(model_dir)
    model = Model.load(directory)
    raw, best, y = measure(model, groups, depth=depth, offtopic=offtopic)
    fitted = fit(raw, y, method=method, best=best)
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
        info["offtopic"] = {"data": offtopic_source, "questions": len(offtopic)}
    if flag(hybrid, "hybrid") and tokenizer_available(strict=True):
        fused = _fused_score_fit(model, groups, fitted, depth=depth, offtopic=offtopic)
        if fused is not None:
            info["hybrid"] = fused
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
