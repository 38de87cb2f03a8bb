"""Atomic, self-describing files on disk: checksums, JSON manifests, directory publishing.

Nothing here uses pickle. A file is written to a sibling temporary path and renamed into
place with :func:`os.replace`, so readers see either the old file or the new one, never a
half-written one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import QAIndexError

__all__ = [
    "file_entry",
    "fsync_tree",
    "read_json_object",
    "sha256_file",
    "temporary_sibling",
    "verify_files",
    "write_bytes_atomic",
    "write_json_atomic",
]

_CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"")
    >>> sha256_file(p)[:8]
    'e3b0c442'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest entry of a file: ``{"bytes": size, "sha256": hex}``."""
    return {"bytes": os.path.getsize(path), "sha256": sha256_file(path)}


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be opened
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a sibling temporary file and :func:`os.replace`."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    _fsync_dir(target.parent)


def write_json_atomic(path: str | os.PathLike[str], obj: Mapping[str, Any]) -> None:
    """Write a JSON object (UTF-8, indented, sorted keys) atomically."""
    text = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    write_bytes_atomic(path, text.encode("utf-8"))


def read_json_object(path: Path, *, error: type[QAIndexError], what: str) -> dict[str, Any]:
    """Read a JSON object from ``path``, raising ``error`` with a message that says what to do.

    Parameters
    ----------
    path : Path
        The JSON file.
    error : subclass of QAIndexError
        Raised for a missing, unreadable or malformed file.
    what : str
        What the file belongs to, e.g. ``"index"``, used in messages.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such file; is {path.parent} a qaindex {what}?") from None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: not valid JSON ({exc}); the {what} is corrupted, rebuild it") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: expected a JSON object; the {what} is corrupted, rebuild it")
    return obj


def verify_files(
    directory: Path,
    files: Mapping[str, Any],
    *,
    error: type[QAIndexError],
    what: str,
    hash_limit: int | None = None,
) -> None:
    """Check that every file listed in a manifest exists with the recorded size and checksum.

    Parameters
    ----------
    directory : Path
        Where the listed files live (names are relative to it).
    files : mapping
        ``{name: {"bytes": int, "sha256": str}}`` as written by :func:`file_entry`.
    error, what
        The error type to raise, and what the directory is (for the message).
    hash_limit : int, optional
        Hash only files up to this many bytes (sizes are always checked); None hashes all.
    """
    for name, entry in files.items():
        path = directory / name
        if not path.is_file():
            raise error(f"{path}: missing; the {what} is incomplete, rebuild it")
        if not isinstance(entry, Mapping):
            raise error(f"{path}: the manifest entry is invalid; the {what} is corrupted, rebuild it")
        size = path.stat().st_size
        expected = entry.get("bytes")
        if size != expected:
            raise error(f"{path}: has {size} bytes, the manifest says {expected}; the {what} is corrupted, rebuild it")
        if hash_limit is None or size <= hash_limit:
            if sha256_file(path) != entry.get("sha256"):
                raise error(f"{path}: checksum does not match the manifest; the {what} is corrupted, rebuild it")


def fsync_tree(root: Path) -> None:
    """fsync every file and directory below ``root`` (so a rename publishes durable data)."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            with open(os.path.join(dirpath, name), "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(Path(dirpath))


@contextlib.contextmanager
def temporary_sibling(target: Path, *, prefix: str = "") -> Iterator[Path]:
    """A fresh directory beside ``target``, removed on error unless it was renamed away.

    Example
    -------
    >>> import tempfile, pathlib
    >>> base = pathlib.Path(tempfile.mkdtemp())
    >>> with temporary_sibling(base / "out") as tmp:
    ...     tmp.is_dir()
    True
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{prefix}{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
