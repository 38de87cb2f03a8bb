"""The switch between the build's fast paths and the generic code they shortcut.

Tokenizing (:mod:`qaindex.text.tokenizer`), corpus validation (:mod:`qaindex.corpus`), stored
record lines (:mod:`qaindex.store.records`) and padding each have a fast path for the common case
(pure-ASCII text, flat records of plain JSON values) that gives exactly what the generic
code gives and hands everything unusual to it. :func:`generic_only` turns the fast paths
off, so tests can use the generic code as the reference and ``benchmarks/speed/build_speed.py``
can time it as the baseline in the same run. It is not meant for applications: the results
are the same either way, only slower.

Example
-------
>>> with generic_only():
...     enabled()
False
>>> enabled()
True
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["enabled", "generic_only"]

_lock = threading.Lock()
_disabled = 0  # nesting depth of generic_only()


def enabled() -> bool:
    """Whether the fast paths are in use (True unless inside :func:`generic_only`)."""
    return _disabled == 0


@contextmanager
def generic_only() -> Iterator[None]:
    """Run the block with every fast path off (process-wide, nestable)."""
    global _disabled
    with _lock:
        _disabled += 1
    try:
        yield
    finally:
        with _lock:
            _disabled -= 1
