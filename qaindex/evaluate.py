"""Deprecated alias of :mod:`qaindex.eval.evaluate`: import from there (this module will be removed)."""

from __future__ import annotations

import warnings

from .eval.evaluate import *  # noqa: F403

warnings.warn(
    "qaindex.evaluate moved to qaindex.eval.evaluate; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
