"""What qaindex may delete or overwrite in an index directory: only what it can prove it wrote.

An index directory is a user's folder too: it may sit next to (or be mistaken for) a web
app, a dataset or a backup. qaindex therefore writes into a directory only when it is

* missing or empty,
* an index: its ``manifest.json`` is a qaindex index manifest (``"format": "qaindex-index"``
  and an integer ``format_version``), or
* the leftover of a first build that was interrupted: no ``manifest.json`` and nothing but
  entries qaindex can prove it wrote (below).

Anything else is refused with :class:`IndexFormatError` before a lock file is created.

Inside an index, clean-up removes only

* the snapshot the previous manifest named (it is replaced by the new one),
* snapshot directories (``data-<stamp>-<pid>``) and unfinished snapshot directories
  (``.data-<stamp>-<pid>.tmp``) that hold qaindex's marker file ``.qaindex-snapshot``
  naming exactly that directory (written first, before any data; an unfinished directory
  killed before the marker was written is empty or holds only the marker), and
* temporary manifest files ``.manifest.json.tmp-<pid>-<8 hex digits>``.

A folder merely *named* like a snapshot, without the marker, is never removed. Snapshots
that a completed save made but never committed (a kill between the snapshot and the
manifest) are *orphans*: :func:`orphan_snapshots` lists them, ``qaindex gc`` and the next
save remove them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import IndexFormatError
from .atomic_files import create_file
from .locking import DEFAULT_LOCK_TIMEOUT, LOCK_NAME, check_timeout, index_lock

__all__ = [
    "INDEX_FORMAT",
    "MARKER_NAME",
    "SNAPSHOT_NAME",
    "GarbageReport",
    "check_writable",
    "collect_garbage",
    "current_snapshot",
    "existing_index",
    "is_owned_snapshot",
    "missing_parents",
    "orphan_snapshots",
    "orphan_summary",
    "remove_empty",
    "remove_garbage",
    "remove_snapshot_dir",
    "write_marker",
]

INDEX_FORMAT = "qaindex-index"
MARKER_NAME = ".qaindex-snapshot"
MARKER_FORMAT = "qaindex-snapshot"
SNAPSHOT_NAME = re.compile(r"data-[0-9]{8}T[0-9]{12}-[0-9]+")
_TMP_SNAPSHOT = re.compile(r"\.(?P<name>data-[0-9]{8}T[0-9]{12}-[0-9]+)\.tmp")
_TMP_MANIFEST = re.compile(r"\.manifest\.json\.tmp-[0-9]+-[0-9a-f]{8}")
_LOCK_CONTENT = re.compile(rb"[0-9]*\n?")


def write_marker(directory: Path, snapshot: str) -> None:
    """Write the marker that proves ``directory`` (a snapshot being written) is qaindex's.

    One small write into a new file, before any data: an interrupted snapshot directory
    is empty, or holds the marker.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "data-20250101T000000000000-1"; d.mkdir()
    >>> write_marker(d, d.name); is_owned_snapshot(d)
    True
    """
    body = json.dumps({"format": MARKER_FORMAT, "snapshot": snapshot}).encode("ascii") + b"\n"
    with create_file(directory / MARKER_NAME) as handle:
        handle.write(body)


def _marker_names(directory: Path) -> str | None:
    """The snapshot name the marker in ``directory`` records, or None without a valid marker."""
    marker = directory / MARKER_NAME
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > 4096:
            return None
        obj = json.loads(marker.read_bytes().decode("ascii"))
    except (OSError, ValueError):
        return None
    if not isinstance(obj, dict) or obj.get("format") != MARKER_FORMAT or not isinstance(obj.get("snapshot"), str):
        return None
    return obj["snapshot"]  # type: ignore[no-any-return]


def _real_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()


def is_owned_snapshot(path: Path) -> bool:
    """Whether ``path`` is a snapshot directory qaindex wrote: exact name and its marker.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "data-20240101T000000000000-1"; d.mkdir()
    >>> is_owned_snapshot(d)   # named like a snapshot, but no marker: not provably ours
    False
    """
    return SNAPSHOT_NAME.fullmatch(path.name) is not None and _real_dir(path) and _marker_names(path) == path.name


def _is_owned_debris(path: Path) -> bool:
    """An unfinished snapshot directory or a temporary manifest that qaindex left."""
    if _TMP_MANIFEST.fullmatch(path.name):
        return path.is_file() and not path.is_symlink()
    match = _TMP_SNAPSHOT.fullmatch(path.name)
    if match is None or not _real_dir(path):
        return False
    try:
        names = [p.name for p in path.iterdir()]
    except OSError:
        return False
    if not names or names == [MARKER_NAME]:  # killed before (or while) writing its marker
        return True
    return _marker_names(path) == match.group("name")


def _is_own_lock(path: Path) -> bool:
    try:
        return (
            path.is_file()
            and not path.is_symlink()
            and path.stat().st_size < 32
            and path.stat().st_nlink == 1  # another name for the file: someone else's
            and bool(_LOCK_CONTENT.fullmatch(path.read_bytes()))
        )
    except OSError:
        return False


def _manifest_kind(root: Path) -> tuple[str, Any]:
    """("absent", None), ("index", manifest dict) or ("foreign", why)."""
    mpath = root / "manifest.json"
    if not mpath.exists() and not mpath.is_symlink():
        return "absent", None
    if mpath.is_symlink() or not mpath.is_file():
        return "foreign", "it is not a regular file"
    try:
        obj = json.loads(mpath.read_bytes().decode("utf-8"))
    except OSError as exc:
        return "foreign", f"it cannot be read ({exc.strerror})"
    except (UnicodeDecodeError, ValueError):
        return "foreign", "it is not JSON"
    if not isinstance(obj, dict):
        return "foreign", "it is not a JSON object"
    version = obj.get("format_version")
    if obj.get("format") != INDEX_FORMAT or isinstance(version, bool) or not isinstance(version, int):
        return "foreign", f'its "format" is {obj.get("format")!r}, not {INDEX_FORMAT!r} with a format_version'
    return "index", obj


def check_writable(root: Path) -> dict[str, Any] | None:
    """Refuse to write into ``root`` unless it is missing, empty, an index or an interrupted first build.

    Returns
    -------
    dict or None
        The current manifest (parsed, not validated) when ``root`` is an index, else None.

    Raises
    ------
    IndexFormatError
        ``root`` is a file, or a directory that qaindex cannot prove is its own; the message
        names the entry that shows it.

    Example
    -------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "manifest.json").write_text('{"name": "my-app"}')
    >>> check_writable(d)
    Traceback (most recent call last):
    ...
    qaindex.errors.IndexFormatError: ...: not a qaindex index (its manifest.json is not a qaindex manifest: ...
    """
    if root.is_symlink() and not root.exists():
        raise IndexFormatError(f"{root}: a broken symbolic link; choose another --index path")
    if not root.exists():
        return None
    if not root.is_dir():
        raise IndexFormatError(f"{root}: exists and is not a directory; choose another --index path")
    kind, found = _manifest_kind(root)
    if kind == "index":
        return found  # type: ignore[no-any-return]
    advice = (
        "qaindex writes only into a new or empty directory or an existing qaindex index, and never deletes "
        "or overwrites files it did not write; choose another --index path"
    )
    if kind == "foreign":
        raise IndexFormatError(
            f"{root}: not a qaindex index (its manifest.json is not a qaindex manifest: {found}); {advice}"
        )
    try:
        entries = sorted(root.iterdir())
    except OSError as exc:
        raise IndexFormatError(f"{root}: cannot be listed ({exc.strerror}); choose another --index path") from None
    for entry in entries:
        if entry.name == LOCK_NAME and _is_own_lock(entry):
            continue
        if is_owned_snapshot(entry) or _is_owned_debris(entry):
            continue
        raise IndexFormatError(
            f"{root}: exists and is not a qaindex index (it holds {entry.name!r}, which qaindex did not write); "
            f"{advice}, or empty the directory"
        )
    return None


def current_snapshot(manifest: dict[str, Any] | None) -> str | None:
    """The snapshot a qaindex manifest names, when it is a well-formed snapshot name."""
    if manifest is None:
        return None
    name = manifest.get("snapshot")
    return name if isinstance(name, str) and SNAPSHOT_NAME.fullmatch(name) else None


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def orphan_snapshots(root: Path) -> list[tuple[str, int]]:
    """Complete snapshots of the index at ``root`` that its manifest does not name: ``[(name, bytes)]``.

    Only qaindex's own snapshots (marker present) are listed. A save in progress shows its
    new snapshot here for the moment between writing it and committing the manifest.

    Example
    -------
    >>> from qaindex import Ranker
    >>> _ = Ranker.build("examples/faq.jsonl").save("qaindex-index", overwrite=True)
    >>> orphan_snapshots(Path("qaindex-index"))
    []
    """
    kind, manifest = _manifest_kind(root)
    if kind == "foreign":
        return []
    keep = current_snapshot(manifest) if kind == "index" else None
    out = []
    with contextlib.suppress(OSError):
        for entry in sorted(root.iterdir()):
            if entry.name != keep and is_owned_snapshot(entry):
                out.append((entry.name, _tree_bytes(entry)))
    return out


def orphan_summary(root: Path) -> dict[str, Any]:
    """``{"snapshots": count, "bytes": total, "names": [...]}`` of :func:`orphan_snapshots`."""
    found = orphan_snapshots(root)
    return {"snapshots": len(found), "bytes": sum(size for _, size in found), "names": [name for name, _ in found]}


def remove_snapshot_dir(path: Path, snapshot: str | None = None) -> None:
    """Remove a snapshot directory qaindex wrote, its marker last.

    A removal killed half-way leaves a directory that still holds its marker, so the next
    clean-up can prove it is qaindex's and finish. ``snapshot`` (the name a qaindex manifest
    gave it) first writes the marker into a snapshot from a version that wrote none.
    A reader that memory-mapped its files keeps their data (POSIX unlink).
    """
    if snapshot is not None and _marker_names(path) is None:
        with contextlib.suppress(OSError):
            (path / MARKER_NAME).unlink(missing_ok=True)
            write_marker(path, snapshot)
    if SNAPSHOT_NAME.fullmatch(path.name):
        # under its unfinished name first: emptied and killed before the rmdir, it is still debris
        hidden = path.with_name(f".{path.name}.tmp")
        with contextlib.suppress(OSError):
            if not hidden.exists():
                os.replace(path, hidden)
                path = hidden
    marker = path / MARKER_NAME
    with contextlib.suppress(OSError):
        for child in list(path.iterdir()):
            if child.name == MARKER_NAME:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        marker.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.rmdir()


def remove_garbage(root: Path, *, keep: str | None, previous: str | None = None) -> list[tuple[str, int]]:
    """Remove what qaindex provably left in ``root`` (call only while holding its writer lock).

    Parameters
    ----------
    root : Path
        The index directory.
    keep : str or None
        The snapshot the manifest names now (never removed).
    previous : str, optional
        A snapshot a qaindex manifest named until this save (removed even if it was written
        by a qaindex version without markers).

    Returns
    -------
    list of (name, bytes)
        What was removed.
    """
    removed: list[tuple[str, int]] = []
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if entry.name == keep:
            continue
        is_previous = previous is not None and entry.name == previous and _real_dir(entry)
        if is_previous or is_owned_snapshot(entry) or _is_owned_debris(entry):
            size = _tree_bytes(entry) if _real_dir(entry) else entry.stat().st_size
            if _real_dir(entry):
                remove_snapshot_dir(entry, previous if is_previous else None)
            else:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
            removed.append((entry.name, size))
    return removed


@dataclass(frozen=True)
class GarbageReport:
    """What :func:`collect_garbage` removed: names and bytes."""

    removed: tuple[str, ...]
    bytes: int


def collect_garbage(
    path: str | os.PathLike[str], *, lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT
) -> GarbageReport:
    """Remove orphan snapshots and leftovers of interrupted saves from an index (``qaindex gc``).

    Holds the index's writer lock; removes only what qaindex provably wrote (see the module
    docstring), never the snapshot the manifest names.

    Parameters
    ----------
    path : path-like
        An index directory (a directory that is not a qaindex index is refused).
    lock_timeout : float or None, keyword-only
        Seconds to wait for another writer; None or ``math.inf`` waits as long as it takes.

    Returns
    -------
    GarbageReport

    Example
    -------
    >>> from qaindex import Ranker
    >>> _ = Ranker.build("examples/faq.jsonl").save("qaindex-index", overwrite=True)
    >>> collect_garbage("qaindex-index").removed
    ()
    """
    timeout = check_timeout(lock_timeout)
    root = Path(path)
    if not root.exists():
        raise IndexFormatError(f"{root}: no index here; nothing to clean up")
    manifest = check_writable(root)
    if manifest is None and not any(root.iterdir()):
        return GarbageReport((), 0)
    with index_lock(root, timeout=timeout):
        manifest = check_writable(root)  # again, under the lock
        removed = remove_garbage(root, keep=current_snapshot(manifest))
    return GarbageReport(tuple(name for name, _ in removed), sum(size for _, size in removed))


def remove_empty(created: list[Path]) -> None:
    """Remove directories a failed save created (deepest first), only while they are empty."""
    for directory in reversed(created):
        with contextlib.suppress(OSError):
            directory.rmdir()


def missing_parents(root: Path) -> list[Path]:
    """``root`` and its ancestors that do not exist yet, outermost first."""
    out: list[Path] = []
    current = root
    while not current.exists() and not current.is_symlink():
        out.append(current)
        if current.parent == current:
            break
        current = current.parent
    return list(reversed(out))


def existing_index(root: Path) -> str | None:
    """What ``root`` holds, for a refusal to replace it: "an index of N answers" (or "an index"
    when its manifest is unreadable), or None where there is no index to replace.

    ``qaindex build`` without ``--force`` and ``Ranker.save`` without ``overwrite=True`` (of an
    index the Ranker did not load) refuse with it.

    Example
    -------
    >>> from qaindex import Ranker
    >>> _ = Ranker.build("examples/faq.jsonl").save("qaindex-index", overwrite=True)
    >>> existing_index(Path("qaindex-index")), existing_index(Path("nothing-here"))
    ('an index of 289 answers', None)
    """
    manifest = root / "manifest.json"
    if not manifest.exists():
        return None
    try:
        count = json.loads(manifest.read_text(encoding="utf-8")).get("count")
    except (OSError, ValueError, AttributeError):
        count = None
    return f"an index of {count} answers" if isinstance(count, int) and not isinstance(count, bool) else "an index"
