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
import re
import secrets
import shutil
import tokenize
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, BinaryIO

import numpy as np

from ..errors import QAIndexError

__all__ = [
    "check_file_entries",
    "check_format",
    "confined_path",
    "create_file",
    "file_entry",
    "fsync_tree",
    "read_array",
    "read_json_object",
    "remove_debris",
    "save_array",
    "sha256_file",
    "temporary_sibling",
    "verify_files",
    "write_bytes_atomic",
    "write_json_atomic",
]

_CHUNK = 1 << 20
_HASH_THREADS = 4
# a new file only: never one that exists, never through a link (O_EXCL refuses both)
_CREATE = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def create_file(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a new file for writing; it must not exist (not even as a link), so nothing else is overwritten.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"
    >>> with create_file(p) as handle:
    ...     _ = handle.write(b"data")
    >>> create_file(p)
    Traceback (most recent call last):
    ...
    FileExistsError: [Errno 17] File exists: ...
    """
    return open(os.open(path, _CREATE, 0o644), "wb")


class _Chunks:
    """Not a real file to numpy, which then writes through ``write`` (whose failures carry an errno)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.write = handle.write


def save_array(path: str | os.PathLike[str], array: np.ndarray) -> None:
    """Write ``array`` as a new ``.npy`` file (no pickle), in blocks, through :func:`create_file`.

    Not :func:`numpy.save`: its ``tofile`` reports a failed write (disk full, ``ulimit -f``) as
    an ``OSError`` without an errno, which cannot be told from any other failure.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.npy"
    >>> save_array(p, np.arange(3)); np.load(p).tolist()
    [0, 1, 2]
    """
    with create_file(path) as handle:
        np.lib.format.write_array(_Chunks(handle), np.asarray(array), allow_pickle=False)


# What numpy's ``.npy`` reader raises on a damaged file besides OSError: its header parser runs
# tokenize and ast (TokenError, SyntaxError, RecursionError, MemoryError), then checks keys,
# dtype and shape (ValueError, TypeError, KeyError, OverflowError); a short file gives EOFError.
_NPY_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    SyntaxError,
    tokenize.TokenError,
    RecursionError,
    MemoryError,
    OverflowError,
    EOFError,
)


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


_SHA256 = re.compile(r"[0-9a-f]{64}")


def confined_path(directory: Path, name: object, *, field: str, source: Path, error: type[QAIndexError]) -> Path:
    """``directory / name``, refused unless ``name`` is a plain relative path inside ``directory``.

    Manifests name the files they describe; a crafted or corrupted manifest must not make
    qaindex read, hash or write anything outside its own directory.

    Parameters
    ----------
    directory : Path
        The directory the name is relative to.
    name : object
        The value read from the manifest.
    field : str
        The manifest field, for the message (e.g. ``'files["vectors.npy"]'``).
    source : Path
        The manifest file, for the message.
    error : subclass of QAIndexError
        Raised when the name is not a string, is empty, absolute, has ``..`` (or ``.``)
        components or backslashes, or resolves outside ``directory`` (a symlink pointing out).

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> confined_path(d, "a/b.txt", field="files", source=d / "manifest.json", error=QAIndexError) == d / "a/b.txt"
    True
    >>> confined_path(d, "../x", field="files", source=d / "m.json", error=QAIndexError)
    Traceback (most recent call last):
    ...
    qaindex.errors.QAIndexError: ...: field files is '../x', which is not a plain relative path inside ...
    """
    if not isinstance(name, str):
        raise error(f"{source}: field {field} must be a file name (a string), got {name!r}; the manifest is corrupted")
    parts = PurePosixPath(name).parts
    if (
        not name
        or "\\" in name
        or "\0" in name
        or PurePosixPath(name).is_absolute()
        or PureWindowsPath(name).drive
        or any(part in ("..", ".") for part in name.split("/"))
        or not parts
    ):
        raise error(
            f"{source}: field {field} is {name!r}, which is not a plain relative path inside {directory}; "
            "the manifest is corrupted or crafted, rebuild it from a trusted source"
        )
    path = directory / name
    try:
        inside = path.resolve().is_relative_to(directory.resolve())
    except (OSError, RuntimeError):  # symlink loops
        inside = False
    if not inside:
        raise error(
            f"{source}: field {field} is {name!r}, which leads outside {directory} (through a symlink); "
            "the manifest is corrupted or crafted, rebuild it from a trusted source"
        )
    return path


def check_file_entries(files: object, *, field: str, source: Path, error: type[QAIndexError]) -> dict[str, Any]:
    """Validate a manifest's ``files`` table: ``{name: {"bytes": int >= 0, "sha256": 64 hex}}``."""
    if not isinstance(files, dict) or not files:
        raise error(f'{source}: field "{field}" must be a non-empty object of files, got {files!r}; rebuild it')
    for name, entry in files.items():
        where = f'"{field}.{name}"'
        if not isinstance(entry, dict):
            raise error(f"{source}: field {where} must be an object with bytes and sha256, got {entry!r}; rebuild it")
        size = entry.get("bytes")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise error(f"{source}: field {where}.bytes must be a non-negative integer, got {size!r}; rebuild it")
        digest = entry.get("sha256")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise error(f"{source}: field {where}.sha256 must be 64 lowercase hex digits, got {digest!r}; rebuild it")
    return files


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_debris(directory: Path, patterns: Iterable[str], *, only_dead: bool = False) -> list[str]:
    """Remove leftovers of interrupted writes in ``directory`` whose names match ``patterns``.

    Parameters
    ----------
    directory : Path
    patterns : iterable of str
        Regular expressions matched against whole names; a group named ``pid`` gives the
        writing process.
    only_dead : bool, keyword-only
        Remove only entries whose writer (the ``pid`` group) is no longer running, for
        directories that no lock protects.

    Returns
    -------
    list of str
        The names removed.
    """
    compiled = [re.compile(p) for p in patterns]
    removed: list[str] = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return removed
    for entry in entries:
        for pattern in compiled:
            match = pattern.fullmatch(entry.name)
            if match is None:
                continue
            if only_dead and "pid" in pattern.groupindex and _pid_alive(int(match.group("pid"))):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
            removed.append(entry.name)
            break
    return removed


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
        with create_file(tmp) as handle:
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


def read_array(path: Path, *, mmap: bool = False) -> np.ndarray:
    """Read an ``.npy`` file, never with pickle; any damage is a ``ValueError`` saying what is wrong.

    A missing or unreadable file stays an :class:`OSError`; every other failure of numpy's
    reader (a damaged header, a shape the data does not hold) becomes one ``ValueError``, so a
    caller turns both into its own error naming the file.

    Example
    -------
    >>> read_array(Path("no/such.npy"))
    Traceback (most recent call last):
    ...
    FileNotFoundError: [Errno 2] No such file or directory: 'no/such.npy'
    """
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)  # type: ignore[no-any-return]
    except OSError:
        raise
    except _NPY_ERRORS as exc:
        raise ValueError(f"not a valid .npy file: {type(exc).__name__}: {exc}") from None


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
    except RecursionError:
        raise error(f"{path}: JSON nested too deeply to read; the {what} is corrupted, rebuild it") from None
    if not isinstance(obj, dict):
        raise error(f"{path}: expected a JSON object; the {what} is corrupted, rebuild it")
    return obj


def check_format(
    manifest: Mapping[str, Any],
    path: Path,
    *,
    name: str,
    version: int,
    what: str,
    remedy: str,
    error: type[QAIndexError],
) -> None:
    """Refuse a manifest whose ``format`` is not ``name`` or whose ``format_version`` is not ``version``.

    Parameters
    ----------
    manifest : mapping
        The parsed ``manifest.json``.
    path : Path
        The manifest file (for messages).
    name, version
        The expected ``format`` and ``format_version``.
    what : str
        ``"index"`` or ``"model"``.
    remedy : str
        What to do about an unsupported version, e.g. ``"rebuild the index"``.
    error : subclass of QAIndexError

    Example
    -------
    >>> check_format({"format": "x", "format_version": 1}, Path("m.json"), name="x", version=1,
    ...              what="index", remedy="rebuild it", error=QAIndexError)
    """
    if manifest.get("format") != name:
        raise error(f'{path}: not a qaindex {what} (field "format" is {manifest.get("format")!r}, expected {name!r})')
    found = manifest.get("format_version")
    if found != version:
        raise error(
            f"{path}: {what} format version {found!r} is not supported by this qaindex (it reads "
            f"version {version}); upgrade qaindex or {remedy}"
        )


def verify_files(
    directory: Path,
    files: Mapping[str, Any],
    *,
    error: type[QAIndexError],
    what: str,
    hash_limit: int | None = None,
    unhashed: Iterable[str] = (),
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
        Hash only files up to this many bytes (sizes are always checked); None (the
        default, and what every load uses) hashes all.
    unhashed : iterable of str
        Names whose size alone is checked here: files verified chunk by chunk as they are
        read (:mod:`qaindex.store.chunk_checks`).
    """
    skip = set(unhashed)
    todo: list[tuple[Path, Any]] = []
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
        if name not in skip and (hash_limit is None or size <= hash_limit):
            todo.append((path, entry.get("sha256")))
    # hashlib releases the GIL while it hashes: several files at once use several cores
    workers = min(_HASH_THREADS, os.cpu_count() or 1, len(todo))
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            digests = list(pool.map(sha256_file, [path for path, _ in todo]))
    else:
        digests = [sha256_file(path) for path, _ in todo]
    for (path, want), got in zip(todo, digests, strict=True):
        if got != want:
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
