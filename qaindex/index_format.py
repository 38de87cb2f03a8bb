"""The index directory format: the manifest, snapshots, and reading and writing them.

Index directory layout::

    INDEX/
      manifest.json            the commit point: format, version, counts, dimension,
                               geometry, FAISS kind and parameters, over-fetch factor,
                               the current snapshot, and size + SHA-256 of each of its files
      data-<stamp>/            one complete snapshot
        records.jsonl          the answers: {"id", "answer", "questions", "metadata"} per line
        records.offsets.npy    int64 byte offsets of each line (n + 1), for random access
        vectors.npy            float32 (n, dim) answer vectors, for the exact rerank
        coarse.faiss           the FAISS index (faiss.write_index)
        model/                 a copy of the model directory, so the index is self-contained

A save writes a new snapshot beside the old one, then replaces ``manifest.json`` atomically
(:func:`os.replace`), then deletes the old snapshot: an interrupted save leaves the previous
index loadable. Loading memory-maps the vectors, the records and (where FAISS can) the index.
"""

from __future__ import annotations

import mmap
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .errors import IndexFormatError
from .model import Model
from .records import RecordStore
from .storage import file_entry, fsync_tree, read_json_object
from .vector_index import CoarseIndex

__all__ = [
    "INDEX_FORMAT",
    "INDEX_FORMAT_VERSION",
    "open_records",
    "open_vectors",
    "read_index_manifest",
    "remove_old_snapshots",
    "write_snapshot",
]

INDEX_FORMAT = "qaindex-index"
INDEX_FORMAT_VERSION = 1


def read_index_manifest(root: Path) -> dict[str, Any]:
    """Read and validate ``root/manifest.json`` (raises :class:`IndexFormatError`)."""
    if not root.exists():
        raise IndexFormatError(f"{root}: no index here; build one with `qaindex build CORPUS.jsonl --index {root}`")
    if not root.is_dir():
        raise IndexFormatError(f"{root}: is not an index directory")
    mpath = root / "manifest.json"
    if not mpath.is_file():
        raise IndexFormatError(
            f"{root}: no manifest.json, so this is not a qaindex index (or its build was interrupted "
            f"before the first save); build one with `qaindex build CORPUS.jsonl --index {root}`"
        )
    manifest = read_json_object(mpath, error=IndexFormatError, what="index")
    if manifest.get("format") != INDEX_FORMAT:
        raise IndexFormatError(
            f'{mpath}: not a qaindex index (field "format" is {manifest.get("format")!r}, expected {INDEX_FORMAT!r})'
        )
    version = manifest.get("format_version")
    if version != INDEX_FORMAT_VERSION:
        raise IndexFormatError(
            f"{mpath}: index format version {version!r} is not supported by this qaindex (it reads "
            f"version {INDEX_FORMAT_VERSION}); upgrade qaindex or rebuild the index"
        )
    for key, kind in (("snapshot", str), ("count", int), ("files", dict), ("coarse", dict), ("overfetch", int)):
        if not isinstance(manifest.get(key), kind):
            raise IndexFormatError(f'{mpath}: field "{key}" is missing or invalid; the index is corrupted, rebuild it')
    if not (root / manifest["snapshot"]).is_dir():
        raise IndexFormatError(f"{root / manifest['snapshot']}: missing; the index is corrupted, rebuild it")
    return manifest


def write_snapshot(
    root: Path, records: RecordStore, vectors: np.ndarray, coarse: CoarseIndex, model: Model
) -> tuple[str, dict[str, Any]]:
    """Write a complete new snapshot directory under ``root`` (not yet committed).

    Returns
    -------
    name : str
        The snapshot's directory name, for the manifest's ``snapshot`` field.
    files : dict
        The manifest's ``files`` table: ``{relative name: {"bytes", "sha256"}}``.
    """
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    snap_name = f"data-{stamp}-{os.getpid()}"
    snap = root / f".{snap_name}.tmp"
    snap.mkdir()
    try:
        with open(snap / "records.jsonl", "wb") as handle:
            handle.write(records.content())
        np.save(snap / "records.offsets.npy", np.asarray(records.offsets, dtype=np.int64), allow_pickle=False)
        np.save(snap / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
        coarse.save(snap / "coarse.faiss")
        model.copy_to(snap / "model")
        files = {p.relative_to(snap).as_posix(): file_entry(p) for p in sorted(snap.rglob("*")) if p.is_file()}
        fsync_tree(snap)
        os.replace(snap, root / snap_name)
    except BaseException:
        shutil.rmtree(snap, ignore_errors=True)
        raise
    return snap_name, files


def remove_old_snapshots(root: Path, keep: str) -> None:
    """Remove every snapshot but ``keep``, and leftovers of interrupted saves."""
    for entry in root.iterdir():
        if entry.name != keep and (entry.name.startswith("data-") or entry.name.startswith(".data-")):
            # a reader that memory-mapped the old snapshot keeps its data (POSIX unlink)
            shutil.rmtree(entry, ignore_errors=True)


def open_vectors(snap: Path, count: int, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """Memory-map ``vectors.npy`` and read ``records.offsets.npy``, checking their shapes."""
    try:
        vectors = np.load(snap / "vectors.npy", mmap_mode="r", allow_pickle=False)
        offsets = np.load(snap / "records.offsets.npy", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{snap}: cannot read the stored arrays ({exc}); rebuild the index") from None
    if vectors.shape != (count, dimension) or offsets.shape != (count + 1,):
        raise IndexFormatError(
            f"{snap}: stored arrays do not match the manifest ({count} answers of dimension "
            f"{dimension}); rebuild the index"
        )
    return vectors, offsets


def open_records(snap: Path, offsets: np.ndarray) -> RecordStore:
    """Memory-map ``records.jsonl`` as a :class:`RecordStore` with these offsets."""
    with open(snap / "records.jsonl", "rb") as handle:
        data: bytes | mmap.mmap = (
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(handle.fileno()).st_size else b""
        )
    if len(data) != int(offsets[-1]):
        raise IndexFormatError(f"{snap / 'records.jsonl'}: size does not match its offsets; rebuild the index")
    return RecordStore(data, offsets)
