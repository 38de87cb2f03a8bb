"""Model directories: a versioned manifest, ONNX graphs and the tokenizer vocabulary.

Layout (written by ``export/``, read here)::

    MODEL_DIR/
      manifest.json    format, version, kind, geometry, dimension, tokenizer settings,
                       max lengths, graphs, score definition, training provenance,
                       size and SHA-256 of every other file
      encoder.onnx     token ids -> vectors (inside the unit ball for the Poincaré geometry)
      scorer.onnx      (query, candidates) -> (score, distance), exact
      vocab.txt        tokenizer vocabulary, one token per line

Graph contracts (``kind = "dual_encoder"``):

- encoder: inputs ``input_ids`` int64 (batch, seq) and, if declared, ``attention_mask``
  int64 (batch, seq); first output float32 (batch, dimension).
- scorer: inputs ``query`` float32 (n, dimension) and ``candidates`` float32
  (n, m, dimension); outputs ``score`` (n, m), higher is better, and ``distance`` (n, m).

``graphs`` maps roles to files, so an asymmetric model names two encoders and a future
cross-attention reranker adds a ``reranker`` graph without breaking the format; a reader
refuses a ``kind`` it does not know with a message that says so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import hyperbolic
from .devices import create_session
from .errors import ModelFormatError
from .storage import (
    file_entry,
    fsync_tree,
    read_json_object,
    temporary_sibling,
    verify_files,
    write_json_atomic,
)
from .tokenizer import Tokenizer, TokenizerError

__all__ = [
    "DEFAULT_MODEL_DIR",
    "GEOMETRIES",
    "MODEL_FORMAT",
    "MODEL_FORMAT_VERSION",
    "MODEL_KINDS",
    "Model",
    "resolve_model_path",
    "write_model",
]

MODEL_FORMAT = "qaindex-model"
MODEL_FORMAT_VERSION = 1
MODEL_KINDS = ("dual_encoder",)
GEOMETRIES = ("poincare", "cosine")
ROLES = ("question", "answer")
DEFAULT_MODEL_DIR = Path(__file__).parent / "models" / "default"


def resolve_model_path(model: str | os.PathLike[str] | None) -> Path:
    """The model directory to use: ``model``, or the built-in default when None.

    Example
    -------
    >>> resolve_model_path("some/dir").name
    'dir'
    """
    if model is not None:
        return Path(model)
    if not (DEFAULT_MODEL_DIR / "manifest.json").is_file():
        raise ModelFormatError(
            "no built-in default model ships with this install of qaindex; pass --model DIR "
            "with a model directory (train one with `qaindex train`)"
        )
    return DEFAULT_MODEL_DIR


def _require(manifest: Mapping[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    if key not in manifest:
        raise ModelFormatError(f'{path}: field "{key}" is missing; the model directory is corrupted, re-export it')
    value = manifest[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ModelFormatError(f'{path}: field "{key}" has an invalid value {value!r}; re-export the model')
    return value


@dataclass
class _Graphs:
    encoders: dict[str, Any]  # role -> session
    scorer: Any
    encoder_inputs: dict[str, tuple[str, ...]]


class Model:
    """A loaded dual-encoder model: tokenizer, ONNX encoder(s) and ONNX scorer.

    Use :meth:`load`; the constructor is internal.

    Example
    -------
    >>> model = Model.load("path/to/model")                     # doctest: +SKIP
    >>> q = model.encode(["how do I reset my password?"], role="question")  # doctest: +SKIP
    >>> score, dist = model.score(q, model.encode(["Use the reset link."], role="answer")[None])  # doctest: +SKIP
    """

    def __init__(self, directory: Path, manifest: dict[str, Any], tokenizer: Tokenizer, graphs: _Graphs) -> None:
        self.directory = directory
        self.manifest = manifest
        self.tokenizer = tokenizer
        self._graphs = graphs
        self.name: str = manifest["name"]
        self.dimension: int = manifest["dimension"]
        self.geometry: str = manifest["geometry"]["name"]
        self.max_norm: float | None = manifest["geometry"].get("max_norm")
        # Poincaré ranking rule: "distance" (absent: models exported before it existed) or
        # "relative" (d(q, a) - d(0, a)); it decides how coarse recall and exact search rank
        self.ranking: str = manifest["geometry"].get("ranking", "distance")
        self.max_tokens: dict[str, int] = dict(manifest["max_tokens"])

    # -- loading -----------------------------------------------------------------------
    @staticmethod
    def read_manifest(path: str | os.PathLike[str], *, verify: bool = True) -> dict[str, Any]:
        """Read and validate ``manifest.json`` of a model directory (no ONNX loaded)."""
        directory = Path(path)
        if not directory.exists():
            raise ModelFormatError(f"{directory}: no such model directory")
        mpath = directory / "manifest.json"
        manifest = read_json_object(mpath, error=ModelFormatError, what="model directory")
        if manifest.get("format") != MODEL_FORMAT:
            raise ModelFormatError(
                f'{mpath}: not a qaindex model (field "format" is {manifest.get("format")!r}, '
                f"expected {MODEL_FORMAT!r})"
            )
        version = manifest.get("format_version")
        if version != MODEL_FORMAT_VERSION:
            raise ModelFormatError(
                f"{mpath}: model format version {version!r} is not supported by this qaindex "
                f"(it reads version {MODEL_FORMAT_VERSION}); upgrade qaindex or re-export the model"
            )
        kind = _require(manifest, "kind", str, mpath)
        if kind not in MODEL_KINDS:
            raise ModelFormatError(
                f"{mpath}: model kind {kind!r} is not supported by this qaindex "
                f"(supported: {', '.join(MODEL_KINDS)}); upgrade qaindex"
            )
        _require(manifest, "name", str, mpath)
        dim = _require(manifest, "dimension", int, mpath)
        if dim < 1:
            raise ModelFormatError(f'{mpath}: field "dimension" must be positive, got {dim}')
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
        max_tokens = _require(manifest, "max_tokens", dict, mpath)
        for role in ROLES:
            value = max_tokens.get(role)
            if not isinstance(value, int) or value < 1:
                raise ModelFormatError(f'{mpath}: "max_tokens.{role}" must be a positive integer, got {value!r}')
        graphs = _require(manifest, "graphs", dict, mpath)
        for role in ("question_encoder", "answer_encoder", "scorer"):
            if not isinstance(graphs.get(role), str):
                raise ModelFormatError(f'{mpath}: "graphs.{role}" is missing; re-export the model')
        _require(manifest, "tokenizer", dict, mpath)
        files = _require(manifest, "files", dict, mpath)
        if verify:
            verify_files(directory, files, error=ModelFormatError, what="model directory")
        return manifest

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        device: str = "auto",
        threads: int | None = 1,
        verify: bool = True,
    ) -> Model:
        """Load a model directory.

        Parameters
        ----------
        path : path-like, optional
            The model directory; None loads the built-in default model.
        device : {"auto", "cpu", "cuda"}, keyword-only
            Where onnxruntime runs the graphs.
        threads : int or None, keyword-only
            onnxruntime intra-op threads (1 is fastest for single queries; None: all cores).
        verify : bool, keyword-only
            Check sizes and checksums of every file against the manifest.

        Returns
        -------
        Model
        """
        directory = resolve_model_path(path)
        manifest = cls.read_manifest(directory, verify=verify)
        try:
            tokenizer = Tokenizer.from_config(manifest["tokenizer"], directory)
        except TokenizerError as exc:
            raise ModelFormatError(f"{directory / 'manifest.json'}: tokenizer: {exc}") from None
        sessions: dict[str, Any] = {}

        def session_for(file: str) -> Any:
            if file not in sessions:
                gpath = directory / file
                if not gpath.is_file():
                    raise ModelFormatError(f"{gpath}: missing; the model directory is incomplete, re-export it")
                try:
                    sessions[file] = create_session(gpath, device=device, threads=threads)
                except Exception as exc:  # onnxruntime raises its own exception types
                    if isinstance(exc, ModelFormatError) or type(exc).__module__.startswith("qaindex"):
                        raise
                    raise ModelFormatError(
                        f"{gpath}: onnxruntime cannot load it ({exc}); re-export the model"
                    ) from None
            return sessions[file]

        g = manifest["graphs"]
        encoders = {role: session_for(g[f"{role}_encoder"]) for role in ROLES}
        scorer = session_for(g["scorer"])
        encoder_inputs: dict[str, tuple[str, ...]] = {}
        for role, session in encoders.items():
            names = tuple(i.name for i in session.get_inputs())
            if "input_ids" not in names or not set(names) <= {"input_ids", "attention_mask"}:
                raise ModelFormatError(
                    f"{directory / g[f'{role}_encoder']}: encoder inputs are {list(names)}, expected "
                    "input_ids and optionally attention_mask; re-export the model"
                )
            encoder_inputs[role] = names
        scorer_inputs = {i.name for i in scorer.get_inputs()}
        scorer_outputs = {o.name for o in scorer.get_outputs()}
        if scorer_inputs != {"query", "candidates"} or not {"score", "distance"} <= scorer_outputs:
            raise ModelFormatError(
                f"{directory / g['scorer']}: scorer graph must take query, candidates and give "
                f"score, distance (it takes {sorted(scorer_inputs)}, gives {sorted(scorer_outputs)}); "
                "re-export the model"
            )
        return cls(directory, manifest, tokenizer, _Graphs(encoders, scorer, encoder_inputs))

    # -- inference -----------------------------------------------------------------------
    @property
    def providers(self) -> dict[str, str]:
        """The onnxruntime execution provider each graph actually runs on."""
        out = {f"{role}_encoder": s.get_providers()[0] for role, s in self._graphs.encoders.items()}
        out["scorer"] = self._graphs.scorer.get_providers()[0]
        return out

    def encode(
        self,
        texts: Sequence[str],
        *,
        role: str,
        batch_size: int = 256,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Encode texts as questions or answers.

        Parameters
        ----------
        texts : sequence of str
        role : {"question", "answer"}, keyword-only
            Selects the encoder and the maximum token count.
        batch_size : int, keyword-only
            Texts per onnxruntime call (texts are grouped by length to limit padding).
        progress : callable, optional
            Called with the number of texts done after each batch.

        Returns
        -------
        numpy.ndarray (len(texts), dimension), float32
            Ball points (norm at most ``max_norm``) for the Poincaré geometry.
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        session = self._graphs.encoders[role]
        names = self._graphs.encoder_inputs[role]
        limit = self.max_tokens[role]
        encoded = [self.tokenizer.encode(t, limit) for t in texts]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        order = np.argsort([len(e) for e in encoded], kind="stable") if len(texts) > 1 else [0] * len(texts)
        pad = self.tokenizer.pad_id
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(1, max(len(encoded[r]) for r in rows))
            ids = np.full((len(rows), width), pad, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for i, r in enumerate(rows):
                seq = encoded[r]
                ids[i, : len(seq)] = seq
                mask[i, : len(seq)] = 1
            feeds = {"input_ids": ids}
            if "attention_mask" in names:
                feeds["attention_mask"] = mask
            vectors = session.run(None, feeds)[0]
            if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
                raise ModelFormatError(
                    f"{self.directory}: the {role} encoder returned shape {vectors.shape}, "
                    f"the manifest says dimension {self.dimension}; re-export the model"
                )
            out[rows] = vectors
            if progress is not None:
                progress(len(rows))
        if self.max_norm is not None:
            # The encoder keeps points inside the ball; re-project only what a float32
            # rounding (or a faulty graph) put outside, so serving never sees norm >= 1.
            sq = np.einsum("ij,ij->i", out, out)
            if np.any(sq > self.max_norm * self.max_norm):
                out = hyperbolic.project(out, max_norm=self.max_norm)
        return out

    def score(self, query: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact scores of candidates for each query, through the ONNX scorer.

        Parameters
        ----------
        query : array (n, dimension)
        candidates : array (n, m, dimension)

        Returns
        -------
        score, distance : numpy.ndarray (n, m), float32
            ``score`` is higher-is-better; ``distance`` is the geometry's distance
            (Poincaré distance, or 1 - cosine).
        """
        q = np.ascontiguousarray(query, dtype=np.float32)
        c = np.ascontiguousarray(candidates, dtype=np.float32)
        if c.shape[1] == 0:
            empty = np.zeros((q.shape[0], 0), dtype=np.float32)
            return empty, empty.copy()
        score, distance = self._graphs.scorer.run(["score", "distance"], {"query": q, "candidates": c})
        return np.asarray(score, dtype=np.float32), np.asarray(distance, dtype=np.float32)

    def copy_to(self, destination: Path) -> None:
        """Copy the model's files (manifest and every listed file) into ``destination``."""
        copy_model_files(self.directory, self.manifest, destination)


def copy_model_files(source: Path, manifest: Mapping[str, Any], destination: Path) -> None:
    """Copy a model directory's manifest and listed files into ``destination``."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in [*manifest["files"], "manifest.json"]:
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / name, target)


def _publish_directory(tmp: Path, target: Path, *, marker: str, what: str, error: type[Exception]) -> None:
    """Rename ``tmp`` to ``target``, replacing an existing directory that contains ``marker``."""
    fsync_tree(tmp)
    if target.exists():
        if not (target / marker).is_file() and any(target.iterdir()):
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

    Returns
    -------
    Path
        The published directory.
    """
    target = Path(directory)
    with temporary_sibling(target) as tmp:

        def put(fname: str, content: bytes | os.PathLike[str]) -> None:
            dest = tmp / fname
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                dest.write_bytes(content)
            else:
                shutil.copyfile(content, dest)

        put("encoder.onnx", encoder)
        graphs = {"question_encoder": "encoder.onnx", "answer_encoder": "encoder.onnx", "scorer": "scorer.onnx"}
        if answer_encoder is not None:
            put("answer_encoder.onnx", answer_encoder)
            graphs["answer_encoder"] = "answer_encoder.onnx"
        put("scorer.onnx", scorer)
        tokenizer.save_vocab(tmp / "vocab.txt")
        for fname, content in (extra_files or {}).items():
            put(fname, content)
        files = {p.relative_to(tmp).as_posix(): file_entry(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        from . import __version__

        manifest = {
            "format": MODEL_FORMAT,
            "format_version": MODEL_FORMAT_VERSION,
            "name": name,
            "kind": "dual_encoder",
            "geometry": dict(geometry),
            "dimension": int(dimension),
            "tokenizer": tokenizer.config("vocab.txt"),
            "max_tokens": {role: int(max_tokens[role]) for role in ROLES},
            "graphs": graphs,
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
