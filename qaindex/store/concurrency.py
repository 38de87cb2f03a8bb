"""A readers-writer lock: many searches at once, updates one at a time and alone.

:class:`qaindex.Ranker` takes the read side in every query method and the write side in
every method that changes it (``configure``, ``add``, ``remove``, ``save``), so searches may
run from many threads while another thread updates the index: a search sees the index either
before or after an update, never half of it. Waiting writers go first (a stream of searches
cannot starve an update), and both sides are re-entrant in one thread (a search inside an
update, or a search that calls another query method, does not deadlock).

Example
-------
>>> lock = ReadWriteLock()
>>> with lock.read():
...     with lock.read():      # re-entrant
...         pass
>>> with lock.write():
...     with lock.read():      # a writer may read
...         pass
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ReadWriteLock"]


class ReadWriteLock:
    """Writer-preferring, re-entrant readers-writer lock (threads of one process)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0  # threads holding the read side (each counted once)
        self._writer: int | None = None  # thread holding the write side
        self._write_depth = 0
        self._writers_waiting = 0
        self._local = threading.local()

    def _read_depth(self) -> int:
        return getattr(self._local, "depth", 0)

    @contextmanager
    def read(self) -> Iterator[None]:
        """Hold the read side (shared) for the ``with`` block."""
        me = threading.get_ident()
        depth = self._read_depth()
        if depth or self._writer == me:  # re-entrant, or reading inside our own write
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth
            return
        with self._cond:
            while self._writer is not None or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        self._local.depth = 1
        try:
            yield
        finally:
            self._local.depth = 0
            with self._cond:
                self._readers -= 1
                if self._readers == 0:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        """Hold the write side (exclusive) for the ``with`` block."""
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._write_depth += 1
            else:
                if self._read_depth():
                    raise RuntimeError("cannot update a Ranker from inside one of its own searches")
                self._writers_waiting += 1
                try:
                    while self._writer is not None or self._readers:
                        self._cond.wait()
                finally:
                    self._writers_waiting -= 1
                self._writer = me
                self._write_depth = 1
        try:
            yield
        finally:
            with self._cond:
                self._write_depth -= 1
                if self._write_depth == 0:
                    self._writer = None
                    self._cond.notify_all()
