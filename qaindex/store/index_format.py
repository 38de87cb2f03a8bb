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
        lexical/               the BM25 index of hybrid search, when built (qaindex.text.lexical)
        keys/                  the stored questions as search keys, when built (qaindex.store.keys)
        model/                 a copy of the model directory, so the index is self-contained
        .qaindex-snapshot      marker: this directory was written by qaindex (qaindex.store.ownership)

A save writes a new snapshot beside the old one, then replaces ``manifest.json`` atomically
(:func:`os.replace`), then deletes the old snapshot: an interrupted save leaves the previous
index loadable. What qaindex may delete or overwrite is decided by :mod:`qaindex.store.ownership`.
Loading memory-maps the vectors, the records and (where FAISS can) the index.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..errors import IndexFormatError, ModelFormatError
from ..model import GEOMETRIES, Model
from ..reranker import Reranker, index_entry, stored_reranker
from ..text.lexical import DIRECTORY as LEXICAL_DIRECTORY
from ..text.lexical import LexicalIndex
from ..text.lexical import check_entry as check_lexical_entry
from ..vector_index import INDEX_KINDS, KIND_PARAMS, CoarseIndex
from ..version import __version__
from .atomic_files import (
    check_file_entries,
    check_format,
    confined_path,
    create_file,
    file_entry,
    fsync_tree,
    read_array,
    read_json_object,
    save_array,
    verify_files,
    write_json_atomic,
)
from .diskspace import writing
from .field_ranges import INDEX_MANIFEST
from .index_checks import check_content, check_offsets, check_vectors
from .keys import DIRECTORY as KEYS_DIRECTORY
from .keys import KeyIndex, load_keys
from .keys import check_entry as check_keys_entry
from .model_format import copy_model_files
from .ownership import INDEX_FORMAT, MARKER_NAME, SNAPSHOT_NAME, remove_snapshot_dir, write_marker
from .records import RecordStore

__all__ = [
    "INDEX_FORMAT",
    "INDEX_FORMAT_VERSION",
    "Snapshot",
    "check_model_copy",
    "commit_manifest",
    "manifest_checksum",
    "new_manifest",
    "open_records",
    "open_snapshot",
    "open_vectors",
    "read_consistently",
    "read_index_manifest",
    "write_snapshot",
]

INDEX_FORMAT_VERSION = 1
_T = TypeVar("_T")

REQUIRED_FILES = ("records.jsonl", "records.offsets.npy", "vectors.npy", "coarse.faiss", "model/manifest.json")
HNSW_PARAMS = ("M", "ef_construction", "ef_search")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# bounds of the manifest's numbers: what a save can write (FAISS takes C ints; searches allocate k x overfetch)
MAX_PARAM = int(INDEX_MANIFEST["coarse.params.*"].high)
MAXIMA = {key: int(INDEX_MANIFEST[key].high) for key in ("count", "dimension", "overfetch")}


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON, without its own ``checksum`` field.

    Stored as ``checksum`` so that a damaged or edited manifest is detected like any
    other file of the index.
    """
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _bad(mpath: Path, field: str, expected: str, value: Any) -> IndexFormatError:
    return IndexFormatError(
        f'{mpath}: field "{field}" must be {expected}, got {value!r}; the index is corrupted, rebuild it'
    )


def _is_int(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _validate_fields(root: Path, mpath: Path, manifest: dict[str, Any]) -> None:
    """Type and range of every field the loader uses."""
    snapshot = manifest.get("snapshot")
    if not isinstance(snapshot, str) or not SNAPSHOT_NAME.fullmatch(snapshot):
        raise _bad(mpath, "snapshot", "a snapshot name like data-20250101T000000000000-123", snapshot)
    for key, minimum in (("count", 0), ("dimension", 1), ("overfetch", 1)):
        if not _is_int(manifest.get(key), minimum):
            what = "a non-negative integer" if minimum == 0 else "a positive integer"
            raise _bad(mpath, key, what, manifest.get(key))
        if manifest[key] > MAXIMA[key]:
            raise _bad(mpath, key, f"at most {MAXIMA[key]}", manifest[key])
    if manifest.get("geometry") not in GEOMETRIES:
        raise _bad(mpath, "geometry", " or ".join(GEOMETRIES), manifest.get("geometry"))
    coarse = manifest.get("coarse")
    if not isinstance(coarse, dict):
        raise _bad(mpath, "coarse", "an object with kind and params", coarse)
    kind = coarse.get("kind")
    if kind not in KIND_PARAMS:
        raise _bad(mpath, "coarse.kind", " or ".join(KIND_PARAMS), kind)
    params = coarse.get("params", {})
    allowed = KIND_PARAMS[kind]
    if not isinstance(params, dict) or any(name not in allowed for name in params):
        raise _bad(mpath, "coarse.params", f"an object with keys among {list(allowed)}", params)
    for name, value in params.items():
        if not _is_int(value, 1):
            raise _bad(mpath, f"coarse.params.{name}", "a positive integer", value)
        if value > MAX_PARAM:
            raise _bad(mpath, f"coarse.params.{name}", f"at most {MAX_PARAM}", value)
    tuning = coarse.get("tuning")
    if tuning is not None and (
        not isinstance(tuning, dict)
        or not all(
            isinstance(tuning.get(key), int | float) and not isinstance(tuning.get(key), bool) and 0 <= tuning[key] <= 1
            for key in ("target", "recall")
        )
    ):
        raise _bad(mpath, "coarse.tuning", "an object with target and recall between 0 and 1", tuning)
    if "requested" in coarse and coarse["requested"] not in INDEX_KINDS:
        raise _bad(mpath, "coarse.requested", " or ".join(INDEX_KINDS), coarse["requested"])
    for key in ("created", "updated", "qaindex_version"):
        if key in manifest and not isinstance(manifest[key], str):
            raise _bad(mpath, key, "a string", manifest[key])
    files = check_file_entries(manifest.get("files"), field="files", source=mpath, error=IndexFormatError)
    missing = [name for name in REQUIRED_FILES if name not in files]
    if missing:
        raise _bad(mpath, "files", f"a table listing {', '.join(REQUIRED_FILES)}", sorted(files))
    model = manifest.get("model")
    if not isinstance(model, dict) or model.get("directory") != "model" or not isinstance(model.get("name"), str):
        raise _bad(mpath, "model", 'an object with "name" and "directory": "model"', model)
    if model.get("manifest_sha256") != files["model/manifest.json"]["sha256"]:
        raise _bad(
            mpath, "model.manifest_sha256", "the checksum listed for model/manifest.json", model.get("manifest_sha256")
        )
    checksum = manifest.get("checksum")
    if not isinstance(checksum, str) or not _SHA256.fullmatch(checksum):
        raise _bad(mpath, "checksum", "64 lowercase hex digits (the manifest's own SHA-256)", checksum)
    try:
        actual = manifest_checksum(manifest)
    except ValueError:  # NaN or Infinity somewhere
        actual = ""
    if actual != checksum:
        raise IndexFormatError(
            f"{mpath}: checksum does not match the manifest's content; the index is corrupted "
            "(or its manifest was edited), rebuild it"
        )


def read_index_manifest(root: Path) -> dict[str, Any]:
    """Read and validate ``root/manifest.json`` (raises :class:`IndexFormatError`).

    Every field is checked for type and range; every path it names (``snapshot``, the keys
    of ``files``) must be a plain relative name inside the index directory; the manifest's
    own ``checksum`` (written since this version) must match.

    Example
    -------
    >>> path = ranker.save("qaindex-index")
    >>> read_index_manifest(Path("qaindex-index"))["count"] == len(ranker)
    True
    """
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
    confined_path(root, "manifest.json", field="manifest.json", source=mpath, error=IndexFormatError)
    manifest = read_json_object(mpath, error=IndexFormatError, what="index")
    check_format(
        manifest,
        mpath,
        name=INDEX_FORMAT,
        version=INDEX_FORMAT_VERSION,
        what="index",
        remedy="rebuild the index",
        error=IndexFormatError,
    )
    _validate_fields(root, mpath, manifest)
    snap = confined_path(root, manifest["snapshot"], field='"snapshot"', source=mpath, error=IndexFormatError)
    if not snap.is_dir():
        raise IndexFormatError(f"{snap}: missing; the index is corrupted, rebuild it")
    for name in manifest["files"]:
        confined_path(snap, name, field='"files" entry', source=mpath, error=IndexFormatError)
    return manifest


def check_model_copy(mpath: Path, files: dict[str, Any], model_manifest: dict[str, Any]) -> None:
    """The model files listed in an index manifest are exactly those of the model's manifest.

    So verifying the index's files verifies the model copy too, and each file is hashed
    once per load.
    """
    listed = {name[len("model/") :]: entry for name, entry in files.items() if name.startswith("model/")}
    listed.pop("manifest.json", None)
    theirs = model_manifest["files"]
    if listed.keys() != theirs.keys() or any(
        listed[n]["bytes"] != theirs[n]["bytes"] or listed[n]["sha256"] != theirs[n]["sha256"] for n in listed
    ):
        raise IndexFormatError(
            f"{mpath}: the model files it lists do not match model/manifest.json; the index is corrupted, rebuild it"
        )


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
    (:mod:`qaindex.store.keys`) into ``keys/``.

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
    sizes = {
        "records.jsonl": int(records.offsets[-1]),
        "records.offsets.npy": 8 * (count + 1) + 128,
        "vectors.npy": int(np.asarray(vectors).nbytes) + 128,
        "coarse.faiss": int(np.asarray(vectors).nbytes) + 4096,  # an estimate: flat is the vectors again
        "model": _listed_bytes(model.manifest),
        "reranker": _listed_bytes(reranker[1]) if reranker is not None else 0,
        "lexical": lexical.stored_bytes if lexical is not None else 0,
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
        files = {
            p.relative_to(snap).as_posix(): file_entry(p)
            for p in sorted(snap.rglob("*"))
            if p.is_file() and p.name != MARKER_NAME
        }
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


def open_vectors(snap: Path, count: int, dimension: int) -> tuple[np.ndarray, np.ndarray]:
    """Memory-map ``vectors.npy`` and read ``records.offsets.npy``, checking their shapes."""
    arrays = []
    for name in ("vectors.npy", "records.offsets.npy"):
        try:
            arrays.append(read_array(snap / name, mmap=name == "vectors.npy"))
        except (OSError, ValueError) as exc:
            raise IndexFormatError(
                f"{snap / name}: cannot be read ({exc}); the index is corrupted, rebuild it"
            ) from None
    vectors, offsets = arrays
    if vectors.shape != (count, dimension) or offsets.shape != (count + 1,):
        raise IndexFormatError(
            f"{snap}: stored arrays do not match the manifest ({count} answers of dimension "
            f"{dimension}); rebuild the index"
        )
    check_vectors(snap / "vectors.npy", vectors, ball=False, scan=False)  # dtype: exactly float32
    return vectors, offsets


def open_records(snap: Path, offsets: np.ndarray) -> RecordStore:
    """Memory-map ``records.jsonl`` as a :class:`RecordStore` with these offsets."""
    try:
        with open(snap / "records.jsonl", "rb") as handle:
            data: bytes | mmap.mmap = (
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(handle.fileno()).st_size else b""
            )
    except OSError as exc:
        raise IndexFormatError(
            f"{snap / 'records.jsonl'}: cannot be read ({exc.strerror or exc}); the index is corrupted, rebuild it"
        ) from None
    check_offsets(snap / "records.jsonl", offsets, data)
    return RecordStore(data, offsets.astype(np.int64, copy=False), source=snap / "records.jsonl")


# ------------------------------------------------------------------- the manifest, written


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


def open_snapshot(root: Path, manifest: dict[str, Any], *, device: str, threads: int | None, verify: bool) -> Snapshot:
    """Open the snapshot ``manifest`` names: verify its files, load the model copy, memory-map
    the vectors and records, read the FAISS, reranker and lexical indexes.

    Raises :class:`IndexFormatError` (or :class:`ModelFormatError`) naming the file and
    field when anything disagrees with the manifest.
    """
    snap = root / manifest["snapshot"]
    if verify:
        verify_files(snap, manifest["files"], error=IndexFormatError, what="index")
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
        lexical = LexicalIndex.load(snap / LEXICAL_DIRECTORY, count)
    keys = None
    if manifest.get("keys") is not None:  # absent in indexes saved without keys: they load unchanged
        key_count = check_keys_entry(manifest["keys"], manifest["files"], mpath)
        keys = load_keys(snap / KEYS_DIRECTORY, manifest["keys"], key_count, count, model.dimension)
    # what the checksums cannot vouch for, as a build and a save check it (qaindex.store.index_checks);
    # verify scans the content too
    check_content(
        snap, mpath=mpath, model=model, vectors=vectors, records=records, lexical=lexical, scan=verify, keys=keys
    )
    reranker = stored_reranker(snap, manifest, device=device, threads=threads)
    return Snapshot(model, records, vectors, coarse, reranker, lexical, keys)
