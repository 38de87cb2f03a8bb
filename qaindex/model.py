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
  int64 (batch, seq); first output float32 (batch, dimension). A role named in the
  manifest's ``chunking`` field takes (batch, chunks, tokens) instead (:mod:`qaindex.text.chunking`).
- scorer: inputs ``query`` float32 (n, dimension) and ``candidates`` float32
  (n, m, dimension); outputs ``score`` (n, m), higher is better, and ``distance`` (n, m).

``graphs`` maps roles to files, so an asymmetric model names two encoders and a future
cross-attention reranker adds a ``reranker`` graph without breaking the format; a reader
refuses a ``kind`` it does not know with a message that says so.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import fast_path_switch
from .checks import (
    finite_vectors,
    flag,
    optional_callable,
    path_arg,
    positive_int,
    shown,
    text_list,
    threads_arg,
)
from .devices import SessionPair, check_device, open_sessions, run_graph
from .errors import ModelFormatError, QueryError
from .geometry import Geometry, hyperbolic
from .geometry import get as geometry_of
from .search.calibration import Calibration
from .store.model_format import (
    GEOMETRIES,
    MODEL_FORMAT,
    MODEL_FORMAT_VERSION,
    MODEL_KINDS,
    ROLES,
    copy_model_files,
    read_model_manifest,
    write_model,
)
from .text import chunking as chunking_format
from .text.tokenizer import Tokenizer, TokenizerError

if TYPE_CHECKING:
    from .vector_index import RowSource

__all__ = [
    "DEFAULT_MODEL_DIR",
    "DEFAULT_MODEL_NAME",
    "GEOMETRIES",
    "MODEL_FORMAT",
    "MODEL_FORMAT_VERSION",
    "MODEL_KINDS",
    "Model",
    "resolve_model_path",
    "write_model",
]

DEFAULT_MODEL_DIR = Path(__file__).parent / "models" / "default"
_log = logging.getLogger(__name__)


DEFAULT_MODEL_NAME = "default"  # names the built-in model wherever a model directory is expected


def resolve_model_path(model: str | os.PathLike[str] | None) -> Path:
    """The model directory to use: ``model``, or the built-in default when None or ``"default"``.

    The string ``"default"`` names the built-in model (installed in ``qaindex/models/default``
    inside the package); a directory that happens to be called ``default`` is ``"./default"``.

    Example
    -------
    >>> resolve_model_path("some/dir").name
    'dir'
    >>> resolve_model_path("default") == resolve_model_path(None) == DEFAULT_MODEL_DIR
    True
    """
    if model is not None and not (isinstance(model, str) and model == DEFAULT_MODEL_NAME):
        return path_arg(model, "model", what="a model directory")
    if not (DEFAULT_MODEL_DIR / "manifest.json").is_file():
        raise ModelFormatError(
            "no built-in default model ships with this install of qaindex; pass --model DIR "
            "with a model directory (train one with `qaindex train`)"
        )
    return DEFAULT_MODEL_DIR


_RAGGED_MIN_TEXTS = 16
#: Word pieces of an answer a static encoder reads (a manifest with ``"static_encoder": true``:
#: a bag-of-tokens sum, whose cost is linear in length, so nothing forces its trained cut;
#: longer answers are cut here, and a build reports them).
STATIC_ANSWER_TOKENS = 8192
#: An encoder call holds at most ``batch_size x BATCH_TOKENS_PER_ROW`` token ids: batches of
#: long texts (sorted by length) get fewer rows, so memory stays bounded whatever the cut.
BATCH_TOKENS_PER_ROW = 512


def _groups(lengths: np.ndarray, batch_size: int) -> Iterator[slice]:
    """Consecutive groups of ``lengths`` (ascending): at most ``batch_size`` rows each, and no
    more than ``batch_size * BATCH_TOKENS_PER_ROW`` ids once padded to the group's longest."""
    budget = batch_size * BATCH_TOKENS_PER_ROW
    start, n = 0, len(lengths)
    while start < n:
        end = min(n, start + batch_size)
        while end - start > 1 and (end - start) * int(lengths[end - 1]) > budget:
            end = start + max(1, budget // max(1, int(lengths[end - 1])))
        yield slice(start, end)
        start = end


@dataclass
class _Graphs:
    encoders: dict[str, SessionPair]  # role -> sessions (qaindex.devices: CPU for small calls, maybe CUDA for bulk)
    scorer: SessionPair
    encoder_inputs: dict[str, tuple[str, ...]]


class Model:
    """A loaded dual-encoder model: tokenizer, ONNX encoder(s) and ONNX scorer.

    Use :meth:`load`; the constructor is internal.

    Example
    -------
    >>> model = Model.load()                    # the built-in default; or Model.load("path/to/model")
    >>> q = model.encode(["how do I reset my password?"], role="question")
    >>> q.shape == (1, model.dimension)
    True
    >>> score, dist = model.score(q, model.encode(["Use the reset link.", "Plans cost $5."], role="answer")[None])
    >>> score.shape, bool(score[0, 0] > score[0, 1])
    ((1, 2), True)
    """

    def __init__(self, directory: Path, manifest: dict[str, Any], tokenizer: Tokenizer, graphs: _Graphs) -> None:
        self.directory = directory
        self.manifest = manifest
        self.tokenizer = tokenizer
        self._graphs = graphs
        # each graph role's file (named in errors): the sessions were opened from them at load
        self._files = {role: directory / str(name) for role, name in manifest["graphs"].items()}
        self.name: str = manifest["name"]
        self.dimension: int = manifest["dimension"]
        self.geometry: str = manifest["geometry"]["name"]
        self.max_norm: float | None = manifest["geometry"].get("max_norm")
        # Poincaré ranking rule: "distance" (also when the manifest names none) or
        # "relative" (d(q, a) - d(0, a)); it decides how coarse recall and exact search rank
        self.ranking: str = manifest["geometry"].get("ranking", "distance")
        #: the geometry object (:mod:`qaindex.geometry`) for ``geometry`` and ``ranking``
        self.space: Geometry = geometry_of(self.geometry, self.ranking)
        self.max_tokens: dict[str, int] = dict(manifest["max_tokens"])
        # bilinear models (RDE family): score σ(q·c + b), ranked by the inner product q·c
        self.bias: float = float(manifest["geometry"].get("bias", 0.0))
        # raw score -> P(relevant) (qaindex.search.calibration); sigmoid(raw) for models without one
        self.calibration = Calibration.from_manifest(manifest.get("calibration"), directory / "manifest.json")
        # roles whose encoder reads (batch, chunks, tokens): hierarchical encoders (HRDE)
        self.chunking: dict[str, chunking_format.Chunking] = {
            role: chunking_format.from_manifest(spec, tokenizer) for role, spec in manifest.get("chunking", {}).items()
        }
        # a static encoder reads answers whole (up to STATIC_ANSWER_TOKENS): its cost is linear in length
        self.static_encoder: bool = manifest.get("static_encoder") is True and "answer" not in self.chunking
        if self.static_encoder:
            self.max_tokens["answer"] = max(self.max_tokens["answer"], STATIC_ANSWER_TOKENS)

    # -- loading -----------------------------------------------------------------------
    @staticmethod
    def read_manifest(path: str | os.PathLike[str], *, verify: bool = True) -> dict[str, Any]:
        """Read and validate ``manifest.json`` of a model directory (no ONNX loaded).

        Same as :func:`qaindex.store.model_format.read_model_manifest`.
        """
        return read_model_manifest(path_arg(path, "path", what="a model directory"), verify=flag(verify, "verify"))

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
        check_device(device)
        threads = threads_arg(threads)
        manifest = cls.read_manifest(directory, verify=flag(verify, "verify"))
        try:
            tokenizer = Tokenizer.from_config(manifest["tokenizer"], directory)
        except TokenizerError as exc:
            raise ModelFormatError(f"{directory / 'manifest.json'}: tokenizer: {exc}") from None
        sessions: dict[str, SessionPair] = {}

        def session_for(file: str) -> SessionPair:
            if file not in sessions:
                gpath = directory / file
                if not gpath.is_file():
                    raise ModelFormatError(f"{gpath}: missing; the model directory is incomplete, re-export it")
                try:
                    sessions[file] = open_sessions(gpath, device=device, threads=threads)
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
        for role, pair in encoders.items():
            names = tuple(i.name for i in pair.small.get_inputs())
            if "input_ids" not in names or not set(names) <= {"input_ids", "attention_mask"}:
                raise ModelFormatError(
                    f"{directory / g[f'{role}_encoder']}: encoder inputs are {list(names)}, expected "
                    "input_ids and optionally attention_mask; re-export the model"
                )
            encoder_inputs[role] = names
            rank = 3 if role in manifest.get("chunking", {}) else 2
            got = next(len(i.shape) for i in pair.small.get_inputs() if i.name == "input_ids")
            if got != rank:
                raise ModelFormatError(
                    f"{directory / g[f'{role}_encoder']}: the {role} encoder takes {got}-D input_ids, "
                    f'the manifest\'s "chunking" field implies {rank}-D; re-export the model'
                )
        scorer_inputs = {i.name for i in scorer.small.get_inputs()}
        scorer_outputs = {o.name for o in scorer.small.get_outputs()}
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
        """The onnxruntime execution provider each graph actually runs on for single questions
        and small batches (see :attr:`bulk_providers` for large ones)."""
        out = {f"{role}_encoder": p.small.get_providers()[0] for role, p in self._graphs.encoders.items()}
        out["scorer"] = self._graphs.scorer.small.get_providers()[0]
        return out

    @property
    def bulk_providers(self) -> dict[str, str]:
        """The provider each graph runs on for calls of :attr:`device_policy` ``bulk_from`` rows or more."""
        out = {f"{role}_encoder": p.bulk.get_providers()[0] for role, p in self._graphs.encoders.items()}
        out["scorer"] = self._graphs.scorer.bulk.get_providers()[0]
        return out

    @property
    def device_policy(self) -> dict[str, Any]:
        """``{"bulk_from": rows, "why": reason}``: where the graphs run and why (:mod:`qaindex.devices`)."""
        pair = self._graphs.scorer
        return {"bulk_from": pair.bulk_from, "why": pair.why}

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
            A list of texts (a single string is refused); lone surrogates are refused.
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
        if not isinstance(role, str) or role not in ROLES:
            raise QueryError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
        texts = text_list(texts, "texts")
        batch_size = positive_int(batch_size, "batch_size")
        optional_callable(progress, "progress")
        if role != "question" or not _log.isEnabledFor(logging.INFO):
            return self._run_feeds(role, self._feeds(texts, role, batch_size), len(texts), progress, texts)
        started = time.perf_counter()  # questions are encoded at search time: `qaindex -v search` shows it
        out = self._run_feeds(role, self._feeds(texts, role, batch_size), len(texts), progress, texts)
        _log.info("encoded %d question(s) in %.2f ms", len(texts), (time.perf_counter() - started) * 1000)
        return out

    def _feeds(
        self, texts: list[str], role: str, batch_size: int
    ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """The encoder's inputs for checked texts, batch by batch: ``(rows, feeds)``.

        Tokenizing and padding only (Python work), so that a build can prepare one chunk
        while :meth:`_run_feeds` encodes the previous one in another thread.
        """
        names = self._graphs.encoder_inputs[role]
        for rows, (ids, mask) in self._batches(texts, role, self.max_tokens[role], batch_size):
            feeds = {"input_ids": ids}
            if "attention_mask" in names:
                feeds["attention_mask"] = mask
            yield rows, feeds

    def _run_feeds(
        self,
        role: str,
        batches: Iterable[tuple[np.ndarray, dict[str, np.ndarray]]],
        count: int,
        progress: Callable[[int], None] | None = None,
        texts: Sequence[str] | None = None,
    ) -> np.ndarray:
        """Run the encoder over :meth:`_feeds` output for ``count`` texts: their vectors.

        A vector with a NaN or infinite value is the model's fault, whatever the text: it is
        a :class:`~qaindex.ModelFormatError` naming the model and the first such text
        (``texts``, when given), never stored in an index nor passed on to a search.
        """
        session = self._graphs.encoders[role].for_rows(count)
        out = np.empty((count, self.dimension), dtype=np.float32)
        for rows, feeds in batches:
            vectors = np.asarray(run_graph(session, None, feeds, self._graph_file(f"{role}_encoder"))[0])
            self._check_output(role, vectors, len(rows))
            if not np.isfinite(vectors).all():
                raise self._non_finite(role, rows, vectors, texts)
            out[rows] = vectors
            if progress is not None:
                progress(len(rows))
        if self.max_norm is not None:
            # The encoder keeps points inside the ball (a point on or beyond its boundary is a
            # broken graph: refused); re-project only what a float32 rounding put between
            # max_norm and 1.
            sq = np.einsum("ij,ij->i", out, out, dtype=np.float64)
            if np.any(sq >= 1.0):
                row = int(np.argmax(sq >= 1.0))
                which = f"text {row} ({shown(texts[row])})" if texts is not None else f"text {row}"
                raise ModelFormatError(
                    f"{self.directory}: the model's {role} encoder returned a vector of norm {np.sqrt(sq[row]):.6g} "
                    f"for {which}, outside the unit ball of a Poincaré model; the model is broken, not the text: "
                    "re-export or retrain it, or use another model"
                )
            if np.any(sq > self.max_norm * self.max_norm):
                out = hyperbolic.project(out, max_norm=self.max_norm)
        return out

    def _check_output(self, role: str, vectors: np.ndarray, rows: int) -> None:
        """An encoder's output for a batch of ``rows`` texts: floating point, shape ``(rows, dimension)``."""
        wrong = None
        if vectors.dtype.kind != "f":
            wrong = f"values of type {vectors.dtype} (not floating point)"
        elif vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            wrong = f"shape {vectors.shape}, the manifest says dimension {self.dimension}"
        elif vectors.shape[0] != rows:
            wrong = f"{vectors.shape[0]} vector(s) for a batch of {rows} texts"
        if wrong is not None:
            raise ModelFormatError(
                f"{self.directory}: the model's {role} encoder returned {wrong}; the model is broken: re-export it, "
                "or use another model"
            )

    def _non_finite(
        self, role: str, rows: np.ndarray, vectors: np.ndarray, texts: Sequence[str] | None
    ) -> ModelFormatError:
        bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
        row = int(rows[bad[0]])
        which = f"text {row} ({shown(texts[row])})" if texts is not None else f"{len(bad)} of {len(rows)} texts"
        return ModelFormatError(
            f"{self.directory}: the model's {role} encoder returned NaN or infinite values for {which}; "
            "the model is broken, not the text: re-export or retrain it, or use another model"
        )

    def _batches(
        self, texts: list[str], role: str, limit: int, batch_size: int
    ) -> Iterator[tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]]:
        """The texts tokenized, grouped by length into padded batches: ``(rows, (ids, mask))``."""
        tokenizer = self.tokenizer
        # a few texts (single questions): per-text encoding costs less than the ragged
        # path's fixed numpy work; both give the same ids
        if role in self.chunking or not fast_path_switch.enabled() or len(texts) < _RAGGED_MIN_TEXTS:
            encoded = [tokenizer.encode(t, limit) for t in texts]
            single = len(texts) <= 1
            order = np.zeros(len(texts), np.int64) if single else np.argsort([len(e) for e in encoded], kind="stable")
            for group in _groups(np.array([len(encoded[r]) for r in order], np.int64), batch_size):
                rows = order[group]
                if role in self.chunking:  # (batch, chunks, tokens)
                    yield rows, self.chunking[role].pad([encoded[r] for r in rows])
                else:
                    yield rows, tokenizer.pad([encoded[r] for r in rows])
            return
        flat, starts, lengths = tokenizer.encode_ragged(texts, limit)
        order = np.argsort(lengths, kind="stable")
        for group in _groups(lengths[order], batch_size):
            rows = order[group]
            yield rows, tokenizer.pad_ragged(flat, starts, lengths, rows)

    def score(self, query: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact scores of candidates for each query, through the ONNX scorer.

        Parameters
        ----------
        query : array (n, dimension)
        candidates : array (n, m, dimension)
            Integer or float numbers, all finite, inside the unit ball for Poincaré models
            (anything else is a :class:`~qaindex.QueryError`).

        Returns
        -------
        score, distance : numpy.ndarray (n, m), float32
            ``score`` is higher-is-better; ``distance`` is the geometry's distance
            (Poincaré distance, or 1 - cosine).
        """
        ball = self.space.ball
        q = finite_vectors(query, "query", shape=(None, self.dimension), ball=ball)
        c = finite_vectors(candidates, "candidates", shape=(len(q), None, self.dimension), ball=ball)
        return self.score_checked(q, c)

    def score_checked(self, q: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`score` for arrays already checked (float32, C-contiguous, finite, right shapes)."""
        if c.shape[1] == 0:
            empty = np.zeros((q.shape[0], 0), dtype=np.float32)
            return empty, empty.copy()
        session = self._graphs.scorer.for_rows(q.shape[0])
        where = self._graph_file("scorer")
        score, distance = run_graph(session, ["score", "distance"], {"query": q, "candidates": c}, where)
        shape = (q.shape[0], c.shape[1])
        for name, out in (("score", score), ("distance", distance)):
            if getattr(out, "shape", None) != shape or not np.issubdtype(out.dtype, np.number):
                raise ModelFormatError(
                    f"{where}: the scorer returned {name} of shape {getattr(out, 'shape', None)} "
                    f"({getattr(out, 'dtype', type(out).__name__)}), expected {shape} numbers; re-export the model"
                )
        return np.asarray(score, dtype=np.float32), np.asarray(distance, dtype=np.float32)

    def score_rows(
        self, q: np.ndarray, vectors: np.ndarray | RowSource, rows: np.ndarray, block_bytes: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`score_checked` of each query's candidate ``rows`` ``(n, m)`` (valid row
        numbers of ``vectors``): ``(n, m)`` float32 each. The candidates' vectors are gathered
        and scored in column blocks of at most ``block_bytes``, so that a long candidate list
        never holds ``n × m × dimension`` floats at once.

        Example
        -------
        >>> model = Model.load()
        >>> vecs = np.asarray(model.encode(["reset a password", "export notes"], role="answer"))
        >>> q = model.encode(["how do I reset my password"], role="question")
        >>> score, _ = model.score_rows(q, vecs, np.array([[1, 0]]), 1 << 20)
        >>> bool(score[0, 1] > score[0, 0])
        True
        """
        q = np.ascontiguousarray(q, dtype=np.float32)
        score = np.empty(rows.shape, np.float32)
        dist = np.empty(rows.shape, np.float32)
        for c, gathered in _gathered_blocks(vectors, rows, block_bytes):
            score[:, c : c + gathered.shape[1]], dist[:, c : c + gathered.shape[1]] = self.score_checked(q, gathered)
        return score, dist

    def _graph_file(self, role: str) -> Path:
        """The file of a graph role (``question_encoder``, ``answer_encoder``, ``scorer``)."""
        return self._files[role]

    def copy_to(self, destination: Path) -> None:
        """Copy the model's files (manifest and every listed file) into ``destination``."""
        copy_model_files(self.directory, self.manifest, destination)


def _gathered_blocks(
    vectors: np.ndarray | RowSource, rows: np.ndarray, block_bytes: int
) -> Iterator[tuple[int, np.ndarray]]:
    """The vectors of candidate ``rows`` ``(n, m)`` (valid row numbers) in column blocks of
    at most ``block_bytes`` (at least one column): ``(first column, (n, width, dimension)
    float32)``, so that scoring a huge candidate list gathers a block at a time, not
    ``n × m × dimension`` floats.

    Example
    -------
    >>> vecs = np.eye(3, dtype=np.float32)
    >>> [(c, g.shape) for c, g in _gathered_blocks(vecs, np.array([[0, 1, 2], [2, 1, 0]]), 48)]
    [(0, (2, 2, 3)), (2, (2, 1, 3))]
    """
    n, m = rows.shape
    dim = vectors.shape[1]
    block = max(1, min(m, block_bytes // max(1, n * dim * 4)))
    for c in range(0, m, block):
        cols = rows[:, c : c + block]
        yield c, np.asarray(vectors[cols.ravel()], dtype=np.float32).reshape(n, cols.shape[1], dim)
