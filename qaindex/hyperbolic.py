"""Deprecated alias of :mod:`qaindex.geometry.hyperbolic`: import from there (this module will be removed)."""

from __future__ import annotations

import warnings

from .geometry.hyperbolic import *  # noqa: F403

warnings.warn(
    "qaindex.hyperbolic moved to qaindex.geometry.hyperbolic; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
