"""One writer per index: an advisory lock file next to the index manifest.

Writers (``qaindex build``/``add``/``remove``, :meth:`qaindex.Ranker.save`,
:meth:`qaindex.Ranker.edit`) hold ``INDEX/.lock`` while they read, modify and save an index.
Readers never take it: a save publishes a complete snapshot with one rename, so a reader
sees the old index or the new one.

The lock is an ``fcntl.flock`` on the file (POSIX only; on other systems writers are not
serialized). The kernel releases it when the holder exits, even on SIGKILL, so a crashed
writer never leaves the index locked. The holder writes its pid into the file, so a waiting
writer that gives up can say who holds it; the file is removed when the lock is released.
Within one process the lock is re-entrant (a save inside :meth:`Ranker.edit` does not wait
for itself), and threads of one process take turns.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import IndexLockedError, QAIndexError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DEFAULT_LOCK_TIMEOUT", "LOCK_NAME", "check_timeout", "index_lock"]

LOCK_NAME = ".lock"
DEFAULT_LOCK_TIMEOUT = 60.0
_POLL = 0.02


@dataclass
class _Held:
    mutex: threading.RLock = field(default_factory=threading.RLock)
    fd: int = -1
    depth: int = 0


_registry: dict[str, _Held] = {}
_registry_guard = threading.Lock()


def check_timeout(value: object, name: str = "lock timeout") -> float:
    """A timeout in seconds: a non-negative number, or None / ``math.inf`` for "wait forever".

    Values too large for the platform's clocks (above :data:`threading.TIMEOUT_MAX`, e.g.
    ``1e308``) also mean "wait forever". Call it before any work, so a bad timeout fails at
    once rather than after a build.

    Returns
    -------
    float
        The seconds, ``math.inf`` for no limit.

    Example
    -------
    >>> check_timeout(None), check_timeout(2), check_timeout(1e308)
    (inf, 2.0, inf)
    >>> check_timeout(-1)
    Traceback (most recent call last):
    ...
    qaindex.errors.QAIndexError: lock timeout must be a non-negative number of seconds (or None / inf ...), got -1
    """
    if value is None:
        return math.inf
    ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool | np.bool_)
    try:
        seconds = float(value) if ok else math.nan  # type: ignore[arg-type]
    except (OverflowError, ValueError):  # an int beyond float range: "forever" too
        seconds = math.inf if ok and value > 0 else math.nan  # type: ignore[operator]
    if not seconds >= 0:
        raise QAIndexError(
            f"{name} must be a non-negative number of seconds (or None / inf to wait forever), got {value!r}"
        )
    return math.inf if seconds >= threading.TIMEOUT_MAX else seconds


def _holder(path: Path) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = int(path.read_text(encoding="ascii").strip() or "0")
        if pid > 0:
            return f" by process {pid}"
    return ""


def _acquire_file(path: Path, deadline: float, timeout: float) -> int:
    """Open and flock ``path``; retry until the locked file is the one at ``path``."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise IndexLockedError(
                            f"{path.parent}: another writer holds the index lock{_holder(path)} "
                            f"(waited {timeout:g} s); wait for it to finish, or raise --lock-timeout"
                        ) from None
                    time.sleep(_POLL)
            # the previous holder may have removed the file between our open and our flock
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


@contextlib.contextmanager
def index_lock(root: str | os.PathLike[str], *, timeout: float | None = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the writer lock of the index at ``root`` (created if missing).

    Parameters
    ----------
    root : path-like
        The index directory; it is created (with parents) if it does not exist.
    timeout : float or None, keyword-only
        Seconds to wait for another writer; 0 fails at once, None or ``math.inf`` waits as
        long as it takes.

    Raises
    ------
    IndexLockedError
        When another writer still holds the lock after ``timeout`` seconds (the message names
        the index and the holder's pid).

    Example
    -------
    >>> import tempfile
    >>> with index_lock(tempfile.mkdtemp(), timeout=5):
    ...     pass
    """
    seconds = check_timeout(timeout)
    directory = Path(root)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QAIndexError(
            f"{directory}: cannot create the index directory ({exc.strerror}); choose another --index path"
        ) from None
    if fcntl is None:  # pragma: no cover - Windows: document, do not pretend
        yield
        return
    path = directory / LOCK_NAME
    key = os.path.realpath(path)
    with _registry_guard:
        held = _registry.setdefault(key, _Held())
    deadline = time.monotonic() + seconds
    if not held.mutex.acquire(timeout=-1 if math.isinf(seconds) else seconds):
        raise IndexLockedError(
            f"{directory}: another thread of this process holds the index lock (waited {seconds:g} s); "
            "save from one thread at a time"
        )
    try:
        if held.depth == 0:
            try:
                held.fd = _acquire_file(path, deadline, seconds)
            except OSError as exc:
                raise QAIndexError(f"{path}: cannot create the index lock file ({exc.strerror})") from None
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                os.close(held.fd)  # releases the flock
                held.fd = -1
    finally:
        held.mutex.release()
