"""The package version, written into every manifest (``qaindex_version``)."""

from __future__ import annotations

__version__ = "0.1.0"
