"""One writer per index: an advisory lock file next to the index manifest.

Writers (``qaindex build``/``add``/``remove``, :meth:`qaindex.Ranker.save`,
:meth:`qaindex.Ranker.edit`) hold ``INDEX/.lock`` while they read, modify and save an index.
Readers never take it: a save publishes a complete snapshot with one rename, so a reader
sees the old index or the new one.

The lock is an ``fcntl.flock`` on the file (POSIX only; on other systems writers are not
serialized). The kernel releases it when the holder exits, even on SIGKILL, so a crashed
writer never leaves the index locked. The holder writes its pid into the file, so a waiting
writer that gives up can say who holds it; the file is removed when the lock is released.

The lock file is never opened through a link (``O_NOFOLLOW``), and a ``.lock`` that is not
what qaindex writes (a symbolic link, a file with another name, i.e. a hard link, anything
but a regular file, a file holding more than a pid) is refused with an
:class:`~qaindex.errors.IndexFormatError` before anything is written: a writer never
truncates a file that is not its lock. Running out of space or inodes creating it is a
:class:`~qaindex.errors.DiskFullError`.
Within one process the lock is re-entrant (a save inside :meth:`Ranker.edit` does not wait
for itself), and threads of one process take turns.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import DiskFullError, IndexFormatError, IndexLockedError, QAIndexError
from .diskspace import FULL_ERRNOS, writing

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["DEFAULT_LOCK_TIMEOUT", "LOCK_NAME", "check_timeout", "index_lock"]

LOCK_NAME = ".lock"
DEFAULT_LOCK_TIMEOUT = 60.0
_POLL = 0.02
_LOCK_SPACE = 4096  # one block: what creating the lock file and writing a pid needs


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


_NO_LINK = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
# never block on a pipe named .lock, never make a terminal ours
_OPEN = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NONBLOCK", 0) | _NO_LINK
_PID = re.compile(rb"[0-9]*\n?")  # all a lock file ever holds (the holder's pid)
_PID_BYTES = 32
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError, ValueError):
        pid = int(os.pread(fd, _PID_BYTES, 0).strip() or b"0")
        if pid > 0:
            return f" by process {pid}"
    return ""


def _foreign(path: Path, what: str, advice: str = "remove it and retry") -> IndexFormatError:
    return IndexFormatError(f"{path}: {what}, not a lock file qaindex wrote; {advice}")


def _open_lock(path: Path) -> int:
    """Open (or create) the lock file, refusing anything qaindex would not have written there.

    Never through a link (``O_NOFOLLOW``): a symbolic link named ``.lock`` would make every
    writer truncate whatever it points to. The checks run on the open descriptor, so what is
    checked is what is written: a regular file with one name (a hard link is another name of
    someone's file) holding at most a pid.
    """
    try:
        fd = os.open(path, _OPEN, 0o644)
    except OSError:
        with contextlib.suppress(OSError):
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise _foreign(
                    path,
                    "a symbolic link",
                    "qaindex never writes through a link: remove the link (not the file it points to) and retry",
                ) from None
            if not stat.S_ISREG(mode):  # a directory (EISDIR), a socket (ENXIO), ...
                raise _foreign(path, _KINDS.get(stat.S_IFMT(mode), "not a regular file")) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _foreign(path, _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file"))
        if info.st_nlink != 1:
            raise _foreign(
                path,
                f"a file with {info.st_nlink} hard links",
                f"qaindex never writes into a file that has another name: remove {path} "
                "(the file keeps its other name) and retry",
            )
        if info.st_size > _PID_BYTES or not _PID.fullmatch(os.pread(fd, _PID_BYTES + 1, 0)):
            raise _foreign(
                path, "a file that holds more than a process id", "qaindex never truncates it: move it away and retry"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_at(fd: int, path: Path) -> bool:
    """Whether ``path`` (not following a link) is the file open as ``fd``."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False


def _write_pid(fd: int) -> None:
    """Write our pid into the lock file (verified ours); a full disk leaves it empty, that is all.

    The pid only lets a waiting writer name the holder: ``qaindex gc`` must still run on a full
    disk, and a write that needs space fails later with :class:`~qaindex.errors.DiskFullError`.
    """
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise


def _acquire_file(path: Path, deadline: float, timeout: float) -> int:
    """Open and flock ``path``; retry until the locked file is the one at ``path``."""
    while True:
        fd = _open_lock(path)
        locked = False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise IndexLockedError(
                            f"{path.parent}: another writer holds the index lock{_holder(fd)} "
                            f"(waited {timeout:g} s); wait for it to finish, or raise --lock-timeout"
                        ) from None
                    time.sleep(_POLL)
            locked = True
            # the previous holder may have removed the file between our open and our flock
            if _is_at(fd, path):
                _write_pid(fd)
                return fd
        except BaseException:
            if locked:  # ours now: leave no lock file behind
                _release_file(fd, path)
            else:
                os.close(fd)
            raise
        os.close(fd)


def _release_file(fd: int, path: Path) -> None:
    """Remove the lock file (only when ``path`` still is the file we hold) and release the lock."""
    try:
        if _is_at(fd, path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    finally:
        os.close(fd)  # releases the flock


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
    IndexFormatError
        When ``root/.lock`` is not a lock file qaindex wrote (a link, a hard link, not a
        regular file, or holding more than a pid); nothing is written into it.
    DiskFullError
        When the disk is out of space or inodes for the directory or the lock file.

    Example
    -------
    >>> import tempfile
    >>> with index_lock(tempfile.mkdtemp(), timeout=5):
    ...     pass
    """
    seconds = check_timeout(timeout)
    directory = Path(root)
    try:
        with writing(directory, "the index directory", needed=_LOCK_SPACE):
            directory.mkdir(parents=True, exist_ok=True)
    except DiskFullError:
        raise
    except OSError as exc:
        raise QAIndexError(
            f"{directory}: cannot create the index directory ({exc.strerror}); choose another --index path"
        ) from None
    if fcntl is None:  # pragma: no cover - Windows: document, do not pretend
        yield
        return
    path = directory / LOCK_NAME
    key = os.path.join(os.path.realpath(directory), LOCK_NAME)  # never resolve .lock itself
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
                with writing(directory, f"the index lock file {LOCK_NAME}", needed=_LOCK_SPACE):
                    held.fd = _acquire_file(path, deadline, seconds)
            except DiskFullError:
                raise
            except OSError as exc:
                raise QAIndexError(f"{path}: cannot create the index lock file ({exc.strerror})") from None
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0:
                fd, held.fd = held.fd, -1
                _release_file(fd, path)
    finally:
        held.mutex.release()
