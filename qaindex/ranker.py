"""``Ranker``: build, load, search, update and save a question→answer index.

The query and update pipeline. The index directory format (layout, manifest, snapshots) is
in :mod:`qaindex.store.index_format`, the record store in :mod:`qaindex.store.records`, the model
format in :mod:`qaindex.store.model_format`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from . import fast_paths
from .arguments import (
    MAX_INT64,
    choice,
    finite_number,
    finite_vectors,
    flag,
    id_list,
    numeric_table,
    path_arg,
    path_or_records,
    positive_int,
    text_list,
    threads_arg,
)
from .build.tuning import check_target, tune_for_corpus
from .corpus import Record, read_corpus, records_from_dicts
from .devices import check_device, devices_info
from .errors import IndexChangedError, IndexFormatError, ModelFormatError, QAIndexError, QueryError
from .geometry import hyperbolic
from .model import Model
from .reranker import Reranker, index_entry, rerank_stage, stored_reranker
from .search import budget, filters
from .search.fusion import Fusion, fusion_from, hybrid_arrays
from .store.concurrency import ReadWriteLock
from .store.diskspace import writing
from .store.index_checks import check_geometry, check_records, check_vectors, stored_vectors_error
from .store.index_format import (
    INDEX_FORMAT,
    INDEX_FORMAT_VERSION,
    check_model_copy,
    manifest_checksum,
    open_records,
    open_vectors,
    read_index_manifest,
    write_snapshot,
)
from .store.locking import DEFAULT_LOCK_TIMEOUT, check_timeout, index_lock
from .store.ownership import (
    check_writable,
    current_snapshot,
    missing_parents,
    remove_empty,
    remove_garbage,
    remove_snapshot_dir,
)
from .store.records import RecordStore
from .store.storage import verify_files, write_json_atomic
from .text.lexical import DIRECTORY as LEXICAL_DIRECTORY
from .text.lexical import LexicalIndex, build_hybrid
from .text.lexical import check_entry as check_lexical_entry
from .vector_index import BREADTH_PARAM, INDEX_KINDS, CoarseIndex, choose_kind, exact_search

__all__ = ["DEFAULT_OVERFETCH", "INDEX_FORMAT", "INDEX_FORMAT_VERSION", "Hit", "Ranker"]

DEFAULT_OVERFETCH = 10
_log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_T = TypeVar("_T")
Where = Mapping[str, Any] | Callable[[Record], bool]


def _reading(method: Callable[Concatenate[Ranker, _P], _T]) -> Callable[Concatenate[Ranker, _P], _T]:
    """Run a query method under the Ranker's read lock (see :mod:`qaindex.store.concurrency`)."""

    @functools.wraps(method)
    def wrapper(self: Ranker, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with self._lock.read():
            return method(self, *args, **kwargs)

    return wrapper


def _writing(method: Callable[Concatenate[Ranker, _P], _T]) -> Callable[Concatenate[Ranker, _P], _T]:
    """Run an update method under the Ranker's write lock: it waits for searches in flight."""

    @functools.wraps(method)
    def wrapper(self: Ranker, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        with self._lock.write():
            return method(self, *args, **kwargs)

    return wrapper


_QUERY_CHUNK = 256
_MAX_SETTING = 1 << 20  # bound of overfetch, ef_search and HNSW parameters (FAISS takes C ints)


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes
    ----------
    id : str or int
        The answer's id.
    answer : str
        The answer text.
    score : float
        The estimated probability, in [0, 1], that the answer is relevant: the model's
        calibration (:mod:`qaindex.eval.calibration`) of ``raw_score``; ``sigmoid(raw_score)`` for a
        model without one (``info`` says ``uncalibrated``). ``min_score`` filters on it.
    distance : float
        Poincaré distance between question and answer (1 - cosine for cosine models).
    metadata : dict
        The answer's other corpus fields.
    row : int
        The answer's row in the index (as in :meth:`Ranker.search_vectors`), valid until the
        next ``add`` or ``remove``; -1 for a Hit made by hand. Not part of equality or JSON.
    raw_score : float
        The model's own score, higher is better, unbounded (the reranker's with a reranker);
        NaN for a Hit made by hand without one.
    """

    id: str | int
    answer: str
    score: float
    distance: float
    metadata: dict[str, Any] = field(default_factory=dict)
    row: int = field(default=-1, compare=False)
    raw_score: float = math.nan

    def to_json(self) -> dict[str, Any]:
        """``{"id", "answer", "score", "raw_score", "distance", "metadata"}`` (NaN raw_score: null)."""
        return {
            "id": self.id,
            "answer": self.answer,
            "score": self.score,
            "raw_score": None if math.isnan(self.raw_score) else self.raw_score,
            "distance": self.distance,
            "metadata": self.metadata,
        }


def _check_k(k: Any) -> int:
    # any size is accepted: searches bound it by the index size before allocating anything
    return positive_int(k, "k")


def _check_questions(questions: Any) -> list[str]:
    if isinstance(questions, str):
        raise QueryError("search_batch takes a list of questions; use search() for one question")
    out = text_list(questions, "questions", what="question")
    for i, q in enumerate(out):
        if not q.strip():
            where = "the question" if len(out) == 1 else f"question {i + 1}"
            raise QueryError(f"{where} is empty; ask a question with at least one word")
    return out


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    return choice(value, name, choices)


def _check_hnsw(hnsw: Any) -> dict[str, int] | None:
    if hnsw is None:
        return None
    if not isinstance(hnsw, Mapping):
        raise QueryError(f"hnsw must be a mapping of M, ef_construction, ef_search; got {type(hnsw).__name__}")
    limits = {
        "M": 256,
        "ef_construction": 1 << 16,
        "ef_search": _MAX_SETTING,
        "nlist": 1 << 16,
        "nprobe": 1 << 16,
        "refine": _MAX_SETTING,
    }
    out = {}
    for key, value in hnsw.items():
        if key not in limits:
            raise QueryError(
                f"unknown index parameter {key!r}; use {', '.join(limits)} (nlist, nprobe: IVF; M, refine: PQ)"
            )
        out[key] = positive_int(value, f"hnsw[{key!r}]", maximum=limits[key])
    return out


def _check_flag(value: Any, name: str) -> bool:
    return flag(value, name)


class Ranker:
    """A question→answer index: ONNX encoder, FAISS coarse recall, exact ONNX rerank.

    Build with :meth:`build`, or open a saved index with :meth:`load`.

    Example
    -------
    >>> ranker = Ranker.build("examples/faq.jsonl")
    >>> ranker.save("qaindex-index")
    PosixPath('qaindex-index')
    >>> ranker = Ranker.load("qaindex-index")
    >>> [h.id for h in ranker.search("How do I reset my password?", k=3)][0]
    'account-reset-password'
    """

    def __init__(
        self,
        model: Model,
        records: RecordStore,
        vectors: np.ndarray,
        coarse: CoarseIndex,
        *,
        overfetch: int = DEFAULT_OVERFETCH,
        kind_requested: str = "auto",
        path: Path | None = None,
        created: str | None = None,
        snapshot: str | None = None,
        reranker: Reranker | None = None,
        lexical: LexicalIndex | None = None,
    ) -> None:
        self.model = model
        # the BM25 index of hybrid search (qaindex.text.lexical), saved with the index; None: dense only
        self._lexical = lexical
        # the reranking stage searches use by default (saved with the index); None: first stage only
        self.reranker = reranker
        self._reranker_source: tuple[Reranker, Path] | None = None  # its copy in the last saved snapshot
        self._records = records
        self._vectors = vectors
        self._coarse = coarse
        self._coarse_stale = False
        self.overfetch = int(overfetch)
        # bytes one request may use (qaindex.search.budget); None: $QAINDEX_MEMORY_BUDGET or 1 GiB
        self.memory_budget: int | None = None
        self.kind_requested = kind_requested
        self.path = path
        self.created = created or _now()
        # the snapshot each index path held when this Ranker last loaded or saved it
        self._seen: dict[str, str] = {}
        self._lock = ReadWriteLock()
        # where save() copies the model's files from: the model's own directory until this
        # Ranker saves, then its latest snapshot's copy (a save deletes older snapshots, which
        # may be where the model was loaded from). Per Ranker: a Model may be shared.
        self._model_source: Path = model.directory
        self._refresh_mutex = threading.Lock()
        # the snapshot this Ranker serves and its files table, for verify()
        self._served: tuple[str, dict[str, Any]] | None = None
        if path is not None and snapshot is not None:
            self._seen[os.path.realpath(path)] = snapshot

    # -- construction ------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record],
        *,
        model: str | os.PathLike[str] | Model | None = None,
        device: str = "auto",
        index_kind: str = "auto",
        hnsw: Mapping[str, int] | None = None,
        overfetch: int = DEFAULT_OVERFETCH,
        batch_size: int = 256,
        progress: bool = False,
        recall: float | None = None,
        reranker: str | os.PathLike[str] | Reranker | None = None,
        hybrid: bool | None = None,
    ) -> Ranker:
        """Encode a corpus and index it.

        Parameters
        ----------
        corpus : path or iterable
            A JSONL corpus file, or records (dicts in the corpus format, or :class:`Record`).
            A file is read, encoded and stored in chunks, with one chunk of texts in memory
            at a time (:mod:`qaindex.build.streaming`).
        model : path, Model or None, keyword-only
            Model directory or loaded model; None uses the built-in default model.
        device : {"auto", "cpu", "cuda"}, keyword-only
        index_kind : {"auto", "flat", "hnsw", "hnsw_sq8", "ivf", "ivf_sq8"}, keyword-only
            ``auto``: exact ``flat`` up to 20,000 answers, ``hnsw`` above (the other kinds:
            :mod:`qaindex.vector_index`).
        hnsw : mapping, keyword-only
            Index parameters: ``M``, ``ef_construction``, ``ef_search`` for HNSW kinds,
            ``nlist``, ``nprobe`` for IVF kinds, ``M``, ``refine`` for ``pq`` (defaults depend
            on the corpus size).
        overfetch : int, keyword-only
            The coarse stage recalls ``k * overfetch`` candidates for the exact rerank.
        batch_size : int, keyword-only
            Answers per encoder call.
        progress : bool, keyword-only
            Show a progress bar on stderr (when it is a terminal).
        recall : float, keyword-only, optional
            Tune the search breadth (``ef_search``, ``nprobe``) to the smallest value whose
            recall@10 against exact search reaches this (e.g. 0.99), measured on up to 200
            of the corpus's questions (or answer texts when it has none); see
            :mod:`qaindex.build.tuning`. The result is saved with the index and shown by ``info``.
        reranker : path, Reranker or None, keyword-only
            A reranker model directory (:mod:`qaindex.reranker`, e.g. AP-CNN) stored with the
            index: searches then rerank the first stage's candidates with it by default.
        hybrid : bool or None, keyword-only
            Also build a BM25 index of the answers (:meth:`enable_hybrid`), saved with the
            index: searches then fuse both rankings by default (:mod:`qaindex.search.fusion`). None
            (default): when PyStemmer is installed (the ``cpu``/``gpu``/``hybrid`` extras);
            True: required (an error names the extra); False: dense only.

        Returns
        -------
        Ranker
        """
        overfetch = positive_int(overfetch, "overfetch", maximum=_MAX_SETTING)
        batch_size = positive_int(batch_size, "batch_size")
        _check_flag(progress, "progress")
        hybrid = build_hybrid(hybrid)  # a missing extra fails before any encoding
        _check_choice(device, "device", ("auto", "cpu", "cuda"))
        _check_choice(index_kind, "index_kind", INDEX_KINDS)
        hnsw = _check_hnsw(hnsw)
        if recall is not None:
            recall = check_target(recall)
        if model is not None and not isinstance(model, str | os.PathLike | Model):
            raise QueryError(f"model must be a model directory, a Model or None, got {type(model).__name__}")
        if isinstance(model, str | os.PathLike):
            path_arg(model, "model", what="a model directory")
        if reranker is not None and not isinstance(reranker, Reranker):
            path_arg(reranker, "reranker", what="a reranker model directory")
        is_path = path_or_records(corpus, "corpus")
        # Encoding overlaps Python work (a file's next chunk, qaindex.build.streaming; the stored
        # records below), which takes one core: onnxruntime gets the other (with two threads
        # it competes with that work, and it is much slower on a loaded machine).
        threads = 1 if fast_paths.enabled() else None
        loaded = model if isinstance(model, Model) else Model.load(model, device=device, threads=threads)
        if reranker is not None and not isinstance(reranker, Reranker):
            reranker = Reranker.load(reranker, device=device)
        if is_path:  # streamed: one chunk of texts in memory at a time (qaindex.build.streaming)
            source: str | os.PathLike[str] = corpus  # type: ignore[assignment]
            started = time.perf_counter()
            store, matrix, coarse = _build_from_file(source, loaded, index_kind, hnsw, device, batch_size, progress)
            _log.info("encoded %d answers with %s in %.2f s", len(store), loaded.name, time.perf_counter() - started)
            if recall is not None and coarse.kind != "flat":  # flat is exact: nothing to tune
                tune_for_corpus(coarse, loaded, store, matrix, target=recall, overfetch=overfetch)
            built = cls(
                loaded, store, matrix, coarse, overfetch=overfetch, kind_requested=index_kind, reranker=reranker
            )
            return built.enable_hybrid() if hybrid else built
        records = records_from_dicts(corpus)  # type: ignore[arg-type]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="qaindex-records") as pool:
            # The stored lines are encoded while onnxruntime (which releases the GIL) runs.
            stored = pool.submit(RecordStore.from_records, records) if fast_paths.enabled() else None
            vectors = _encode_answers(loaded, [r.answer for r in records], batch_size, progress)
            store = RecordStore.from_records(records) if stored is None else stored.result()
        _log.info("encoded %d answers with %s in %.2f s", len(records), loaded.name, time.perf_counter() - started)
        kind = choose_kind(index_kind, len(records))
        coarse = CoarseIndex(
            loaded.geometry, loaded.dimension, kind, hnsw, device=device, ranking=loaded.ranking, count=len(records)
        )
        coarse.add(vectors)
        if recall is not None and kind != "flat":  # flat is exact: nothing to tune
            tune_for_corpus(coarse, loaded, records, vectors, target=recall, overfetch=overfetch)
        built = cls(
            loaded,
            store,
            vectors,
            coarse,
            overfetch=overfetch,
            kind_requested=index_kind,
            reranker=reranker,
        )
        return built.enable_hybrid() if hybrid else built

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str = "auto",
        threads: int | None = 1,
        verify: bool = True,
    ) -> Ranker:
        """Open a saved index (cheap: vectors, records and FAISS index are memory-mapped).

        Parameters
        ----------
        path : path-like
            The index directory.
        device : {"auto", "cpu", "cuda"}, keyword-only
        threads : int or None, keyword-only
            onnxruntime threads (1 is fastest for single questions; None: all cores).
        verify : bool, keyword-only
            Check the size and SHA-256 of every file of the index and of its model copy,
            whatever its size (each file is read once, streamed). ``False`` skips the
            checksums, for a faster start of a trusted index; the manifests are still
            validated and every path they name must stay inside the index directory.

        Returns
        -------
        Ranker

        Raises
        ------
        IndexFormatError, ModelFormatError
            The index is missing, of an unknown version, corrupted, or names paths outside
            its directory; the message names the file and field.
        """
        root = path_arg(path, "path", what="an index directory")
        check_device(device)
        threads = threads_arg(threads)
        verify = flag(verify, "verify")
        for attempt in range(3):
            manifest = read_index_manifest(root)
            try:
                return cls._open_snapshot(root, manifest, device=device, threads=threads, verify=verify)
            except (IndexFormatError, ModelFormatError, FileNotFoundError):
                # A concurrent save may have replaced the snapshot between reading the
                # manifest and opening its files: read the manifest again.
                if attempt == 2 or read_index_manifest(root)["snapshot"] == manifest["snapshot"]:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _open_snapshot(
        cls, root: Path, manifest: dict[str, Any], *, device: str, threads: int | None, verify: bool
    ) -> Ranker:
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
        check_geometry(mpath, model)
        count = manifest["count"]
        vectors, offsets = open_vectors(snap, count, model.dimension)
        records = open_records(snap, offsets)
        if verify:  # scan the content the checksums vouched for (qaindex.store.index_checks)
            check_vectors(snap / "vectors.npy", vectors, ball=model.geometry == "poincare", scan=True)
            records._ids = check_records(snap / "records.jsonl", records.data, records.offsets)
        coarse_info = manifest["coarse"]
        coarse = CoarseIndex.load(
            snap / "coarse.faiss",
            geometry=model.geometry,
            dimension=model.dimension,
            kind=coarse_info["kind"],
            params=coarse_info.get("params"),
            count=count,
            device=device,
            ranking=model.ranking,
            tuning=coarse_info.get("tuning"),
        )
        ranker = cls(
            model,
            records,
            vectors,
            coarse,
            overfetch=manifest["overfetch"],
            kind_requested=coarse_info.get("requested", coarse_info["kind"]),
            path=root,
            created=manifest.get("created"),
            snapshot=manifest["snapshot"],
            reranker=stored_reranker(snap, manifest, device=device, threads=threads),
            lexical=_stored_lexical(snap, manifest, mpath),
        )
        ranker._served = (manifest["snapshot"], manifest["files"])
        return ranker

    @classmethod
    @contextlib.contextmanager
    def edit(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str = "auto",
        threads: int | None = None,
        verify: bool = True,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> Iterator[Ranker]:
        """Read-modify-write an index under its writer lock: load, yield, save on success.

        Other writers (``qaindex add``/``remove``/``build``, other ``edit`` blocks, any
        :meth:`save` to this path) wait until the block ends, so no update is lost. If the
        block raises, nothing is saved. Readers are never blocked.

        Parameters
        ----------
        path : path-like
            An existing index directory.
        device, threads, verify
            As for :meth:`load`.
        lock_timeout : float or None, keyword-only
            Seconds to wait for another writer before raising :class:`IndexLockedError`;
            None or ``math.inf`` waits as long as it takes.

        Example
        -------
        >>> _ = Ranker.build("examples/faq.jsonl").save("qaindex-index")
        >>> with Ranker.edit("qaindex-index") as ranker:
        ...     ranker.add([{"id": "new", "answer": "A new answer."}])
        1
        >>> len(Ranker.load("qaindex-index")) == len(Ranker.build("examples/faq.jsonl")) + 1
        True
        """
        lock_timeout = check_timeout(lock_timeout)  # before any work
        root = path_arg(path, "path", what="an index directory")
        check_device(device)
        threads = threads_arg(threads)
        verify = flag(verify, "verify")
        read_index_manifest(root)  # a clear error for a missing index, before any lock file
        with index_lock(root, timeout=lock_timeout):
            ranker = cls.load(root, device=device, threads=threads, verify=verify)
            yield ranker
            ranker.save(root, lock_timeout=lock_timeout)

    # -- queries -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._records)

    @property
    def dimension(self) -> int:
        return self.model.dimension

    @property
    def index_kind(self) -> str:
        return self._coarse.kind

    def get(self, id: str | int) -> Record:
        """The stored record with this id (KeyError-like :class:`QueryError` if absent).

        Parameters
        ----------
        id : str or int
            An answer's id (as in the corpus, or as given to an id-less answer).

        Returns
        -------
        Record
            Its ``id``, ``answer``, ``questions`` and ``metadata``.

        Example
        -------
        >>> record = ranker.get("account-reset-password")
        >>> record.id, record.metadata["category"]
        ('account-reset-password', 'account')
        """
        if isinstance(id, bool) or not isinstance(id, str | int | np.integer):
            raise QueryError(f"id must be a str or int, got {type(id).__name__} {id!r}")
        if isinstance(id, np.integer):
            id = int(id)
        row = self._records.ids().get(str(id))
        if row is None:
            raise QueryError(f"no answer with id {json.dumps(id)} in the index")
        return self._records.get(row)

    @_writing
    def configure(
        self,
        *,
        overfetch: int | None = None,
        ef_search: int | None = None,
        nprobe: int | None = None,
        refine: int | None = None,
        memory_budget: int | None = None,
    ) -> None:
        """Change the speed/recall trade-off of later searches (saved with the index).

        Each breadth applies to its own index kinds and is ignored by the others.
        ``memory_budget`` is this Ranker's own (not saved).

        Parameters
        ----------
        overfetch : int, optional
            The coarse stage recalls ``k * overfetch`` candidates for the exact rerank.
        ef_search : int, optional
            HNSW search breadth (at least the number of candidates is always used).
        nprobe : int, optional
            IVF lists scanned per question (at most ``nlist``).
        refine : int, optional
            PQ codes re-scored with the float vectors, per candidate.
        memory_budget : int, optional
            Bytes one request may use (at least 1 MiB; default ``$QAINDEX_MEMORY_BUDGET`` or
            1 GiB): results over half of it are refused before any work, the rest bounds the
            chunks of working memory (:mod:`qaindex.search.budget`).

        Example
        -------
        >>> ranker.configure(ef_search=512, overfetch=20)
        >>> ranker.recall(10)["recall"]
        1.0
        """
        if overfetch is not None:
            overfetch = positive_int(overfetch, "overfetch", maximum=_MAX_SETTING)
        breadths = {"ef_search": ef_search, "nprobe": nprobe, "refine": refine}
        checked = {
            name: positive_int(value, name, maximum=_MAX_SETTING)
            for name, value in breadths.items()
            if value is not None
        }
        if memory_budget is not None:
            memory_budget = budget.check_budget_value(memory_budget)
        if overfetch is not None:
            self.overfetch = overfetch
        if memory_budget is not None:
            self.memory_budget = memory_budget
        for name, value in checked.items():
            if BREADTH_PARAM.get(self._coarse.kind) == name:
                self._coarse.set_breadth(value)

    @_writing
    def enable_hybrid(self) -> Ranker:
        """Build the BM25 index of hybrid search from the stored answers (replacing any).

        Saved with the index; searches then fuse dense and BM25 rankings unless told
        ``hybrid=False``. Needs PyStemmer (``pip install 'qaindex[hybrid]'``).

        Returns
        -------
        Ranker
            This ranker.

        Example
        -------
        >>> ranker.enable_hybrid().info()["hybrid"]["kind"]
        'bm25'
        """
        self._lexical = LexicalIndex.from_texts([self._records.get(row).answer for row in range(len(self))])
        return self

    @property
    def has_hybrid(self) -> bool:
        """Whether the index has a lexical (BM25) index for hybrid search."""
        return self._lexical is not None

    def _hybrid_setting(self, hybrid: Any, fusion: Any) -> Fusion | None:
        """The fusion a search uses, or None for a dense search."""
        if hybrid is not None:
            _check_flag(hybrid, "hybrid")
        chosen = fusion_from(fusion)
        if hybrid is False or (hybrid is None and self._lexical is None):
            return None
        if self._lexical is None:
            raise QueryError(
                "this index has no lexical index, so it cannot search with hybrid=True; build it with "
                "`qaindex build CORPUS --hybrid` (Python: Ranker.build(..., hybrid=True) or ranker.enable_hybrid())"
            )
        return chosen

    def records(self) -> Iterator[Record]:
        """Every stored record, in row order.

        Example
        -------
        >>> [r.id for r in ranker.records()][:2]
        ['account-create', 'account-verify-email-resend']
        """
        for row in range(len(self)):
            yield self._records.get(row)

    def search(
        self,
        question: str,
        k: int = 10,
        *,
        where: Where | None = None,
        min_score: float | None = None,
        rerank: Reranker | str | os.PathLike[str] | bool | None = None,
        depth: int | None = None,
        hybrid: bool | None = None,
        fusion: Fusion | Mapping[str, Any] | None = None,
    ) -> list[Hit]:
        """The ``k`` best answers for one question, best first.

        Parameters
        ----------
        question : str
            Non-empty text.
        k : int
            Number of hits, any positive integer: the list is shorter when the index holds
            fewer than ``k`` answers (``k`` is bounded by the index size before any work).
        where : mapping or callable, keyword-only, optional
            Only answers that match: ``{"category": "billing"}`` keeps answers whose metadata
            field equals the value, ``{"category": ["billing", "account"]}`` any of the values
            (``"id"`` matches the answer's id); every field must match. A function of a
            :class:`~qaindex.Record` returning True or False works too. A field that no
            answer has is a :class:`~qaindex.QueryError` naming the fields that exist. When
            few answers match, they are scored exactly (pre-filter), else the index is
            searched wider and the matching hits kept (:mod:`qaindex.search.filters`).
        min_score : float, keyword-only, optional
            Drop hits whose ``score`` (the calibrated probability of relevance, in [0, 1]) is
            below this, e.g. 0.5.
        rerank : Reranker, path, False or None, keyword-only
            Reranking stage: the first stage's best ``depth`` answers (those that pass
            ``where``) are reordered by this reranker (:mod:`qaindex.reranker`), which then
            gives the hits' ``score`` (``min_score`` applies to it); ``distance`` stays the
            first stage's. None (default) uses the reranker stored in the index, if any;
            False searches without one.
        depth : int, keyword-only, optional
            First-stage candidates to rerank (default 50, at least ``k``).
        hybrid : bool or None, keyword-only
            Fuse the dense ranking with the index's BM25 ranking (:mod:`qaindex.search.fusion`): the
            candidates are the dense stage's ``k × overfetch`` best and BM25's ``k × overfetch``
            best. None (default): hybrid when the index has a lexical index (built with
            ``hybrid=True`` or :meth:`enable_hybrid`); True requires one; False: dense only.
        fusion : Fusion or mapping, keyword-only, optional
            The fusion rule (default :data:`qaindex.search.fusion.DEFAULT_FUSION`).

        Returns
        -------
        list of Hit

        Example
        -------
        >>> ranker.search("can I get a refund?", k=1)[0].id
        'billing-refund-policy'
        >>> [h.metadata["category"] for h in ranker.search("refund", k=2, where={"category": "account"})]
        ['account', 'account']
        """
        if not isinstance(question, str):
            raise QueryError(f"the question must be text, got {type(question).__name__}")
        return self.search_batch(
            [question], k, where=where, min_score=min_score, rerank=rerank, depth=depth, hybrid=hybrid, fusion=fusion
        )[0]

    @_reading
    def search_batch(
        self,
        questions: Sequence[str],
        k: int = 10,
        *,
        where: Where | None = None,
        min_score: float | None = None,
        rerank: Reranker | str | os.PathLike[str] | bool | None = None,
        depth: int | None = None,
        hybrid: bool | None = None,
        fusion: Fusion | Mapping[str, Any] | None = None,
    ) -> list[list[Hit]]:
        """:meth:`search` for many questions at once (one list of hits per question).

        Parameters
        ----------
        questions : list of str
            Non-empty texts (a single string is refused: use :meth:`search`).
        k : int
            Hits per question; each list has ``min(k, len(self))`` hits or fewer.
        where, min_score, rerank, depth, hybrid, fusion : keyword-only, optional
            As for :meth:`search`.

        Returns
        -------
        list of list of Hit

        Example
        -------
        >>> [len(h) for h in ranker.search_batch(["refund?", "reset password"], k=2)]
        [2, 2]
        """
        qs = _check_questions(questions)
        k = _check_k(k)
        flt = filters.compile_where(where)
        if min_score is not None:
            min_score = finite_number(min_score, "min_score", optional=True)
        stage = rerank_stage(self.reranker, rerank, depth, k, min_score)
        fused = self._hybrid_setting(hybrid, fusion)
        if stage is not None:  # the first stage finds `depth` candidates; the reranker orders and cuts them
            k, min_score = stage.depth, None
        if not qs:
            return []
        k = min(k, len(self))
        limit = budget.request_budget(self.memory_budget)
        budget.check_result(
            len(qs) * k * self._hit_bytes(),
            limit,
            f"a search of {len(qs):,} question(s) for {k:,} hits each",
            "ask fewer questions per call or a smaller k (or rerank depth)",
        )
        qv = self.model.encode(qs, role="question")

        def first_stage(pick: list[int], width: int) -> list[list[Hit]]:
            if fused is None:
                return self.hits(*self.search_vectors(qv[pick], width))
            m = min(len(self), width * self.overfetch)
            rows = self._candidates(qv[pick], m)
            picked = [qs[i] for i in pick]
            arrays = hybrid_arrays(self.model, self._vectors, self._lexical, picked, qv[pick], rows, width, fused)
            if np.isnan(arrays[0]).any():  # queries are checked: a damaged vectors.npy loaded with verify=False
                raise stored_vectors_error(self._vectors_source(), arrays[2][np.isnan(arrays[0])])
            return self.hits(*arrays)

        if flt is None:
            first = [_cut(row, k, min_score) for row in first_stage(list(range(len(qs))), k)]
            return stage.apply(qs, first) if stage is not None else first
        out: list[list[Hit]]
        if fused is None:
            # pre-filter (exact scoring of the matching answers) or post-filter: qaindex.search.filters
            found = filters.plan(
                self._records, self._vectors, qv, k, flt, search=self.search_vectors, candidates=self._candidates,
                scorer=self.model.score_checked, overfetch=self.overfetch,
            )  # fmt: skip
            out = [_cut(self.hits(s[None], d[None], r[None])[0], k, min_score) for s, d, r in found]
        else:
            rows = filters.matching_rows(self._records, flt) if flt.predicate is None else None
            if rows is not None and len(rows) <= filters.prefilter_limit(k, self.overfetch, len(self)):
                out = self._fused_among(qs, qv, rows, k, fused, min_score)
            else:  # a fused search widens its first stage until each question has k matching hits
                out = [[] for _ in qs]
                pending = list(range(len(qs)))
                width = min(len(self), 4 * k)
                while pending:
                    rows_hits = first_stage(pending, width)
                    still = []
                    for i, hits in zip(pending, rows_hits, strict=True):
                        kept = _cut([h for h in hits if flt.matches(self._records.get(h.row))], k, min_score)
                        out[i] = kept
                        if len(kept) < k and width < len(self):  # fused scores need not fall with rank: go on
                            still.append(i)
                    pending = still
                    width = min(len(self), width * 4)
        return stage.apply(qs, out) if stage is not None else out

    def _fused_among(
        self, qs: list[str], qv: np.ndarray, rows: np.ndarray, k: int, fused: Fusion, min_score: float | None
    ) -> list[list[Hit]]:
        """Hybrid search among ``rows`` (a filter's few matches): every one scored exactly and by
        BM25, then fused, as an unfiltered hybrid search ranks its candidates."""
        if len(rows) == 0:
            return [[] for _ in qs]
        allowed = np.zeros(len(self), dtype=bool)
        allowed[rows] = True
        dense = np.ascontiguousarray(np.broadcast_to(rows, (len(qs), len(rows))))
        arrays = hybrid_arrays(self.model, self._vectors, self._lexical, qs, qv, dense, k, fused, allowed=allowed)
        return [_cut(row, k, min_score) for row in self.hits(*arrays)]

    def _hit_bytes(self) -> int:
        """About what one Hit costs in memory (:mod:`qaindex.search.budget`)."""
        return budget.HIT_OVERHEAD + int(self._records.offsets[-1]) // max(1, len(self))

    @_reading
    def hits(self, scores: Any, distances: Any, rows: Any) -> list[list[Hit]]:
        """Hits from the arrays of :meth:`search_vectors` (rows ``-1`` are skipped).

        Parameters
        ----------
        scores, distances : array (n, w)
        rows : int array (n, w)
            Row numbers of stored answers, ``-1`` where missing.

        Returns
        -------
        list of list of Hit
            One list per query, in the arrays' order.

        Example
        -------
        >>> qv = ranker.model.encode(["refund?"], role="question")
        >>> [h.id for h in ranker.hits(*ranker.search_vectors(qv, 2))[0]] == [
        ...     h.id for h in ranker.search("refund?", k=2)]
        True
        """
        s = numeric_table(scores, "scores")
        d = numeric_table(distances, "distances")
        r = numeric_table(rows, "rows", integer=True)
        if s.ndim != 2 or s.shape != d.shape or s.shape != r.shape:
            raise QueryError(
                f"scores, distances and rows must be 2-D arrays of one shape, got {s.shape}, {d.shape}, {r.shape}"
            )
        if r.size and (not np.issubdtype(r.dtype, np.integer) or r.max() >= len(self) or r.min() < -1):
            raise QueryError(f"rows must be integers in [-1, {len(self) - 1}] (from search_vectors of this index)")
        budget.check_result(
            r.size * self._hit_bytes(),
            budget.request_budget(self.memory_budget),
            f"hits for {r.shape[0]:,} x {r.shape[1]:,} rows",
            "pass fewer rows per call",
        )
        out: list[list[Hit]] = []
        # raw score (and its distance below the best of its row) -> P(relevant), qaindex.eval.calibration
        best = np.where(r >= 0, s, -np.inf).max(axis=1, keepdims=True) if s.size else s
        probs = self.model.calibration(s, best)
        for srow, prow, drow, rrow in zip(s, probs, d, r, strict=True):
            found = []
            for score, prob, dist, row in zip(srow.tolist(), prow.tolist(), drow.tolist(), rrow.tolist(), strict=True):
                if row < 0:
                    continue
                rec = self._records.get(row)
                found.append(Hit(rec.id, rec.answer, prob, dist + 0.0, dict(rec.metadata), row, score + 0.0))
            out.append(found)
        return out

    @_reading
    def search_vectors(
        self, queries: np.ndarray, k: int, *, use_coarse: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Search with question vectors; FAISS-style arrays.

        Parameters
        ----------
        queries : array (n, dimension)
            Question vectors (from ``model.encode(..., role="question")``): integer or float
            numbers, all finite (inside the unit ball for Poincaré models).
        k : int
            Any positive integer; the arrays have ``min(k, len(self))`` columns, so a huge
            ``k`` costs no more than ``k = len(self)``.
        use_coarse : bool, keyword-only
            Go through FAISS even when ``k * overfetch`` covers every answer (by default
            such small searches rerank every answer exactly and skip FAISS).

        Returns
        -------
        scores : numpy.ndarray (n, min(k, len(self))), float32, ``-inf`` where missing
        distances : numpy.ndarray (n, min(k, len(self))), float32, ``inf`` where missing
        rows : numpy.ndarray (n, min(k, len(self))), int64, ``-1`` where missing (an
            approximate index may recall fewer candidates than asked)

        Example
        -------
        >>> qv = ranker.model.encode(["refund?"], role="question")
        >>> ranker.search_vectors(qv, 10**12)[2].shape == (1, len(ranker))
        True
        """
        k = min(_check_k(k), len(self))
        _check_flag(use_coarse, "use_coarse")
        q = self._check_queries(queries)
        limit = budget.request_budget(self.memory_budget)
        budget.check_result(
            len(q) * k * budget.ARRAY_ENTRY_BYTES,
            limit,
            f"a search of {len(q):,} question vectors for {k:,} hits each",
            "search fewer vectors per call or a smaller k",
        )
        m = min(len(self), k * self.overfetch)
        budget.check_work(
            m * budget.CANDIDATE_BYTES,
            limit,
            f"ranking {m:,} candidates (k={k:,} x overfetch {self.overfetch})",
            "use a smaller k or overfetch",
        )
        step = budget.chunk(m * budget.CANDIDATE_BYTES, limit, _QUERY_CHUNK)
        parts = [self._search_chunk(q[s : s + step], k, use_coarse, limit) for s in range(0, len(q), step)]
        if not parts:
            return (
                np.zeros((0, k), np.float32),
                np.zeros((0, k), np.float32),
                np.zeros((0, k), np.int64),
            )
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]

    def _check_queries(self, queries: Any) -> np.ndarray:
        return finite_vectors(queries, "queries", shape=(None, self.dimension), ball=self.model.geometry == "poincare")

    @_reading
    def candidates(self, queries: np.ndarray, m: int, *, use_coarse: bool = False) -> np.ndarray:
        """Rows recalled by the coarse stage (all rows when ``m >= len(self)``, unless
        ``use_coarse``).

        Parameters
        ----------
        queries : array (n, dimension)
            Question vectors, as for :meth:`search_vectors`.
        m : int
            Candidates per question, any positive integer (bounded by the index size).
        use_coarse : bool, keyword-only

        Returns
        -------
        numpy.ndarray (n, min(m, len(self))), int64, ``-1`` where fewer were recalled

        Example
        -------
        >>> ranker.candidates(ranker.model.encode(["refund?"], role="question"), 3).shape
        (1, 3)
        """
        m = min(positive_int(m, "m"), len(self))
        _check_flag(use_coarse, "use_coarse")
        queries = self._check_queries(queries)
        limit = budget.request_budget(self.memory_budget)
        budget.check_result(
            len(queries) * m * 8,
            limit,
            f"candidates of {len(queries):,} question vectors, {m:,} each",
            "pass fewer vectors per call or a smaller m",
        )
        step = budget.chunk(m * budget.CANDIDATE_BYTES, limit, max(1, len(queries)))
        if step >= len(queries):
            return self._candidates(queries, m, use_coarse=use_coarse)
        starts = range(0, len(queries), step)
        return np.concatenate([self._candidates(queries[s : s + step], m, use_coarse=use_coarse) for s in starts])

    def _candidates(self, queries: np.ndarray, m: int, *, use_coarse: bool = False) -> np.ndarray:
        total = len(self)
        if m >= total and not use_coarse:
            return np.broadcast_to(np.arange(total, dtype=np.int64), (len(queries), total)).copy()
        self._refresh_coarse()
        # a plain ndarray view of the memory map: fancy indexing skips np.memmap's overhead
        return self._coarse.search(queries, m, vectors=np.asarray(self._vectors))

    def _search_chunk(
        self, q: np.ndarray, k: int, use_coarse: bool, limit: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(q)
        m = min(len(self), k * self.overfetch)
        rows = self._candidates(q, m, use_coarse=use_coarse)
        valid = rows >= 0
        all_valid = bool(valid.all())
        safe_rows = rows if all_valid else np.where(valid, rows, 0)
        # the candidates' vectors are gathered and scored in column blocks within the budget
        width = rows.shape[1]
        block = budget.chunk(n * self.dimension * 4 * budget.SCORER_COPIES, limit, max(1, width))
        vectors = np.asarray(self._vectors)
        if block >= width:
            gathered = np.asarray(vectors[safe_rows.ravel()], dtype=np.float32)
            score, dist = self.model.score_checked(q, gathered.reshape(n, width, self.dimension))
        else:
            score = np.empty((n, width), np.float32)
            dist = np.empty((n, width), np.float32)
            for c in range(0, width, block):
                cols = safe_rows[:, c : c + block]
                gathered = np.asarray(vectors[cols.ravel()], dtype=np.float32)
                score[:, c : c + block], dist[:, c : c + block] = self.model.score_checked(
                    q, gathered.reshape(n, cols.shape[1], self.dimension)
                )
        if not np.isfinite(score).all():  # queries are checked: a damaged vectors.npy loaded with verify=False
            raise stored_vectors_error(self._vectors_source(), safe_rows[~np.isfinite(score)])
        if not all_valid:
            score = np.where(valid, score, -np.inf)
            dist = np.where(valid, dist, np.inf)
            rows = np.where(valid, rows, np.iinfo(np.int64).max)
        # best score first; ties by distance, then by row (missing rows sort last)
        order = np.lexsort((rows, dist, -score), axis=-1)[:, :k]
        pick = (np.arange(n)[:, None], order)
        w = order.shape[1]
        # k <= len(self) here (search_vectors bounds it), so nothing below scales with a huge k
        top_s = np.full((n, k), -np.inf, dtype=np.float32)
        top_d = np.full((n, k), np.inf, dtype=np.float32)
        top_r = np.full((n, k), -1, dtype=np.int64)
        top_s[:, :w] = score[pick]
        top_d[:, :w] = dist[pick]
        top_r[:, :w] = np.where(np.isneginf(top_s[:, :w]), -1, rows[pick])
        return top_s, top_d, top_r

    @_reading
    def recall(
        self,
        k: int = 10,
        *,
        questions: Sequence[str] | None = None,
        sample: int = 200,
        seed: int = 0,
    ) -> dict[str, Any]:
        """Recall@k of the coarse stage and of the full pipeline against exact search.

        The ground truth is a brute-force float64 Poincaré (or cosine) ranking of every
        stored answer. Questions default to a sample of the questions stored with the
        answers, or the answer texts themselves when none are stored.

        Parameters
        ----------
        k : int
            Positive; bounded by the index size.
        questions : list of str, keyword-only, optional
            Questions to measure with (default: a sample of the stored ones).
        sample : int, keyword-only
            How many stored questions to sample (positive).
        seed : int, keyword-only
            Seed of the sample (non-negative).

        Returns
        -------
        dict
            ``{"k", "queries", "candidates", "coarse_recall", "recall", "source"}``.

        Example
        -------
        >>> ranker.recall(k=10)["recall"]
        1.0
        """
        k = _check_k(k)
        sample = positive_int(sample, "sample")
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed <= MAX_INT64:
            raise QueryError(f"seed must be a non-negative integer, got {seed!r}")
        source = "given"
        if questions is None:
            stored = [q for rec in self.records() for q in rec.questions]
            source = "stored questions"
            if not stored:
                stored = [rec.answer for rec in self.records()]
                source = "answer texts"
            rng = np.random.default_rng(seed)
            pick = rng.choice(len(stored), size=min(sample, len(stored)), replace=False)
            questions = [stored[i] for i in sorted(pick)]
        qs = _check_questions(questions)
        if not qs:
            raise QueryError("no questions to measure recall with; give at least one question")
        kk = min(k, len(self))
        budget.check_result(
            len(qs) * (kk * budget.RECALL_PAIR_BYTES + min(len(self), kk * self.overfetch) * 8),
            budget.request_budget(self.memory_budget),
            f"recall@{kk:,} over {len(qs):,} questions",
            "use a smaller k or sample",
        )
        qv = self.model.encode(qs, role="question")
        _, truth = exact_search(qv, self._vectors, kk, geometry=self.model.geometry, ranking=self.model.ranking)
        m = min(len(self), kk * self.overfetch)
        coarse_rows = self._candidates(qv, m)
        _, _, final_rows = self.search_vectors(qv, kk)

        def overlap(found: np.ndarray) -> float:
            hits = sum(len(set(f[f >= 0].tolist()) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
            return hits / max(1, truth.size)

        return {
            "k": kk,
            "queries": len(qs),
            "source": source,
            "candidates": m,
            "coarse_recall": overlap(coarse_rows),
            "recall": overlap(final_rows),
        }

    # -- updates ---------------------------------------------------------------------------
    @_writing
    def add(
        self, records: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record], *, batch_size: int = 256
    ) -> int:
        """Add answers (a corpus file or records); their ids must be new.

        Parameters
        ----------
        records : path or iterable
            A JSONL corpus file, or records (dicts in the corpus format, or :class:`Record`).
        batch_size : int, keyword-only
            Answers per encoder call (positive).

        Returns
        -------
        int
            The number of answers added.

        Example
        -------
        >>> ranker.add([{"id": "new", "answer": "Open Settings, then Privacy."}])
        1
        """
        batch_size = positive_int(batch_size, "batch_size")
        is_path = path_or_records(records, "records")
        existing = list(self._records.ids())
        if is_path:
            new = read_corpus(records, existing_ids=existing)  # type: ignore[arg-type]
        else:
            new = records_from_dicts(records, existing_ids=existing)  # type: ignore[arg-type]
        vectors = _encode_answers(self.model, [r.answer for r in new], batch_size, False)
        lexical = None if self._lexical is None else self._lexical.appended([r.answer for r in new])
        self._records = self._records.append(new)
        self._vectors = np.concatenate([np.asarray(self._vectors), vectors])
        if lexical is not None:
            self._lexical = lexical
        if not self._coarse_stale:
            self._coarse.add(vectors)
        _log.info("added %d answers; %d in all", len(new), len(self))
        return len(new)

    @_writing
    def remove(self, ids: Iterable[str | int]) -> int:
        """Remove answers by id; every id must exist.

        Parameters
        ----------
        ids : list of str or int
            The ids to remove (a single id must be wrapped in a list: a string is refused,
            never iterated character by character).

        Returns
        -------
        int
            The number of answers removed.

        Example
        -------
        >>> ranker.remove(["billing-refund-policy"])
        1
        """
        wanted = id_list(ids, "ids")
        index = self._records.ids()
        missing = [i for i in wanted if str(i) not in index]
        if missing:
            shown = ", ".join(json.dumps(i) for i in missing[:5]) + (" …" if len(missing) > 5 else "")
            raise QueryError(f"no answer with id {shown} in the index; nothing was removed")
        drop = {index[str(i)] for i in wanted}
        if len(drop) == len(self):
            raise QueryError("removing every answer would leave an empty index; build a new one instead")
        keep = np.array([r for r in range(len(self)) if r not in drop], dtype=np.int64)
        self._records = self._records.keep(keep)
        self._vectors = np.ascontiguousarray(np.asarray(self._vectors)[keep])
        if self._lexical is not None:
            self._lexical = self._lexical.kept(keep)
        self._coarse_stale = True
        _log.info("removed %d answers; %d left", len(drop), len(self))
        return len(drop)

    def _refresh_coarse(self) -> None:
        # Searches call this under the read lock, so two may race here: one rebuilds, the
        # others wait for it; the flag drops only once the new index is in place.
        if not self._coarse_stale:
            return
        with self._refresh_mutex:
            if not self._coarse_stale:
                return
            kind = choose_kind(self.kind_requested, len(self)) if self.kind_requested == "auto" else self._coarse.kind
            params = dict(self._coarse.params) if kind == self._coarse.kind else {}
            if params.get("nlist", 0) > len(self):  # IVF lists need an answer each to train
                params.pop("nlist")
            coarse = CoarseIndex(
                self.model.geometry,
                self.dimension,
                kind,
                params or None,
                device=self._coarse.device,
                ranking=self.model.ranking,
                count=len(self),
            )
            coarse.add(np.asarray(self._vectors))
            if kind == self._coarse.kind:
                coarse.tuning = self._coarse.tuning
            self._coarse = coarse
            self._coarse_stale = False

    # -- persistence ---------------------------------------------------------------------
    @_writing
    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> Path:
        """Save atomically: a new snapshot, then ``manifest.json`` replaced, then cleanup.

        The save holds the index's writer lock (``INDEX/.lock``), waiting up to
        ``lock_timeout`` seconds for another writer. A Ranker may be saved any number of
        times, to its own path or others. It refuses to overwrite an index that another
        writer changed since this Ranker loaded or last saved it (that would silently drop
        the other writer's update); a freshly built Ranker replaces whatever index is there.
        For read-modify-write without lost updates, load under the lock with
        :meth:`edit`: ``with Ranker.edit(path) as r: r.add(...)``.

        Parameters
        ----------
        path : path-like
            The index directory (created if missing).
        overwrite : bool, keyword-only
            Replace the index even if another writer changed it since this Ranker read it.
        lock_timeout : float or None, keyword-only
            Seconds to wait for another writer; None or ``math.inf`` waits as long as it takes.

        Returns
        -------
        Path
            The index directory.

        Raises
        ------
        IndexLockedError
            Another writer held the lock for longer than ``lock_timeout``.
        IndexChangedError
            The index changed since this Ranker read it, and ``overwrite`` is false.
        IndexFormatError
            ``path`` is not a new or empty directory nor a qaindex index (a folder qaindex
            did not write is never overwritten; see :mod:`qaindex.store.ownership`).
        DiskFullError
            The disk (or a file-size limit) ran out; the message names the file being
            written and the space needed. The previous index is unchanged.

        Example
        -------
        >>> _ = Ranker.build("examples/faq.jsonl").save("qaindex-index")
        >>> ranker = Ranker.load("qaindex-index")
        >>> ranker.configure(overfetch=20)
        >>> ranker.save("qaindex-index")
        PosixPath('qaindex-index')
        """
        lock_timeout = check_timeout(lock_timeout)  # before any work
        root = path_arg(path, "path", what="an index directory")
        overwrite = flag(overwrite, "overwrite")
        check_writable(root)  # before the lock file: a folder qaindex did not write is never touched
        self._refresh_coarse()
        created = missing_parents(root)
        try:
            with index_lock(root, timeout=lock_timeout):
                return self._save_locked(root, overwrite=overwrite)
        except BaseException:
            remove_empty(created)  # a failed save leaves no empty directory behind
            raise

    def _current_snapshot(self, root: Path) -> str | None:
        if not (root / "manifest.json").exists():
            return None
        try:
            return str(read_index_manifest(root)["snapshot"])
        except QAIndexError:
            return "(unreadable)"

    def _relocate_model(self, root: Path) -> None:
        """Where to copy the model from when the last source is gone (its snapshot was deleted):
        the model's own directory if it still exists, else the identical model copy of the
        index at ``root``, when there is one."""
        if (self._model_source / "manifest.json").is_file():
            return
        if (self.model.directory / "manifest.json").is_file():  # the directory the model came from
            self._model_source = self.model.directory
            return
        with contextlib.suppress(QAIndexError, OSError, ValueError):
            current = root / read_index_manifest(root)["snapshot"] / "model"
            theirs = json.loads((current / "manifest.json").read_text(encoding="utf-8"))
            if theirs == self.model.manifest:
                self._model_source = current

    def _save_locked(self, root: Path, *, overwrite: bool) -> Path:
        previous = current_snapshot(check_writable(root))  # again, under the lock
        key = os.path.realpath(root)
        seen = self._seen.get(key)
        current = self._current_snapshot(root)
        if not overwrite and seen is not None and current is not None and current != seen:
            raise IndexChangedError(
                f"{root}: another writer changed this index since it was loaded (snapshot {seen} is now "
                f"{current}); saving would drop their update. Load it again and redo the change (use "
                "Ranker.edit for read-modify-write under the lock), or pass overwrite=True"
            )
        # orphans and debris of interrupted saves go first: their space is free for this one
        remove_garbage(root, keep=previous)
        self._relocate_model(root)
        rr = self.reranker
        rr_source = None
        if rr is not None:  # its copy in the last saved snapshot, or (first save, or gone) its own directory
            saved = self._reranker_source
            fresh = saved is not None and saved[0] is rr and (saved[1] / "manifest.json").is_file()
            rr_source = (saved[1] if saved is not None and fresh else rr.directory, rr.manifest)
        snap_name, files = write_snapshot(
            root, self._records, self._vectors, self._coarse, self.model, model_source=self._model_source,
            reranker=rr_source, lexical=self._lexical,
        )  # fmt: skip
        from . import __version__

        manifest = {
            "format": INDEX_FORMAT,
            "format_version": INDEX_FORMAT_VERSION,
            "qaindex_version": __version__,
            "created": self.created,
            "updated": _now(),
            "snapshot": snap_name,
            "count": len(self),
            "dimension": self.dimension,
            "geometry": self.model.geometry,
            "coarse": {
                "kind": self._coarse.kind,
                "params": self._coarse.params,
                "requested": self.kind_requested,
                **({"tuning": self._coarse.tuning} if self._coarse.tuning is not None else {}),
            },
            "overfetch": self.overfetch,
            "model": {
                "name": self.model.name,
                "directory": "model",
                "manifest_sha256": files["model/manifest.json"]["sha256"],
            },
            "files": files,
        }
        if rr is not None:
            manifest["reranker"] = index_entry(rr, files)
        if self._lexical is not None:
            manifest["lexical"] = {"kind": "bm25", "directory": LEXICAL_DIRECTORY}
        manifest["checksum"] = manifest_checksum(manifest)
        try:
            check_model_copy(root / snap_name / "model" / "manifest.json", files, self.model.manifest)
        except IndexFormatError:
            remove_snapshot_dir(root / snap_name)
            raise ModelFormatError(
                f"{self._model_source}: the model files changed on disk since the model was loaded "
                "(they no longer match its manifest); load the model again"
            ) from None
        try:
            with writing(root, "manifest.json", needed=4096):
                write_json_atomic(root / "manifest.json", manifest)
        except BaseException:
            remove_snapshot_dir(root / snap_name)
            raise
        # The new snapshot is live; remove the one it replaced (only qaindex's: qaindex.store.ownership).
        remove_garbage(root, keep=snap_name, previous=previous)
        self._seen[key] = snap_name
        self._served = (snap_name, files)
        # the old snapshot (maybe the model's source) is gone: later saves copy the new one
        self._model_source = root / snap_name / "model"
        if rr is not None:
            self._reranker_source = (rr, root / snap_name / "reranker")
        self.path = root
        _log.info("saved %d answers to %s (snapshot %s)", len(self), root, snap_name)
        return root

    def _vectors_source(self) -> Path | str:
        served = self._served
        return "the stored vectors" if self.path is None or served is None else self.path / served[0] / "vectors.npy"

    def verify(self) -> None:
        """Check the size and SHA-256 of every file of the snapshot this Ranker serves.

        That is the snapshot it was loaded from or last saved to, even if another writer
        has since replaced the index on disk.

        Raises
        ------
        IndexFormatError
            A file differs from the manifest it was loaded with.
        IndexChangedError
            Another writer replaced the index and its snapshot is gone: load it again.
        """
        if self.path is None or self._served is None:
            raise QAIndexError("this index has not been saved; nothing to verify")
        name, files = self._served
        snap = self.path / name
        if not snap.is_dir():
            now = self._current_snapshot(self.path)
            raise IndexChangedError(
                f"{snap}: the snapshot this Ranker serves is gone (another writer replaced the index"
                + (f" with {now}" if now else "")
                + "); load the index again to verify what is on disk now"
            )
        verify_files(snap, files, error=IndexFormatError, what="index")

    @_reading
    def info(self) -> dict[str, Any]:
        """What ``qaindex info`` shows: model, counts, index kind, devices actually used."""
        m = self.model.manifest
        return {
            "path": str(self.path) if self.path else None,
            "answers": len(self),
            "dimension": self.dimension,
            "geometry": self.model.geometry,
            "index": {**self._coarse.describe(), "overfetch": self.overfetch},
            "model": {
                "name": self.model.name,
                "kind": m["kind"],
                "parameters": m.get("parameters", {}),
                "metrics": m.get("metrics", {}),
            },
            "devices": devices_info(self.model, self._coarse.device, self._coarse.kind),
            "reranker": None if self.reranker is None else {"name": self.reranker.name, **self.reranker.providers},
            "hybrid": None if self._lexical is None else self._lexical.describe(),
            "calibration": self.model.calibration.describe(),
            "created": self.created,
            "near_centre": _near_centre(self.model, self._vectors),
        }


def _cut(hits: list[Hit], k: int, min_score: float | None) -> list[Hit]:
    """The first ``k`` hits, without those scoring below ``min_score`` (hits are best first)."""
    if min_score is not None:
        hits = [h for h in hits if h.score >= min_score]
    return hits[:k]


def _stored_lexical(snap: Path, manifest: Mapping[str, Any], mpath: Path) -> LexicalIndex | None:
    """The lexical index a snapshot stores (``manifest["lexical"]``), or None."""
    entry = manifest.get("lexical")
    if entry is None:
        return None
    check_lexical_entry(entry, manifest["files"], mpath)
    return LexicalIndex.load(snap / LEXICAL_DIRECTORY, manifest["count"])


def _near_centre(model: Model, vectors: np.ndarray) -> dict[str, Any] | None:
    """Answers near the ball's centre (:func:`qaindex.geometry.hyperbolic.near_centre`) and whether
    they can be hubs: only under plain-distance ranking. None for cosine models."""
    if model.geometry != "poincare":
        return None
    return {**hyperbolic.near_centre(vectors), "ranking": model.ranking, "hub_risk": model.ranking == "distance"}


def _encode_answers(model: Model, texts: list[str], batch_size: int, progress: bool) -> np.ndarray:
    if not progress:
        return model.encode(texts, role="answer", batch_size=batch_size)
    from tqdm import tqdm

    with tqdm(total=len(texts), desc="encoding answers", unit="answer", disable=None) as bar:
        return model.encode(texts, role="answer", batch_size=batch_size, progress=bar.update)


def _build_from_file(
    corpus: str | os.PathLike[str],
    model: Model,
    index_kind: str,
    hnsw: Mapping[str, int] | None,
    device: str,
    batch_size: int,
    progress: bool,
) -> tuple[RecordStore, np.ndarray, CoarseIndex]:
    from .build.streaming import build_from_file

    if not progress:
        return build_from_file(corpus, model, index_kind=index_kind, hnsw=hnsw, device=device, batch_size=batch_size)
    from tqdm import tqdm

    from .build.streaming import count_lines

    with tqdm(total=count_lines(corpus), desc="encoding answers", unit="answer", disable=None) as bar:
        built = build_from_file(
            corpus, model, index_kind=index_kind, hnsw=hnsw, device=device, batch_size=batch_size, progress=bar.update
        )
        bar.total = bar.n  # lines counted blank lines and repeated benchmark answers too: end at 100%
        return built


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
