"""Deprecated alias of :mod:`qaindex.eval.calibration`: import from there (this module will be removed)."""

from __future__ import annotations

import warnings

from .eval.calibrate import *  # noqa: F403
from .eval.calibration import *  # noqa: F403

warnings.warn(
    "qaindex.calibration moved to qaindex.eval.calibration (calibrate_model and measure: "
    "qaindex.eval.calibrate); import it from there",
    DeprecationWarning,
    stacklevel=2,
)
