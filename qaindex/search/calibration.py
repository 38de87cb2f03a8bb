"""Calibrated scores: every hit's ``score`` in [0, 1] estimates P(the answer is relevant).

A model's raw score (``Hit.raw_score``, what the ONNX scorer gives: unbounded, comparable
only within one model) is mapped through the model's *calibration*, stored in its manifest
under ``"calibration"`` and fitted on held-out data when the model is trained or exported,
or later with ``qaindex calibrate MODEL_DIR DATA.jsonl``
(:func:`qaindex.eval.calibration_fit.calibrate_model`):

- ``platt`` (Platt, 1999), with the hit's distance below the best hit of its search as a
  second feature: ``p = 1 / (1 + exp(-(a * raw + c * (raw - best) + b)))``, ``a``, ``c`` ≥ 0,
  where ``best`` is the highest raw score among the hits the search ranked (a hit far below
  the question's best match is less likely relevant than its raw score alone says; ``c`` = 0
  is plain Platt scaling);
- ``isotonic`` (Zadrozny & Elkan, 2002): a non-decreasing piecewise-linear map through the
  points ``(x_i, y_i)`` found by pool-adjacent-violators, constant beyond its ends.

Every search applies it to its hits (:func:`qaindex.search.hits.make_hits`); the fitting lives
with the evaluation (:mod:`qaindex.eval.calibration_fit`). A model directory without
``"calibration"`` (written before calibration existed) still loads: its hits get ``score =
sigmoid(raw_score)``, a number in [0, 1] that is *not* a probability; ``qaindex info`` then
says ``uncalibrated``.

Example
-------
>>> cal = Calibration("platt", a=2.0, b=-3.0)
>>> p = cal(np.array([0.0, 3.0]))
>>> bool(p[0] < 0.2 and p[1] > 0.8), cal.calibrated
(True, True)
>>> Calibration.uncalibrated()(np.array([0.0])).tolist()
[0.5]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFormatError
from ..store.field_ranges import CALIBRATION_METHODS, calibration_entry_error

__all__ = ["CALIBRATION_METHODS", "Calibration", "as_calibration"]


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
        # one errstate for all of it: every search calls this, and each errstate costs
        with np.errstate(over="ignore", invalid="ignore"):
            z = r
            if self.method == "platt":
                z = self.a * r + self.b
                if best is not None and self.c != 0:
                    gap = np.minimum(r - np.asarray(best, dtype=np.float64), 0.0)  # -inf - -inf: NaN
                    z = z + self.c * np.where(np.isfinite(gap), gap, 0.0)
            out = 1.0 / (1.0 + np.exp(-z))
        return np.where(np.isnan(out), 0.0, out)

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
        why = calibration_entry_error(entry, mpath)  # the checks and ranges: qaindex.store.field_ranges
        if why is not None:
            raise ModelFormatError(why)
        info = {k: v for k, v in entry.items() if k not in ("method", "a", "b", "c", "x", "y")}
        if entry["method"] == "platt":
            return cls("platt", a=float(entry["a"]), b=float(entry["b"]), c=float(entry.get("c", 0.0)), info=info)
        return cls("isotonic", x=tuple(map(float, entry["x"])), y=tuple(map(float, entry["y"])), info=info)

    def describe(self) -> dict[str, Any]:
        """What ``info`` shows."""
        if not self.calibrated:
            return {"calibrated": False, "method": "sigmoid(raw_score), not a probability"}
        return {"calibrated": True, **self.to_json()}


def as_calibration(value: Mapping[str, Any] | Calibration) -> Calibration:
    """A Calibration from itself or its manifest object."""
    return value if isinstance(value, Calibration) else Calibration.from_manifest(dict(value))
