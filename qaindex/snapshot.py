"""An index snapshot from a Ranker's pieces and back: opening one, writing one, and what a
Ranker remembers of the directories it saved to.

The pieces are the runtime's objects (the :class:`~qaindex.Model`, the records, the vectors,
the coarse, lexical and key indexes, the reranker); the files they are written to and read
from, and the manifest that commits them, are :mod:`qaindex.store`'s
(:mod:`~qaindex.store.index_format` has the directory layout). A save writes a new snapshot
beside the old one, commits ``manifest.json`` atomically, then deletes the old snapshot.

- :func:`open_snapshot`: the snapshot a manifest names, its files verified and opened into a
  :class:`Snapshot` (:func:`read_consistently` retries when a concurrent save replaced it);
- :func:`write_snapshot`, :func:`new_manifest`, :func:`commit_manifest`: a new snapshot
  written, described and committed;
- :class:`SavedState`: which snapshot each index path held when the Ranker last loaded or
  saved it (a save refuses to replace a snapshot some other writer committed since), which
  snapshot the Ranker serves (for ``verify``), and where the model and reranker files are
  copied from (a save deletes older snapshots, which may be where they were loaded from);
  :meth:`SavedState.save_locked` is the save itself, run under the index's writer lock
  (:mod:`qaindex.store.locking`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .errors import IndexChangedError, IndexFormatError, ModelFormatError, QAIndexError
from .key_index import DIRECTORY as KEYS_DIRECTORY
from .key_index import KeyIndex, load_keys
from .key_index import check_entry as check_keys_entry
from .model import Model
from .reranker import Reranker, index_entry, stored_reranker
from .store.atomic_files import create_file, file_entry, fsync_tree, save_array, verify_files, write_json_atomic
from .store.chunk_checks import (
    CHUNK_BYTES,
    LAZY_FILES,
    CheckedBytes,
    CheckedRows,
    ChunkedFile,
    lazy_digests_name,
    lazy_files,
    verify_in_background,
    write_chunk_digests,
)
from .store.diskspace import writing
from .store.index_checks import check_content
from .store.index_format import (
    INDEX_FORMAT_VERSION,
    check_model_copy,
    manifest_checksum,
    open_records,
    open_vectors,
    read_index_manifest,
)
from .store.locking import index_lock
from .store.model_format import copy_model_files
from .store.ownership import (
    INDEX_FORMAT,
    MARKER_NAME,
    check_writable,
    current_snapshot,
    existing_index,
    missing_parents,
    remove_empty,
    remove_garbage,
    remove_snapshot_dir,
    write_marker,
)
from .store.records import RecordStore
from .text.lexical import DIRECTORY as LEXICAL_DIRECTORY
from .text.lexical import LexicalIndex
from .text.lexical import check_entry as check_lexical_entry
from .vector_index import CoarseIndex
from .version import __version__

__all__ = [
    "SavedState",
    "Snapshot",
    "commit_manifest",
    "new_manifest",
    "now",
    "open_snapshot",
    "read_consistently",
    "write_snapshot",
]

_T = TypeVar("_T")


# ------------------------------------------------------------------- a snapshot, written


def write_snapshot(
    root: Path,
    records: RecordStore,
    vectors: np.ndarray,
    coarse: CoarseIndex,
    model: Model,
    *,
    model_source: Path | None = None,
    reranker: tuple[Path, dict[str, Any]] | None = None,
    lexical: LexicalIndex | None = None,
    keys: KeyIndex | None = None,
) -> tuple[str, dict[str, Any]]:
    """Write a complete new snapshot directory under ``root`` (not yet committed).

    The model's files are copied from ``model_source`` (default: the model's directory);
    a ``reranker`` (its directory and manifest) is copied into ``reranker/``; a ``lexical``
    index (:mod:`qaindex.text.lexical`) is written into ``lexical/``, ``keys``
    (:mod:`qaindex.key_index`) into ``keys/``.

    Returns
    -------
    name : str
        The snapshot's directory name, for the manifest's ``snapshot`` field.
    files : dict
        The manifest's ``files`` table: ``{relative name: {"bytes", "sha256"}}``.
    """
    # the checks a load applies, before anything is written (qaindex.store.index_checks)
    check_content(
        root,
        model=model,
        vectors=vectors,
        records=records,
        lexical=lexical,
        scan=True,
        blame=model.directory,
        keys=keys,
    )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    snap_name = f"data-{stamp}-{os.getpid()}"
    count = len(records)
    with_digests = 1 + 32 / CHUNK_BYTES  # the large files with their chunk digests (qaindex.store.chunk_checks)
    sizes = {
        "records.jsonl": int(int(records.offsets[-1]) * with_digests) + 32,
        "records.offsets.npy": 8 * (count + 1) + 128,
        "vectors.npy": int(np.asarray(vectors).nbytes * with_digests) + 160,
        "coarse.faiss": int(np.asarray(vectors).nbytes) + 4096,  # an estimate: flat is the vectors again
        "model": _listed_bytes(model.manifest),
        "reranker": _listed_bytes(reranker[1]) if reranker is not None else 0,
        "lexical": int(lexical.stored_bytes * with_digests) if lexical is not None else 0,
        "keys": 0 if keys is None else 2 * int(np.asarray(keys.vectors).nbytes) + 4096,
    }
    needed = sum(sizes.values())

    def step(name: str) -> contextlib.AbstractContextManager[None]:
        return writing(root, f"{name} of a new snapshot", needed=needed, file_bytes=sizes[name])

    snap = root / f".{snap_name}.tmp"
    with writing(root, "a new snapshot", needed=needed):
        snap.mkdir()
    try:
        with writing(root, "a new snapshot", needed=needed):
            write_marker(snap, snap_name)  # first: proves the directory is qaindex's (qaindex.store.ownership)
        with step("records.jsonl"), create_file(snap / "records.jsonl") as handle:
            records.write_to(handle)  # in blocks: a memory-mapped store is never copied whole
        with step("records.offsets.npy"):
            save_array(snap / "records.offsets.npy", np.asarray(records.offsets, dtype=np.int64))
        with step("vectors.npy"):
            save_array(snap / "vectors.npy", np.ascontiguousarray(vectors, dtype=np.float32))
        with step("coarse.faiss"):
            coarse.save(snap / "coarse.faiss")
        with step("model"):
            copy_model_files(model_source or model.directory, model.manifest, snap / "model")
        if reranker is not None:
            with step("reranker"):
                copy_model_files(reranker[0], reranker[1], snap / "reranker")
        if lexical is not None:
            with step("lexical"):
                lexical.save(snap / LEXICAL_DIRECTORY)
        if keys is not None:
            with step("keys"):
                keys.save(snap / KEYS_DIRECTORY)
        for name in LAZY_FILES:  # a load verifies these as it reads them (qaindex.store.chunk_checks)
            if (snap / name).is_file():
                digests = 32 * -(-(snap / name).stat().st_size // CHUNK_BYTES)
                with writing(root, f"the chunk digests of {name} of a new snapshot", needed=needed, file_bytes=digests):
                    write_chunk_digests(snap / name)
        files = {
            p.relative_to(snap).as_posix(): file_entry(p)
            for p in sorted(snap.rglob("*"))
            if p.is_file() and p.name != MARKER_NAME
        }
        for name in LAZY_FILES:
            if name in files:
                files[name]["chunk_bytes"] = CHUNK_BYTES
        with writing(root, "a new snapshot", needed=needed):
            fsync_tree(snap)
            os.replace(snap, root / snap_name)
    except BaseException:
        remove_snapshot_dir(snap)
        raise
    return snap_name, files


def _listed_bytes(manifest: dict[str, Any]) -> int:
    files = manifest.get("files", {})
    return 4096 + sum(int(e.get("bytes", 0)) for e in files.values() if isinstance(e, dict))


def new_manifest(
    *,
    snapshot: str,
    files: dict[str, Any],
    count: int,
    model: Model,
    coarse: CoarseIndex,
    requested: str,
    overfetch: int,
    created: str,
    reranker: Reranker | None = None,
    lexical: bool = False,
    keys: KeyIndex | None = None,
) -> dict[str, Any]:
    """The manifest of a snapshot written by :func:`write_snapshot`, with its checksum.

    The fields are the ones :func:`read_index_manifest` validates: format and version,
    counts, the model's dimension and geometry name, the coarse index (kind, parameters,
    the kind asked for, the recall tuning), the over-fetch factor, the model copy, the
    reranker copy, the lexical index and the keys when stored, and the ``files`` table.
    """
    manifest: dict[str, Any] = {
        "format": INDEX_FORMAT,
        "format_version": INDEX_FORMAT_VERSION,
        "qaindex_version": __version__,
        "created": created,
        "updated": now(),
        "snapshot": snapshot,
        "count": count,
        "dimension": model.dimension,
        "geometry": model.geometry,
        "coarse": {
            "kind": coarse.kind,
            "params": coarse.params,
            "requested": requested,
            **({"tuning": coarse.tuning} if coarse.tuning is not None else {}),
        },
        "overfetch": overfetch,
        "model": {
            "name": model.name,
            "directory": "model",
            "manifest_sha256": files["model/manifest.json"]["sha256"],
        },
        "files": files,
    }
    if reranker is not None:
        manifest["reranker"] = index_entry(reranker, files)
    if lexical:
        manifest["lexical"] = {"kind": "bm25", "directory": LEXICAL_DIRECTORY}
    if keys is not None:
        manifest["keys"] = keys.entry()
    manifest["checksum"] = manifest_checksum(manifest)
    return manifest


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


def commit_manifest(root: Path, manifest: dict[str, Any], model: Model, model_source: Path) -> None:
    """Make a written snapshot the index's: replace ``manifest.json`` atomically.

    The snapshot's model copy must still match the loaded model (files changed on disk
    since are a :class:`ModelFormatError`); on any failure the new snapshot is removed and
    the previous index stays as it was.
    """
    snap_name, files = manifest["snapshot"], manifest["files"]
    copied = root / snap_name / "model" / "manifest.json"
    try:
        check_model_copy(copied, files, model.manifest)
        if _canonical(json.loads(copied.read_bytes())) != _canonical(model.manifest):  # its fields too
            raise IndexFormatError(f"{copied}: not the loaded model's manifest")
    except (IndexFormatError, OSError, ValueError):
        remove_snapshot_dir(root / snap_name)
        raise ModelFormatError(
            f"{model_source}: the model files changed on disk since the model was loaded "
            "(they no longer match its manifest); load the model again"
        ) from None
    try:
        with writing(root, "manifest.json", needed=4096):
            write_json_atomic(root / "manifest.json", manifest)
    except BaseException:
        remove_snapshot_dir(root / snap_name)
        raise


def now() -> str:
    """The current UTC time as the manifests write it (ISO 8601, seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------- a snapshot, opened


@dataclass
class Snapshot:
    """The pieces of an opened snapshot, checked against each other and the manifest."""

    model: Model
    records: RecordStore
    vectors: np.ndarray
    coarse: CoarseIndex
    reranker: Reranker | None
    lexical: LexicalIndex | None
    keys: KeyIndex | None = None
    vector_checks: ChunkedFile | None = None  # vectors.npy verified as its rows are read
    file_checks: tuple[ChunkedFile, ...] = ()  # the other files verified as they are read

    def pieces(self) -> tuple[Model, RecordStore, np.ndarray, CoarseIndex]:
        """The Ranker's positional arguments."""
        return self.model, self.records, self.vectors, self.coarse

    def options(self, root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        """The Ranker's keyword arguments, from the snapshot and its manifest."""
        coarse = manifest["coarse"]
        return {
            "overfetch": manifest["overfetch"],
            "kind_requested": coarse.get("requested", coarse["kind"]),
            "path": root,
            "created": manifest.get("created"),
            "snapshot": manifest["snapshot"],
            "reranker": self.reranker,
            "lexical": self.lexical,
            "keys": self.keys,
            "vector_checks": self.vector_checks,
            "file_checks": self.file_checks,
        }


def read_consistently(root: Path, open_: Callable[[dict[str, Any]], _T]) -> _T:
    """``open_(manifest)`` for the manifest at ``root``, again (up to three times) when a
    concurrent save replaced the snapshot between reading the manifest and opening its files."""
    for attempt in range(3):
        manifest = read_index_manifest(root)
        try:
            return open_(manifest)
        except (IndexFormatError, ModelFormatError, FileNotFoundError):
            if attempt == 2 or read_index_manifest(root)["snapshot"] == manifest["snapshot"]:
                raise
    raise AssertionError("unreachable")


def open_snapshot(
    root: Path, manifest: dict[str, Any], *, device: str, threads: int | None, verify: bool | str
) -> Snapshot:
    """Open the snapshot ``manifest`` names: verify its files, load the model copy, memory-map
    the vectors and records, read the FAISS, reranker and lexical indexes.

    ``verify``: True hashes every file but ``vectors.npy`` when the snapshot stores its chunk
    digests (:mod:`qaindex.store.chunk_checks`: its rows are verified as they are read, and by
    a background thread), and scans the content a checksum cannot vouch for as it is read;
    ``"lazy"`` is True without the background thread; ``"full"`` hashes every file and scans
    all content now; False checks neither.

    Raises :class:`IndexFormatError` (or :class:`ModelFormatError`) naming the file and
    field when anything disagrees with the manifest.
    """
    snap = root / manifest["snapshot"]
    as_read = verify in (True, "lazy")  # files with chunk digests verified as their rows are read
    lazy = lazy_files(snap, manifest["files"], root / "manifest.json") if as_read else set()
    if verify:
        verify_files(snap, manifest["files"], error=IndexFormatError, what="index", unhashed=lazy)
    # the model copy's files were verified with the index's: do not hash them twice
    model = Model.load(snap / "model", device=device, threads=threads, verify=False)
    mpath = root / "manifest.json"
    check_model_copy(mpath, manifest["files"], model.manifest)
    if model.dimension != manifest["dimension"] or model.geometry != manifest["geometry"]:
        raise IndexFormatError(
            f'{mpath}: fields "dimension" and "geometry" ({manifest["dimension"]}, {manifest["geometry"]}) '
            f"do not match the model copy ({model.dimension}, {model.geometry}); the index is corrupted, "
            "rebuild it"
        )
    count = manifest["count"]
    vectors, offsets = open_vectors(snap, count, model.dimension)
    records = open_records(snap, offsets)
    coarse_info = manifest["coarse"]
    coarse = CoarseIndex.load(
        snap / "coarse.faiss",
        geometry=model.space,
        dimension=model.dimension,
        kind=coarse_info["kind"],
        params=coarse_info.get("params"),
        count=count,
        device=device,
        tuning=coarse_info.get("tuning"),
    )
    lexical = None
    if manifest.get("lexical") is not None:
        check_lexical_entry(manifest["lexical"], manifest["files"], mpath)
        lexical = LexicalIndex.load(snap / LEXICAL_DIRECTORY, count, listed=_listed(manifest, LEXICAL_DIRECTORY))
    keys = None
    if manifest.get("keys") is not None:  # absent in indexes saved without keys: they load unchanged
        key_count = check_keys_entry(manifest["keys"], manifest["files"], mpath)
        keys = load_keys(
            snap / KEYS_DIRECTORY,
            manifest["keys"],
            key_count,
            count,
            model.dimension,
            listed=_listed(manifest, f"{KEYS_DIRECTORY}/{LEXICAL_DIRECTORY}"),
        )
    # what the checksums cannot vouch for, as a build and a save check it (qaindex.store.index_checks);
    # verify scans the content too; a lazy verification scans each chunk of vectors as it verifies it
    # and each record as it decodes it (the ids when they are first needed: RecordStore.ids)
    scan = verify == "full" or (as_read and not lazy)
    check_content(
        snap, mpath=mpath, model=model, vectors=vectors, records=records, lexical=lexical, scan=scan, keys=keys
    )
    reranker = stored_reranker(snap, manifest, device=device, threads=threads)
    checks = _lazy_checks(snap, manifest["files"], lazy, vectors, records, lexical, ball=model.space.ball)
    if verify is True:
        verify_in_background([checks[name] for name in LAZY_FILES if name in checks])
    others = tuple(c for name, c in checks.items() if name != "vectors.npy")
    return Snapshot(model, records, vectors, coarse, reranker, lexical, keys, checks.get("vectors.npy"), others)


def _lazy_checks(
    snap: Path,
    files: dict[str, Any],
    lazy: set[str],
    vectors: np.ndarray,
    records: RecordStore,
    lexical: LexicalIndex | None,
    *,
    ball: bool,
) -> dict[str, ChunkedFile]:
    """The chunk checks of the files a load verifies as they are read (``lazy``), each file's
    readers switched to them: the records' bytes and the BM25 arrays verify what they read;
    the vectors' checks are the Ranker's (a search verifies the rows it reads)."""

    def chunked(name: str, array: np.ndarray, **kind: Any) -> ChunkedFile:
        digests = (snap / lazy_digests_name(name)).read_bytes()
        return ChunkedFile(snap / name, array, digests, files[name]["chunk_bytes"], **kind)

    checks: dict[str, ChunkedFile] = {}
    if "vectors.npy" in lazy:
        checks["vectors.npy"] = chunked("vectors.npy", vectors, ball=ball)
    if "records.jsonl" in lazy:
        data = records.buffer()  # the memory map open_records made: nothing verified yet
        raw = np.frombuffer(data, np.uint8) if len(data) else np.zeros(0, np.uint8)
        checks["records.jsonl"] = chunked("records.jsonl", raw)
        records.data = CheckedBytes(checks["records.jsonl"], data)
    if lexical is not None:
        prefix = f"{LEXICAL_DIRECTORY}/"

        def wrap(name: str, array: np.ndarray) -> np.ndarray | CheckedRows:
            if prefix + name not in lazy:
                return array
            checks[prefix + name] = chunked(prefix + name, array)
            return CheckedRows(checks[prefix + name])

        lexical.read_through(wrap)
    return checks


def _listed(manifest: dict[str, Any], directory: str) -> set[str]:
    """The names the manifest's ``files`` lists in ``directory`` of the snapshot."""
    prefix = f"{directory}/"
    return {name[len(prefix) :] for name in manifest["files"] if name.startswith(prefix)}


# ------------------------------------------------------------------- what a Ranker remembers of disk


_log = logging.getLogger("qaindex.ranker")


def _current(root: Path) -> str | None:
    """The snapshot ``root``'s manifest names now (None: no index there)."""
    if not (root / "manifest.json").exists():
        return None
    try:
        return str(read_index_manifest(root)["snapshot"])
    except QAIndexError:
        return "(unreadable)"


class SavedState:
    """What one Ranker remembers of the index directories it loaded from and saved to."""

    def __init__(self, model_directory: Path, path: Path | None = None, snapshot: str | None = None) -> None:
        # the snapshot each index path held when this Ranker last loaded or saved it
        self.seen: dict[str, str] = {}
        # the snapshot this Ranker serves and its files table, for verify()
        self.served: tuple[str, dict[str, Any]] | None = None
        # where a save copies the model's files from: the model's own directory until this
        # Ranker saves, then its latest snapshot's copy. Per Ranker: a Model may be shared.
        self.model_source = model_directory
        self.reranker_source: tuple[Reranker, Path] | None = None  # its copy in the last saved snapshot
        if path is not None and snapshot is not None:
            self.seen[os.path.realpath(path)] = snapshot

    def _relocate_model(self, root: Path, model: Model) -> None:
        """Where to copy the model from when the last source is gone (its snapshot was deleted):
        the model's own directory if it still exists, else the identical model copy of the
        index at ``root``, when there is one."""
        if (self.model_source / "manifest.json").is_file():
            return
        if (model.directory / "manifest.json").is_file():  # the directory the model came from
            self.model_source = model.directory
            return
        with contextlib.suppress(QAIndexError, OSError, ValueError):
            current = root / read_index_manifest(root)["snapshot"] / "model"
            theirs = json.loads((current / "manifest.json").read_text(encoding="utf-8"))
            if theirs == model.manifest:
                self.model_source = current

    def save(self, root: Path, *, lock_timeout: float | None, **pieces: Any) -> None:
        """Save under ``root``'s writer lock (:meth:`save_locked`); a failed save leaves no empty
        directory behind."""
        created = missing_parents(root)
        try:
            with index_lock(root, timeout=lock_timeout):
                self.save_locked(root, **pieces)
        except BaseException:
            remove_empty(created)
            raise

    def save_locked(
        self,
        root: Path,
        *,
        overwrite: bool,
        model: Model,
        records: RecordStore,
        vectors: np.ndarray,
        coarse: CoarseIndex,
        reranker: Reranker | None,
        lexical: LexicalIndex | None,
        created: str,
        keys: KeyIndex | None = None,
        requested: str,
        overfetch: int,
    ) -> None:
        """Write a snapshot of these pieces to ``root`` and commit it (the writer lock is held)."""
        previous = current_snapshot(check_writable(root))  # again, under the lock
        key = os.path.realpath(root)
        seen = self.seen.get(key)
        current = _current(root)
        held = None if overwrite or seen is not None else existing_index(root)
        if held is not None:  # the rule of `qaindex build` without --force
            raise IndexChangedError(
                f"{root} already holds {held} that this Ranker did not load; pass overwrite=True to replace "
                "it, or add answers to it with Ranker.edit"
            )
        if not overwrite and seen is not None and current is not None and current != seen:
            raise IndexChangedError(
                f"{root}: another writer changed this index since it was loaded (snapshot {seen} is now "
                f"{current}); saving would drop their update. Load it again and redo the change (use "
                "Ranker.edit for read-modify-write under the lock), or pass overwrite=True"
            )
        # orphans and debris of interrupted saves go first: their space is free for this one
        remove_garbage(root, keep=previous)
        self._relocate_model(root, model)
        rr_source = None
        if reranker is not None:  # its copy in the last saved snapshot, or (first save, or gone) its own directory
            saved = self.reranker_source
            fresh = saved is not None and saved[0] is reranker and (saved[1] / "manifest.json").is_file()
            rr_source = (saved[1] if saved is not None and fresh else reranker.directory, reranker.manifest)
        snap_name, files = write_snapshot(
            root,
            records,
            vectors,
            coarse,
            model,
            model_source=self.model_source,
            reranker=rr_source,
            lexical=lexical,
            keys=keys,
        )
        manifest = new_manifest(
            snapshot=snap_name,
            files=files,
            count=len(records),
            model=model,
            coarse=coarse,
            requested=requested,
            overfetch=overfetch,
            created=created,
            reranker=reranker,
            lexical=lexical is not None,
            keys=keys,
        )
        commit_manifest(root, manifest, model, self.model_source)
        # The new snapshot is live; remove the one it replaced (only qaindex's: qaindex.store.ownership).
        remove_garbage(root, keep=snap_name, previous=previous)
        self.seen[key] = snap_name
        self.served = (snap_name, files)
        # the old snapshot (maybe the model's source) is gone: later saves copy the new one
        self.model_source = root / snap_name / "model"
        if reranker is not None:
            self.reranker_source = (reranker, root / snap_name / "reranker")
        _log.info("saved %d answers to %s (snapshot %s)", len(records), root, snap_name)

    def vectors_source(self, path: Path | None) -> Path | str:
        """The served ``vectors.npy``, for error messages."""
        served = self.served
        return "the stored vectors" if path is None or served is None else path / served[0] / "vectors.npy"

    def verify(self, path: Path | None) -> None:
        """Check the size and SHA-256 of every file of the served snapshot (see ``Ranker.verify``)."""
        if path is None or self.served is None:
            raise QAIndexError("this index has not been saved; nothing to verify")
        name, files = self.served
        snap = path / name
        if not snap.is_dir():
            now = _current(path)
            raise IndexChangedError(
                f"{snap}: the snapshot this Ranker serves is gone (another writer replaced the index"
                + (f" with {now}" if now else "")
                + "); load the index again to verify what is on disk now"
            )
        verify_files(snap, files, error=IndexFormatError, what="index")
