"""Errors raised by qaindex.

Every error a user can cause is a :class:`QAIndexError` whose message names the file, line,
field or value at fault and says what to do next. The CLI prints the message and exits with
code 1, without a traceback.
"""

from __future__ import annotations

__all__ = [
    "CorpusError",
    "DeviceError",
    "DiskFullError",
    "IndexChangedError",
    "IndexFormatError",
    "IndexLockedError",
    "MissingDependencyError",
    "ModelFormatError",
    "QAIndexError",
    "QueryError",
]


class QAIndexError(Exception):
    """Base class of every error qaindex raises on bad input or bad files."""


class CorpusError(QAIndexError, ValueError):
    """A corpus file or record is malformed (names the file, line and field)."""


class IndexFormatError(QAIndexError):
    """An index directory is missing, corrupted, or of an unknown format version."""


class IndexLockedError(QAIndexError):
    """Another writer held an index's lock for longer than the lock timeout (names the holder's pid)."""


class IndexChangedError(QAIndexError):
    """A save would replace an index this Ranker never loaded, or one another writer changed since it did."""


class ModelFormatError(QAIndexError):
    """A model directory is missing, corrupted, or of an unknown format version."""


class QueryError(QAIndexError, ValueError):
    """A search request is invalid (empty question, bad ``k``, unknown id)."""


class DiskFullError(QAIndexError, OSError):
    """A write ran out of disk space, quota or file size (``ulimit -f``): names the destination and
    the space needed. What was saved before is unchanged."""


class DeviceError(QAIndexError):
    """A requested device cannot be used."""


class MissingDependencyError(QAIndexError, ImportError):
    """An optional dependency is not installed (says which extra to install)."""
