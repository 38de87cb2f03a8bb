"""Calibrating a model directory: its hits' ``(raw score, relevant?)`` pairs on held-out
labelled data, and the top hits of off-topic questions (:mod:`.offtopic`) as pairs that are
not relevant, a calibration fitted to them (:mod:`.calibration`), stored in its manifest.

``qaindex calibrate MODEL_DIR DATA.jsonl`` calls :func:`calibrate_model`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError, QueryError
from ..model import Model
from ..ranker import Ranker
from ..store.storage import read_json_object, write_json_atomic
from .calibration import DEFAULT_DEPTH, Calibration, calibration_pairs, expected_calibration_error, fit, labelled_pool

__all__ = ["calibrate_model", "measure"]


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
) -> dict[str, Any]:
    """Fit a model's calibration on held-out labelled data and store it in its manifest.

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

    Returns
    -------
    dict
        The stored ``calibration`` object, with ``ece_before`` (the previous score's ECE on
        the same pairs) and ``ece`` (after; both in-sample).
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
    stored = Calibration(fitted.method, a=fitted.a, b=fitted.b, c=fitted.c, x=fitted.x, y=fitted.y, info=info)
    stored_json = stored.to_json()
    if write:
        mpath = directory / "manifest.json"
        Calibration.from_manifest(stored_json, mpath)  # in range (qaindex.store.field_ranges): the model loads
        manifest = read_json_object(mpath, error=ModelFormatError, what="model directory")
        manifest["calibration"] = stored_json
        write_json_atomic(mpath, manifest)
    return stored_json
