"""The model directory format: manifest reading and validation, and writing model directories.

A model directory (see :mod:`qaindex.model` for the layout and graph contracts) holds
``manifest.json`` and the files it lists with their size and SHA-256. Every name read from a
manifest (``files`` keys, ``graphs`` values, the tokenizer ``vocab``) must be a plain relative
path inside the directory. Writers publish a complete sibling directory with one rename.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ModelFormatError
from ..geometry import NAMES, bilinear, hyperbolic
from ..text.chunking import read_chunking
from ..text.tokenizer import Tokenizer
from ..version import __version__
from .atomic_files import (
    check_file_entries,
    check_format,
    confined_path,
    file_entry,
    fsync_tree,
    read_json_object,
    remove_debris,
    temporary_sibling,
    verify_files,
    write_json_atomic,
)
from .diskspace import estimate_bytes, writing
from .field_ranges import calibration_entry_error, fusion_entry_error

__all__ = [
    "GEOMETRIES",
    "MODEL_FORMAT",
    "MODEL_FORMAT_VERSION",
    "MODEL_KINDS",
    "ROLES",
    "copy_model_files",
    "read_model_manifest",
    "write_model",
    "write_model_directory",
]

MODEL_FORMAT = "qaindex-model"
MODEL_FORMAT_VERSION = 1
MODEL_KINDS = ("dual_encoder", "reranker")
# the graphs each kind must name (a reranker scores (question, answer) pairs: see qaindex.reranker)
GRAPH_ROLES = {"dual_encoder": ("question_encoder", "answer_encoder", "scorer"), "reranker": ("reranker",)}
GEOMETRIES = NAMES  # the geometry names a manifest may give (qaindex.geometry)
ROLES = ("question", "answer")
MAX_DIMENSION = 65536  # vectors wider than this are refused at load (every buffer is sized by it)
DEFAULT_MODEL_DIR = Path(__file__).parent / "models" / "default"


def _require(manifest: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    if key not in manifest:
        raise ModelFormatError(f'{path}: field "{key}" is missing; the model directory is corrupted, re-export it')
    value = manifest[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ModelFormatError(f'{path}: field "{key}" has an invalid value {value!r}; re-export the model')
    return value


def wrong_kind_message(mpath: Path, kind: str) -> str:
    """Why a model directory of ``kind`` cannot be used where the other kind is needed."""
    directory = mpath.parent
    if kind == "reranker":
        return (
            f'{mpath}: is a reranker model (kind "reranker"), which scores question-answer pairs and cannot '
            f"encode answers; pass it to `qaindex search --rerank {directory}` or `qaindex build --reranker "
            f"{directory}` (Python: Reranker.load), and give --model a dual-encoder model directory"
        )
    return (
        f"{mpath}: is a {kind.replace('_', '-')} model (kind {json.dumps(kind)}), not a reranker; pass it as "
        "--model (Python: Model.load), and give --rerank/--reranker a directory exported by "
        "`qaindex train --model ap-cnn` or `--model ap-bilstm`"
    )


def read_model_manifest(
    path: str | os.PathLike[str], *, verify: bool = True, expect: str = "dual_encoder"
) -> dict[str, Any]:
    """Read and validate ``manifest.json`` of a model directory (no ONNX loaded).

    Parameters
    ----------
    path : path-like
        The model directory.
    verify : bool, keyword-only
        Also check the size and SHA-256 of every listed file.
    expect : {"dual_encoder", "reranker"}, keyword-only
        The kind the caller needs; another kind is a :class:`ModelFormatError` saying where
        to pass that directory instead.

    Returns
    -------
    dict
        The manifest.

    Example
    -------
    >>> from qaindex.model import DEFAULT_MODEL_DIR
    >>> read_model_manifest(DEFAULT_MODEL_DIR)["format"]
    'qaindex-model'
    """
    directory = Path(path)
    if not directory.exists():
        raise ModelFormatError(f"{directory}: no such model directory")
    mpath = directory / "manifest.json"
    manifest = read_json_object(mpath, error=ModelFormatError, what="model directory")
    check_format(
        manifest,
        mpath,
        name=MODEL_FORMAT,
        version=MODEL_FORMAT_VERSION,
        what="model",
        remedy="re-export the model",
        error=ModelFormatError,
    )
    kind = _require(manifest, "kind", str, mpath)
    if kind not in MODEL_KINDS:
        raise ModelFormatError(
            f"{mpath}: model kind {kind!r} is not supported by this qaindex "
            f"(supported: {', '.join(MODEL_KINDS)}); upgrade qaindex"
        )
    if kind != expect:
        raise ModelFormatError(wrong_kind_message(mpath, kind))
    _require(manifest, "name", str, mpath)
    dim = _require(manifest, "dimension", int, mpath)
    if not 1 <= dim <= MAX_DIMENSION:
        raise ModelFormatError(
            f'{mpath}: field "dimension" must be an integer in [1, {MAX_DIMENSION}], got {dim}; re-export the model'
        )
    geometry = _require(manifest, "geometry", dict, mpath)
    if geometry.get("name") not in GEOMETRIES:
        raise ModelFormatError(
            f"{mpath}: geometry {geometry.get('name')!r} is not supported "
            f"(supported: {', '.join(GEOMETRIES)}); upgrade qaindex"
        )
    if geometry["name"] == "poincare":
        max_norm = geometry.get("max_norm")
        if not isinstance(max_norm, float) or not 0.0 < max_norm < 1.0:
            raise ModelFormatError(f'{mpath}: geometry "max_norm" must be a number in (0, 1), got {max_norm!r}')
        ranking = geometry.get("ranking", "distance")
        if ranking not in hyperbolic.RANKINGS:
            raise ModelFormatError(
                f'{mpath}: geometry "ranking" {ranking!r} is not supported '
                f"(supported: {', '.join(hyperbolic.RANKINGS)}); upgrade qaindex or re-export the model"
            )
    if geometry["name"] == "bilinear" and bilinear.check_bias(geometry.get("bias")) is None:
        raise ModelFormatError(
            f'{mpath}: geometry "bias" must be a finite number, got {geometry.get("bias")!r}; re-export the model'
        )
    read_chunking(manifest.get("chunking"), mpath, ROLES)
    max_tokens = _require(manifest, "max_tokens", dict, mpath)
    for role in ROLES:
        value = max_tokens.get(role)
        if not isinstance(value, int) or value < 1:
            raise ModelFormatError(f'{mpath}: "max_tokens.{role}" must be a positive integer, got {value!r}')
    if not isinstance(manifest.get("static_encoder", False), bool):
        raise ModelFormatError(f'{mpath}: "static_encoder" must be true or false, got {manifest["static_encoder"]!r}')
    graphs = _require(manifest, "graphs", dict, mpath)
    for role in GRAPH_ROLES[kind]:
        if not isinstance(graphs.get(role), str):
            raise ModelFormatError(f'{mpath}: "graphs.{role}" is missing; re-export the model')
    tokenizer = _require(manifest, "tokenizer", dict, mpath)
    files = check_file_entries(manifest.get("files"), field="files", source=mpath, error=ModelFormatError)
    for name in files:
        if name == "manifest.json":
            raise ModelFormatError(f'{mpath}: field "files" lists manifest.json itself; re-export the model')
        confined_path(directory, name, field='"files" entry', source=mpath, error=ModelFormatError)
    named = [(f"graphs.{role}", value) for role, value in graphs.items()]
    named.append(("tokenizer.vocab", tokenizer.get("vocab")))
    for field, name in named:
        confined_path(directory, name, field=f'"{field}"', source=mpath, error=ModelFormatError)
        if name not in files:
            raise ModelFormatError(
                f'{mpath}: field "{field}" names {name!r}, which "files" does not list (so it cannot be '
                "verified); re-export the model"
            )
    for key in ("score", "training", "metrics", "parameters"):
        if key in manifest and not isinstance(manifest[key], dict):
            raise ModelFormatError(
                f'{mpath}: field "{key}" must be an object, got {manifest[key]!r}; re-export the model'
            )
    why = calibration_entry_error(manifest.get("calibration"), mpath)
    if why is not None:
        raise ModelFormatError(why)
    if manifest.get("fusion") is not None:  # read at search time; checked here, so a load refuses it
        why = fusion_entry_error(manifest["fusion"])
        if why is not None:
            raise ModelFormatError(
                f"{mpath}: {why}; refit it with `python -m tools.fit_default_fusion` or remove the field"
            )
    if verify:
        verify_files(directory, files, error=ModelFormatError, what="model directory")
    return manifest


def copy_model_files(source: Path, manifest: Mapping[str, Any], destination: Path) -> None:
    """Copy a model directory's manifest and listed files into ``destination``.

    Every name must be a plain relative path inside both directories: nothing is read or
    written outside them, whatever the manifest says.
    """
    destination.mkdir(parents=True, exist_ok=True)
    mpath = source / "manifest.json"
    for name in [*manifest["files"], "manifest.json"]:
        origin = confined_path(source, name, field='"files" entry', source=mpath, error=ModelFormatError)
        target = confined_path(destination, name, field='"files" entry', source=mpath, error=ModelFormatError)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(origin, target)
        except FileNotFoundError:
            raise ModelFormatError(
                f"{origin}: missing, so the model cannot be copied (was the index it was loaded from "
                "replaced or deleted by another writer?); load the index or model again"
            ) from None


def _is_model_manifest(path: Path) -> bool:
    """Whether ``path`` is a qaindex model manifest (format name and an integer version)."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        obj = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return False
    version = obj.get("format_version") if isinstance(obj, dict) else None
    return obj.get("format") == MODEL_FORMAT and isinstance(version, int) and not isinstance(version, bool)


def _publish_directory(tmp: Path, target: Path, *, marker: str, what: str, error: type[Exception]) -> None:
    """Rename ``tmp`` to ``target``, replacing an existing directory that contains ``marker``."""
    fsync_tree(tmp)
    if target.exists():
        if any(target.iterdir()) and not _is_model_manifest(target / marker):
            # a folder qaindex did not write (its own manifest.json, say) is never replaced
            raise error(f"{target}: exists and is not a {what}; choose another path or remove it")
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
        os.replace(tmp, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, target)


def write_model(
    directory: str | os.PathLike[str],
    *,
    name: str,
    geometry: Mapping[str, Any],
    dimension: int,
    tokenizer: Tokenizer,
    max_tokens: Mapping[str, int],
    encoder: bytes | os.PathLike[str],
    scorer: bytes | os.PathLike[str],
    score: Mapping[str, Any],
    answer_encoder: bytes | os.PathLike[str] | None = None,
    training: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    parameters: Mapping[str, Any] | None = None,
    extra_files: Mapping[str, bytes | os.PathLike[str]] | None = None,
    chunking: Mapping[str, Any] | None = None,
    static_encoder: bool = False,
) -> Path:
    """Write a model directory atomically (a sibling directory renamed into place).

    Parameters
    ----------
    directory : path-like
        Target; an existing model directory there is replaced.
    name, geometry, dimension, tokenizer, max_tokens
        Manifest fields (``geometry`` like ``{"name": "poincare", "max_norm": 0.999}``,
        ``max_tokens`` like ``{"question": 40, "answer": 120}``).
    encoder, scorer : bytes or path
        ONNX graphs (serialized bytes or a file to copy). ``encoder`` serves both roles
        unless ``answer_encoder`` is given.
    score : mapping
        How the scorer's ``score`` is defined, e.g.
        ``{"formula": "-(w_f * d + b_f)", "higher_is_better": True, "parameters": {...}}``.
    training, metrics, parameters, extra_files
        Provenance, evaluation results, parameter counts and other files to ship.
    chunking : mapping, optional
        Roles whose encoder takes chunked input (:mod:`qaindex.text.chunking`), with their settings.
    static_encoder : bool, optional
        The encoder is a static (bag-of-tokens) sum over the tokens, whose cost is linear in
        length: the runtime then reads answers whole, up to ``STATIC_ANSWER_TOKENS``
        (:mod:`qaindex.model`), whatever ``max_tokens["answer"]`` says.

    Returns
    -------
    Path
        The published directory.
    """
    graphs = {"question_encoder": "encoder.onnx", "answer_encoder": "encoder.onnx", "scorer": "scorer.onnx"}
    contents: dict[str, bytes | os.PathLike[str]] = {"encoder.onnx": encoder}
    if answer_encoder is not None:
        contents["answer_encoder.onnx"] = answer_encoder
        graphs["answer_encoder"] = "answer_encoder.onnx"
    contents["scorer.onnx"] = scorer
    contents.update(extra_files or {})
    fields: dict[str, Any] = {"kind": "dual_encoder", "geometry": dict(geometry), "graphs": graphs}
    if chunking:
        fields["chunking"] = {role: dict(spec) for role, spec in chunking.items()}
    if static_encoder:
        fields["static_encoder"] = True
    return write_model_directory(
        directory,
        contents,
        name=name,
        dimension=dimension,
        tokenizer=tokenizer,
        max_tokens=max_tokens,
        score=score,
        training=training,
        metrics=metrics,
        parameters=parameters,
        fields=fields,
    )


def write_model_directory(
    directory: str | os.PathLike[str],
    contents: Mapping[str, bytes | os.PathLike[str]],
    *,
    name: str,
    dimension: int,
    tokenizer: Tokenizer,
    max_tokens: Mapping[str, int],
    score: Mapping[str, Any],
    training: Mapping[str, Any] | None,
    metrics: Mapping[str, Any] | None,
    parameters: Mapping[str, Any] | None,
    fields: Mapping[str, Any],
) -> Path:
    """Write any kind of model directory atomically (a sibling directory renamed into place).

    ``contents`` maps file names to bytes or files to copy; the tokenizer's ``vocab.txt`` is
    added, every file is hashed into the manifest's ``files``, and ``fields`` (``kind``,
    ``geometry``, ``graphs`` and kind-specific fields) join the fields every model has.
    Used by :func:`write_model` and :func:`qaindex.reranker.write_reranker`.
    """
    target = Path(directory)
    # leftovers of interrupted writes of this directory, by processes that are gone
    stem = re.escape(target.name)
    remove_debris(
        target.parent,
        [rf"\.{stem}\.tmp-(?P<pid>[0-9]+)-[0-9a-f]+", rf"\.{stem}\.old-(?P<pid>[0-9]+)"],
        only_dead=True,
    )
    needed = sum(len(c) if isinstance(c, bytes) else estimate_bytes(c) for c in contents.values()) + (1 << 16)
    with temporary_sibling(target) as tmp:
        for fname, content in contents.items():
            dest = tmp / fname
            size = len(content) if isinstance(content, bytes) else estimate_bytes(content)
            with writing(target, fname, needed=needed, file_bytes=size):  # names the model directory
                dest.parent.mkdir(parents=True, exist_ok=True)
                if isinstance(content, bytes):
                    dest.write_bytes(content)
                else:
                    shutil.copyfile(content, dest)
        tokenizer.save_vocab(tmp / "vocab.txt")
        files = {p.relative_to(tmp).as_posix(): file_entry(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        manifest = {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            "name": name,
            "dimension": int(dimension),
            "tokenizer": tokenizer.config("vocab.txt"),
            "max_tokens": {role: int(max_tokens[role]) for role in ROLES},
            **fields,
            "score": dict(score),
            "training": dict(training or {}),
            "metrics": dict(metrics or {}),
            "parameters": dict(parameters or {}),
            "qaindex_version": __version__,
            "files": files,
        }
        write_json_atomic(tmp / "manifest.json", manifest)
        _publish_directory(tmp, target, marker="manifest.json", what="model directory", error=ModelFormatError)
    return target
