"""Deprecated alias of :mod:`qaindex.store.ownership`: import from there (this module will be removed)."""

from __future__ import annotations

import warnings

from .store.ownership import *  # noqa: F403

warnings.warn(
    "qaindex.ownership moved to qaindex.store.ownership; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
