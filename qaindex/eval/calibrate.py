"""Calibrating a model directory: its hits' ``(raw score, relevant?)`` pairs on held-out
labelled data, a calibration fitted to them (:mod:`.calibration`), stored in its manifest.

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
    model: Any, groups: Sequence[Any], *, depth: int = DEFAULT_DEPTH, hybrid: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(raw scores, best raw score of their search, labels)`` of the top ``depth`` hits of
    labelled question groups: each question searched against every distinct answer of the
    groups (an in-memory flat index).

    Parameters
    ----------
    model : qaindex.Model
    groups : list of qaindex.eval.datasets.QuestionGroup
    depth : int
    hybrid : bool
        Fuse with BM25 (needs the ``hybrid`` extra).
    """
    records, questions, relevant = labelled_pool(groups)
    if not questions:
        raise QueryError("the calibration data has no question with a relevant answer")
    ranker = Ranker.build(records, model=model, index_kind="flat", hybrid=hybrid)
    return calibration_pairs(ranker, questions, relevant, depth=depth, hybrid=hybrid)


def calibrate_model(
    model_dir: str | os.PathLike[str],
    groups: Sequence[Any],
    *,
    method: str = "platt",
    depth: int = DEFAULT_DEPTH,
    source: str = "",
    labels: str = "labelled",
    write: bool = True,
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

    Returns
    -------
    dict
        The stored ``calibration`` object, with ``ece_before`` (the previous score's ECE on
        the same pairs) and ``ece`` (after; both in-sample).
    """
    directory = Path(model_dir)
    model = Model.load(directory)
    raw, best, y = measure(model, groups, depth=depth)
    fitted = fit(raw, y, method=method, best=best)
    info = {
        "data": source,
        "labels": labels,
        "depth": depth,
        "pairs": len(y),
        "relevant": round(float(y.mean()), 6),
        "ece_before": expected_calibration_error(model.calibration(raw, best), y),
        "ece": expected_calibration_error(fitted(raw, best), y),
    }
    stored = Calibration(fitted.method, a=fitted.a, b=fitted.b, c=fitted.c, x=fitted.x, y=fitted.y, info=info)
    stored_json = stored.to_json()
    if write:
        mpath = directory / "manifest.json"
        manifest = read_json_object(mpath, error=ModelFormatError, what="model directory")
        manifest["calibration"] = stored_json
        write_json_atomic(mpath, manifest)
    return stored_json
