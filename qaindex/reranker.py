"""Reranker model directories and the reranking stage over the first stage's candidates.

A *reranker* scores a (question, answer) pair jointly, so answers cannot be encoded once
and indexed; it reorders the candidates a dual-encoder index found. ``qaindex train --model
ap-cnn`` (or ``ap-bilstm``: attentive pooling, dos Santos et al., 2016) exports one as a model
directory of kind ``"reranker"``::

    RERANKER_DIR/
      manifest.json    "kind": "reranker", "graphs": {"reranker": "reranker.onnx"}, tokenizer,
                       max_tokens, score definition, training provenance, file checksums;
                       "dimension" is the width c of the pooled vectors, "geometry" cosine
      reranker.onnx    (question_ids, question_mask) int64 (n, M), (answer_ids, answer_mask)
                       int64 (n, L) -> scores float32 (n,), higher is better; n, M, L dynamic
      vocab.txt

Row ``i`` of the questions is scored with row ``i`` of the answers; :meth:`Reranker.score`
repeats one question for its candidates. A reranker directory where a dual encoder is needed
(``--model``, ``Model.load``), or a dual encoder where a reranker is needed, is refused with a
:class:`~qaindex.ModelFormatError` that says which option takes it.

In a search (:meth:`qaindex.Ranker.search` with ``rerank=``, ``qaindex search --rerank DIR``,
or a reranker stored in the index by ``qaindex build --reranker DIR``), the first stage finds
its best ``depth`` answers and the reranker reorders exactly those: the ids are the first
stage's, the order and the reported ``score`` are the reranker's (``distance`` stays the first
stage's): ``raw_score`` is the reranker's score and ``score`` its calibrated probability of
relevance (``sigmoid(raw_score)`` for a reranker directory without a calibration). Ties keep
the first stage's order.

Example
-------
A dual-encoder model (here the built-in default) is not a reranker; the error says where it goes:

>>> from qaindex.model import DEFAULT_MODEL_DIR
>>> Reranker.load(DEFAULT_MODEL_DIR)
Traceback (most recent call last):
...
qaindex.errors.ModelFormatError: .../manifest.json: is a dual-encoder model (kind "dual_encoder"), not a reranker; ...

With a reranker directory from ``qaindex train --model ap-cnn --out ap-cnn``:
``Reranker.load("ap-cnn").score("who wrote hamlet?", ["Shakespeare.", "It rains."])`` gives
two scores, and ``ranker.search(question, k=5, rerank=Reranker.load("ap-cnn"), depth=50)``
reorders the index's 50 best answers by them.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .checks import flag, path_arg, positive_int, text_list, threads_arg
from .devices import SessionPair, check_device, open_sessions, run_graph
from .errors import IndexFormatError, ModelFormatError, QueryError
from .search.calibration import Calibration
from .store.model_format import (
    copy_model_files,
    read_model_manifest,
    write_model_directory,
)
from .text.tokenizer import Tokenizer, TokenizerError

__all__ = [
    "DEFAULT_RERANK_DEPTH",
    "INPUTS",
    "RerankStage",
    "Reranker",
    "rerank_stage",
    "score_with_session",
    "write_reranker",
]

DEFAULT_RERANK_DEPTH = 50
INPUTS = ("question_ids", "question_mask", "answer_ids", "answer_mask")
STORED_DIRECTORY = "reranker"  # where an index keeps its reranker's copy (inside the snapshot)
_PAIRS_PER_CALL = 256


def model_kind(path: str | os.PathLike[str]) -> str | None:
    """The ``kind`` a model directory's manifest declares, or None when it cannot be read (no validation).

    Example
    -------
    >>> from qaindex.model import DEFAULT_MODEL_DIR
    >>> model_kind(DEFAULT_MODEL_DIR), model_kind("no/such/dir")
    ('dual_encoder', None)
    """
    try:
        manifest = json.loads((Path(path) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    kind = manifest.get("kind") if isinstance(manifest, dict) else None
    return kind if isinstance(kind, str) else None


def score_with_session(
    session: Any,
    tokenizer: Tokenizer,
    max_tokens: Mapping[str, int],
    question: str,
    answers: Sequence[str],
    where: object = "the reranker graph",
) -> np.ndarray:
    """Scores (len(answers),) float32 of one question with each answer through a reranker graph.

    Answers are grouped by length (less padding), ``_PAIRS_PER_CALL`` pairs per call. A graph
    that fails to run or returns other than one number per pair is a
    :class:`~qaindex.ModelFormatError` naming ``where``.
    """
    out = np.zeros(len(answers), dtype=np.float32)
    if not answers:
        return out
    q_ids, q_mask = tokenizer.pad([tokenizer.encode(question, max_tokens["question"])])
    encoded = [tokenizer.encode(a, max_tokens["answer"]) for a in answers]
    order = np.argsort([len(e) for e in encoded], kind="stable")
    for start in range(0, len(order), _PAIRS_PER_CALL):
        rows = order[start : start + _PAIRS_PER_CALL]
        a_ids, a_mask = tokenizer.pad([encoded[r] for r in rows])
        n = len(rows)
        feeds = {
            "question_ids": np.repeat(q_ids, n, axis=0),
            "question_mask": np.repeat(q_mask, n, axis=0),
            "answer_ids": a_ids,
            "answer_mask": a_mask,
        }
        (scores,) = run_graph(session, ["scores"], feeds, where)
        if getattr(scores, "size", None) != n or not np.issubdtype(scores.dtype, np.number):
            raise ModelFormatError(
                f"{where}: the reranker returned {getattr(scores, 'shape', None)} "
                f"({getattr(scores, 'dtype', type(scores).__name__)}) for {n} pairs, expected {n} numbers; "
                "re-export the model"
            )
        out[rows] = np.asarray(scores, dtype=np.float32).reshape(-1)
    return out


class Reranker:
    """A loaded reranker model directory: tokenizer and the two-input ONNX graph.

    Use :meth:`load`; the constructor is internal.

    Example
    -------
    >>> Reranker.load("no/such/reranker")
    Traceback (most recent call last):
    ...
    qaindex.errors.ModelFormatError: no/such/reranker: no such model directory
    """

    geometry = "reranker"

    def __init__(self, directory: Path, manifest: dict[str, Any], tokenizer: Tokenizer, sessions: SessionPair) -> None:
        self.directory = directory
        self.manifest = manifest
        self.tokenizer = tokenizer
        self._sessions = sessions
        self.name: str = manifest["name"]
        self.dimension: int = manifest["dimension"]
        self.max_tokens: dict[str, int] = dict(manifest["max_tokens"])
        # its scores -> P(relevant) (qaindex.search.calibration); sigmoid for rerankers without one
        self.calibration = Calibration.from_manifest(manifest.get("calibration"), directory / "manifest.json")

    @classmethod
    def load(
        cls, path: str | os.PathLike[str], *, device: str = "auto", threads: int | None = 1, verify: bool = True
    ) -> Reranker:
        """Load a reranker model directory.

        Parameters
        ----------
        path : path-like
            A model directory of kind ``"reranker"`` (a dual-encoder directory is refused
            with a message saying to pass it as ``--model``).
        device : {"auto", "cpu", "cuda"}, keyword-only
            Where onnxruntime runs the graph, under the same policy as the model's graphs
            (:func:`qaindex.devices.open_sessions`: ``auto`` keeps small calls on the CPU).
        threads : int or None, keyword-only
            onnxruntime intra-op threads.
        verify : bool, keyword-only
            Check sizes and checksums of every file against the manifest.

        Returns
        -------
        Reranker

        Raises
        ------
        ModelFormatError
            Missing, corrupted or wrong-kind directory, or a graph with other inputs/outputs.
        """
        if not isinstance(path, str | os.PathLike):
            raise QueryError(f"a reranker must be a model directory path, got {type(path).__name__}")
        directory = path_arg(path, "path", what="a reranker model directory")
        check_device(device)
        threads = threads_arg(threads)
        manifest = read_model_manifest(directory, verify=flag(verify, "verify"), expect="reranker")
        try:
            tokenizer = Tokenizer.from_config(manifest["tokenizer"], directory)
        except TokenizerError as exc:
            raise ModelFormatError(f"{directory / 'manifest.json'}: tokenizer: {exc}") from None
        gpath = directory / manifest["graphs"]["reranker"]
        if not gpath.is_file():
            raise ModelFormatError(f"{gpath}: missing; the reranker directory is incomplete, re-export it")
        try:
            sessions = open_sessions(gpath, device=device, threads=threads)
        except Exception as exc:  # onnxruntime raises its own exception types
            if type(exc).__module__.startswith("qaindex"):
                raise
            raise ModelFormatError(f"{gpath}: onnxruntime cannot load it ({exc}); re-export the model") from None
        inputs = tuple(i.name for i in sessions.small.get_inputs())
        outputs = tuple(o.name for o in sessions.small.get_outputs())
        if sorted(inputs) != sorted(INPUTS) or "scores" not in outputs:
            raise ModelFormatError(
                f"{gpath}: reranker graph must take {', '.join(INPUTS)} and give scores (it takes "
                f"{', '.join(inputs)}, gives {', '.join(outputs)}); re-export the model"
            )
        return cls(directory, manifest, tokenizer, sessions)

    @property
    def providers(self) -> dict[str, str]:
        """The onnxruntime execution provider the graph runs on for one question's candidates.

        Under ``device="auto"`` calls of :data:`~qaindex.devices.GPU_MIN_BATCH` or more pairs
        run on CUDA when it really works, smaller ones on the CPU (:mod:`qaindex.devices`).
        """
        return {"reranker": self._sessions.small.get_providers()[0]}

    def score(self, question: str, answers: Sequence[str]) -> np.ndarray:
        """The reranker's score of ``question`` with each answer (higher is better).

        Parameters
        ----------
        question : str
        answers : list of str
            A list (a single string is refused); may be empty.

        Returns
        -------
        numpy.ndarray (len(answers),), float32
        """
        if not isinstance(question, str):
            raise QueryError(f"the question must be text, got {type(question).__name__}")
        (question,) = text_list([question], "question")
        texts = text_list(answers, "answers")
        session = self._sessions.for_rows(len(texts))
        where = self.directory / str(self.manifest["graphs"]["reranker"])
        scores = score_with_session(session, self.tokenizer, self.max_tokens, question, texts, where)
        if np.isnan(scores).any():
            raise ModelFormatError(f"{self.directory}: the reranker returned NaN; the model is broken, re-export it")
        return scores

    def copy_to(self, destination: Path) -> None:
        """Copy the reranker's files (manifest and every listed file) into ``destination``."""
        copy_model_files(self.directory, self.manifest, destination)


# ------------------------------------------------------------------------ the stage in a search

_HitT = TypeVar("_HitT")


@dataclasses.dataclass(frozen=True)
class RerankStage:
    """A reranking stage of one search: ``depth`` first-stage candidates reordered by ``reranker``."""

    reranker: Reranker
    depth: int
    k: int
    min_score: float | None

    def apply(self, questions: Sequence[str], first: list[list[_HitT]]) -> list[list[_HitT]]:
        """Reorder each question's first-stage hits by the reranker's score, keep ``k`` (≥ ``min_score``)."""
        out: list[list[_HitT]] = []
        for question, hits in zip(questions, first, strict=True):
            scores = self.reranker.score(question, [h.answer for h in hits])  # type: ignore[attr-defined]
            order = np.argsort(-scores.astype(np.float64), kind="stable")  # ties: first-stage order
            probs = self.reranker.calibration(scores, scores.max()) if len(scores) else scores
            ranked = [dataclasses.replace(hits[i], score=float(probs[i]), raw_score=float(scores[i])) for i in order]
            if self.min_score is not None:
                ranked = [h for h in ranked if h.score >= self.min_score]
            out.append(ranked[: self.k])
        return out


def rerank_stage(
    stored: Reranker | None, rerank: Any, depth: Any, k: int, min_score: float | None
) -> RerankStage | None:
    """The stage a search runs: ``rerank`` None uses ``stored``; False none; a Reranker or path that one.

    ``depth`` (default :data:`DEFAULT_RERANK_DEPTH`) first-stage candidates are reranked, at
    least ``k``.

    Example
    -------
    >>> rerank_stage(None, None, None, 10, None) is None
    True
    """
    if rerank is None:
        chosen = stored
    elif rerank is False:
        chosen = None
    elif isinstance(rerank, Reranker):
        chosen = rerank
    elif isinstance(rerank, str | os.PathLike):
        chosen = Reranker.load(rerank)
    else:
        raise QueryError(
            f"rerank must be a Reranker, a reranker directory, None (the index's own) or False (none), "
            f"got {type(rerank).__name__}"
        )
    if depth is not None:
        depth = positive_int(depth, "depth")
    if chosen is None:
        return None
    return RerankStage(chosen, max(k, depth or DEFAULT_RERANK_DEPTH), k, min_score)


# ------------------------------------------------------------------------ inside an index


def stored_reranker(
    snap: Path, index_manifest: Mapping[str, Any], *, device: str, threads: int | None
) -> Reranker | None:
    """The reranker an index snapshot stores (``index_manifest["reranker"]``), checked against its listing.

    Its files were verified with the index's (they are listed under ``reranker/``), so they are
    not hashed again; the listing must match the copy's own manifest exactly.
    """
    entry = index_manifest.get("reranker")
    if entry is None:
        return None
    mpath = snap.parent / "manifest.json"
    files = index_manifest["files"]
    prefix = f"{STORED_DIRECTORY}/"
    if (
        not isinstance(entry, dict)
        or entry.get("directory") != STORED_DIRECTORY
        or not isinstance(entry.get("name"), str)
        or f"{prefix}manifest.json" not in files
        or entry.get("manifest_sha256") != files[f"{prefix}manifest.json"]["sha256"]
    ):
        raise IndexFormatError(
            f'{mpath}: field "reranker" must be an object with "name", "directory": "reranker" and the '
            f"checksum listed for reranker/manifest.json, got {entry!r}; the index is corrupted, rebuild it"
        )
    reranker = Reranker.load(snap / STORED_DIRECTORY, device=device, threads=threads, verify=False)
    listed = {n[len(prefix) :]: e for n, e in files.items() if n.startswith(prefix)}
    listed.pop("manifest.json", None)
    theirs = reranker.manifest["files"]
    if listed.keys() != theirs.keys() or any(listed[n] != theirs[n] for n in listed):
        raise IndexFormatError(
            f"{mpath}: the reranker files it lists do not match reranker/manifest.json; the index is corrupted, "
            "rebuild it"
        )
    return reranker


def index_entry(reranker: Reranker, files: Mapping[str, Any]) -> dict[str, Any]:
    """The index manifest's ``reranker`` field for a snapshot whose ``files`` include its copy."""
    return {
        "name": reranker.name,
        "directory": STORED_DIRECTORY,
        "manifest_sha256": files[f"{STORED_DIRECTORY}/manifest.json"]["sha256"],
    }


# ------------------------------------------------------------------------ writing


def write_reranker(
    directory: str | os.PathLike[str],
    *,
    name: str,
    dimension: int,
    tokenizer: Tokenizer,
    max_tokens: Mapping[str, int],
    graph: bytes,
    score: Mapping[str, Any],
    training: Mapping[str, Any] | None = None,
    metrics: Mapping[str, Any] | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> Path:
    """Write a reranker model directory atomically (a sibling directory renamed into place).

    Parameters
    ----------
    directory : path-like
        Target; an existing model directory there is replaced.
    name : str
    dimension : int
        Width of the pooled vectors whose cosine is the score.
    tokenizer, max_tokens
        As for :func:`qaindex.store.model_format.write_model`.
    graph : bytes
        The ONNX graph (inputs :data:`INPUTS`, output ``scores``).
    score, training, metrics, parameters : mapping
        Manifest fields.

    Returns
    -------
    Path
    """
    return write_model_directory(
        directory,
        {"reranker.onnx": graph},
        name=name,
        dimension=dimension,
        tokenizer=tokenizer,
        max_tokens=max_tokens,
        score=score,
        training=training,
        metrics=metrics,
        parameters=parameters,
        fields={"kind": "reranker", "geometry": {"name": "cosine"}, "graphs": {"reranker": "reranker.onnx"}},
    )
