"""The index directory format: the layout, the manifest read and validated, a snapshot's files opened.

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
        keys/                  the stored questions as search keys, when built (qaindex.key_index)
        model/                 a copy of the model directory, so the index is self-contained
        .qaindex-snapshot      marker: this directory was written by qaindex (qaindex.store.ownership)

A save writes a new snapshot beside the old one, then replaces ``manifest.json`` atomically
(:func:`os.replace`), then deletes the old snapshot: an interrupted save leaves the previous
index loadable. What qaindex may delete or overwrite is decided by :mod:`qaindex.store.ownership`.
Loading memory-maps the vectors and the records (:func:`open_vectors`, :func:`open_records`).
Assembling a snapshot from a Ranker's pieces, and the pieces from a snapshot (the model, FAISS,
lexical, key and reranker indexes), is :mod:`qaindex.snapshot`'s.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IndexFormatError
from ..vector_index import INDEX_KINDS, KIND_PARAMS
from .atomic_files import (
    check_file_entries,
    check_format,
    confined_path,
    read_array,
    read_json_object,
)
from .field_ranges import INDEX_MANIFEST
from .index_checks import check_offsets, check_vectors
from .model_format import GEOMETRIES
from .ownership import INDEX_FORMAT, SNAPSHOT_NAME
from .records import RecordStore

__all__ = [
    "INDEX_FORMAT",
    "INDEX_FORMAT_VERSION",
    "check_model_copy",
    "manifest_checksum",
    "open_records",
    "open_vectors",
    "read_index_manifest",
]

INDEX_FORMAT_VERSION = 1

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
    # A writer commits a new manifest, then removes the snapshot the old one named: a reader
    # that read the old manifest just before finds its snapshot gone. That is a newer index,
    # not a corrupted one: read the manifest again (a few times, for back-to-back saves).
    manifest = _read_once(root)
    for _ in range(_REREADS):
        snap = root / manifest["snapshot"]
        if snap.is_dir():
            return manifest
        again = _read_once(root)
        if again["snapshot"] == manifest["snapshot"]:
            break
        manifest = again
    raise IndexFormatError(f"{root / manifest['snapshot']}: missing; the index is corrupted, rebuild it")


_REREADS = 5


def _read_once(root: Path) -> dict[str, Any]:
    """One read of ``root/manifest.json``, every field checked, the snapshot not looked at."""
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
