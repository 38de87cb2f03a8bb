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

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = ["ReadWriteLock", "reading", "writing"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


class _Locked(Protocol):
    _lock: ReadWriteLock


_S = TypeVar("_S", bound=_Locked)


def reading(method: Callable[Concatenate[_S, _P], _T]) -> Callable[Concatenate[_S, _P], _T]:
    """Run a query method under its object's read lock (``self._lock``)."""

    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with self._lock.read():
            return method(self, *args, **kwargs)

    return wrapper


def writing(method: Callable[Concatenate[_S, _P], _T]) -> Callable[Concatenate[_S, _P], _T]:
    """Run an update method under its object's write lock: it waits for searches in flight."""

    @functools.wraps(method)
    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with self._lock.write():
            return method(self, *args, **kwargs)

    return wrapper


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
