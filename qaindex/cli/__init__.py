"""The command line: ``qaindex build|search|add|remove|info|eval|train|calibrate|gc ...``.

A thin click layer over the library: :mod:`.app` holds the group and the index commands, one
module per other command (``train``, ``eval``, ``calibrate``, ``export``, ``maintenance``), and
:mod:`.options` the options they share. Importing it loads neither torch nor the exporter.
"""

from __future__ import annotations

from .app import main

__all__ = ["main"]
