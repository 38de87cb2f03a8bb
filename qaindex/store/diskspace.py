"""Disk full, quota and file-size limits: one clear error naming the destination and the space needed.

A save that runs out of space (``ENOSPC``), of quota (``EDQUOT``) or hits the process's
file-size limit (``EFBIG``, ``ulimit -f`` / ``RLIMIT_FSIZE``; Python ignores ``SIGXFSZ``, so
the write fails instead of killing the process) raises :class:`~qaindex.errors.DiskFullError`:
the message names the index (or model) being written, the file that failed, the space the
write needs and what is free. ``ENOSPC`` with bytes to spare means the file system is out of
inodes (``statvfs``: ``f_favail == 0``), and the message says so. FAISS reports a failed write
as a ``RuntimeError`` without an errno, numpy's ``tofile`` as an ``OSError`` without one; they
are turned into the same error when the destination is short of space, inodes or file size.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from ..errors import DiskFullError

try:
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = ["FULL_ERRNOS", "describe_size", "file_size_limit", "writing"]

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def describe_size(size: float) -> str:
    """Bytes in a readable unit.

    Example
    -------
    >>> describe_size(512), describe_size(3 * 2**20), describe_size(5.5 * 2**30)
    ('512 bytes', '3.0 MiB', '5.5 GiB')
    """
    if size < 1024:
        return f"{int(size)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def file_size_limit() -> int | None:
    """The process's file-size limit in bytes (``ulimit -f``), None when unlimited."""
    if resource is None:  # pragma: no cover
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _existing(directory: Path) -> Path | None:
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            return candidate
    return None


def _free(directory: Path) -> int | None:
    candidate = _existing(directory)
    if candidate is not None:
        with contextlib.suppress(OSError):
            return shutil.disk_usage(candidate).free
    return None


def _out_of_inodes(directory: Path) -> bool:
    """Whether the file system under ``directory`` has no inode left for a new file.

    ``ENOSPC`` means either no free blocks or no free inodes; ``statvfs`` tells them apart.
    File systems that allocate inodes on demand report ``f_files == 0``: never out of inodes.
    """
    candidate = _existing(directory)
    if candidate is None or not hasattr(os, "statvfs"):
        return False
    try:
        info = os.statvfs(candidate)
    except OSError:
        return False
    return info.f_files > 0 and info.f_favail == 0


def _message(destination: Path, what: str, reason: int | None, needed: int, file_bytes: int) -> str:
    free = _free(destination)
    limit = file_size_limit()
    if reason == errno.EFBIG or (reason is None and limit is not None and file_bytes > limit):
        return (
            f"{destination}: {what} is larger than this process's file-size limit ({describe_size(limit or 0)}, "
            f"`ulimit -f`); it needs about {describe_size(file_bytes)}: raise the limit and retry"
        )
    if reason in (errno.ENOSPC, None) and _out_of_inodes(destination):
        shown = f"{describe_size(free)} free, but" if free is not None else "the device has"
        return (
            f"{destination}: no free inodes left on the device while writing {what} ({shown} no room for "
            "another file); delete some files or write elsewhere"
        )
    quota = "disk quota exceeded" if reason == errno.EDQUOT else "no space left on the device"
    shown = f", {describe_size(free)} free" if free is not None else ""
    return (
        f"{destination}: {quota} while writing {what} (this write needs about {describe_size(needed)}{shown}); "
        "free some space or write elsewhere"
    )


@contextlib.contextmanager
def writing(destination: Path, what: str, *, needed: int, file_bytes: int | None = None) -> Iterator[None]:
    """Turn running out of space or file size inside the block into :class:`DiskFullError`.

    Parameters
    ----------
    destination : Path
        What the user asked to write (the index or model directory), named first.
    what : str
        The file being written, for the message (e.g. ``"vectors.npy"``).
    needed : int
        Bytes the whole write needs (an estimate is fine; it is shown as "about").
    file_bytes : int, optional
        Bytes of this one file (for the file-size limit); default ``needed``.

    Example
    -------
    >>> with writing(Path("idx"), "vectors.npy", needed=2**20):
    ...     raise OSError(errno.ENOSPC, "No space left on device", "/tmp/elsewhere")
    Traceback (most recent call last):
    ...
    qaindex.errors.DiskFullError: idx: no space left on the device while writing vectors.npy (this write needs ...
    """
    size = needed if file_bytes is None else file_bytes
    try:
        yield
    except DiskFullError:
        raise
    except OSError as exc:
        if exc.errno in FULL_ERRNOS:
            raise DiskFullError(_message(destination, what, exc.errno, needed, size)) from None
        if exc.errno is None and _looks_full(destination, size):  # numpy's tofile: no errno
            raise DiskFullError(_message(destination, what, None, needed, size)) from None
        raise
    except RuntimeError:  # FAISS: no errno; judge by the destination
        if _looks_full(destination, size):
            raise DiskFullError(_message(destination, what, None, needed, size)) from None
        raise


def _looks_full(destination: Path, size: int) -> bool:
    """For a failed write that carries no errno: is the destination short of space, inodes or file size?"""
    free = _free(destination)
    limit = file_size_limit()
    return (free is not None and free < size) or (limit is not None and size > limit) or _out_of_inodes(destination)


def estimate_bytes(*paths: os.PathLike[str] | str) -> int:
    """Total size of these files (missing ones count 0)."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += os.path.getsize(path)
    return total
