"""``Ranker``, the front door: build, load, search, update and save a question→answer index.

It checks arguments, holds the index and the locks, and delegates: under its lock it builds
the read-only :class:`~qaindex.search.state.IndexState` and hands it down, with a checked
:class:`~qaindex.search.plan.SearchPlan`, to searches (:mod:`qaindex.search.pipeline`), recall
(:mod:`qaindex.search.recall`), ``info`` (:meth:`~qaindex.search.state.IndexState.info`) and
updates (:mod:`qaindex.indexing.updates`, whose new state it adopts); builds go to
:mod:`qaindex.indexing.encoding`, snapshots (opened, written, committed) to :mod:`qaindex.snapshot`,
whose files are :mod:`qaindex.store`'s. No other module reads the Ranker's private attributes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .checks import flag, path_arg, positive_int, threads_arg, verify_arg
from .corpus import Record
from .devices import check_device
from .indexing import updates
from .indexing.encoding import encode_corpus, rebuilt_coarse
from .indexing.updates import row_of
from .key_index import KeyIndex
from .model import Model
from .reranker import Reranker
from .search import pipeline
from .search.fusion import Fusion, with_dense_ratio
from .search.hits import Hit, make_hits
from .search.plan import (
    SearchPlan,
    Where,
    check_k,
    check_queries,
    check_question,
    check_questions,
    check_recall,
    check_settings,
    search_plan,
)
from .search.recall import measure_recall
from .search.state import IndexState
from .snapshot import SavedState, now, open_snapshot, read_consistently
from .store.chunk_checks import ChunkedFile
from .store.concurrency import ReadWriteLock, reading, writing
from .store.index_format import INDEX_FORMAT, INDEX_FORMAT_VERSION, read_index_manifest
from .store.locking import DEFAULT_LOCK_TIMEOUT, check_timeout, index_lock
from .store.ownership import check_writable
from .store.records import RecordStore
from .text.lexical import LexicalIndex
from .vector_index import BREADTH_PARAM, CoarseIndex

__all__ = ["DEFAULT_OVERFETCH", "INDEX_FORMAT", "INDEX_FORMAT_VERSION", "Hit", "Ranker"]

DEFAULT_OVERFETCH = 10
_log = logging.getLogger(__name__)


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
        keys: KeyIndex | None = None,
        vector_checks: ChunkedFile | None = None,
        file_checks: Sequence[ChunkedFile] = (),
    ) -> None:
        self.model = model
        # the stored questions as search keys (qaindex.key_index), saved with the index; None: answers only
        self._keys = keys
        # what the build that made this Ranker reported (qaindex.indexing: "cuts", the answers cut); None: loaded
        self.build_report: dict[str, Any] | None = None
        # the BM25 index of hybrid search (qaindex.text.lexical), saved with the index; None: dense only
        self._lexical = lexical
        # the reranking stage searches use by default (saved with the index); None: first stage only
        self.reranker = reranker
        self._records = records
        self._vectors = vectors
        # vectors.npy of a loaded index, verified chunk by chunk as its rows are read (qaindex.store.chunk_checks)
        self._vector_checks = vector_checks
        # the loaded index's other files verified as they are read (records, BM25 arrays)
        self._file_checks = tuple(file_checks)
        self._coarse = coarse
        self._coarse_stale = False
        self.overfetch = int(overfetch)
        # bytes one request may use (qaindex.search.budget); None: $QAINDEX_MEMORY_BUDGET or 1 GiB
        self.memory_budget: int | None = None
        self.kind_requested = kind_requested
        self.path = path
        self.created = created or now()
        self._lock = ReadWriteLock()
        self._refresh_mutex = threading.Lock()
        # the snapshots this Ranker loaded, saved and serves (qaindex.snapshot)
        self._disk = SavedState(model.directory, path, snapshot)

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
        question_keys: bool = True,
        passage_words: int | str = "auto",
    ) -> Ranker:
        """Encode a corpus and index it.

        Parameters
        ----------
        corpus : path or iterable
            A JSONL corpus file, or records (dicts in the corpus format, or :class:`Record`).
            A file is read, encoded and stored in chunks, with one chunk of texts in memory
            at a time (:mod:`qaindex.indexing.streaming`).
        model : path, Model or None, keyword-only
            Model directory or loaded model; None uses the built-in default model.
        device : {"auto", "cpu", "cuda"}, keyword-only
        index_kind : {"auto", "flat", "hnsw", "hnsw_sq8", "ivf", "ivf_sq8", "pq"}, keyword-only
            ``auto``: exact ``flat`` up to 20,000 answers, ``pq`` above (the other kinds:
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
            :mod:`qaindex.indexing.tuning`. The result is saved with the index and shown by ``info``.
        reranker : path, Reranker or None, keyword-only
            A reranker model directory (:mod:`qaindex.reranker`, e.g. AP-CNN) stored with the
            index: searches then rerank the first stage's candidates with it by default.
        hybrid : bool or None, keyword-only
            Also build a BM25 index of the answers (:meth:`enable_hybrid`), saved with the
            index: searches then fuse both rankings by default (:mod:`qaindex.search.fusion`). None
            (default): when PyStemmer is installed (the ``cpu``/``gpu``/``hybrid`` extras);
            True: required (an error names the extra); False: dense only.
        question_keys : bool, keyword-only
            Also index each record's stored ``question``/``questions`` as search keys mapping
            to it (:mod:`qaindex.key_index`): searches then match answers and stored
            questions and return each record once (``Hit.matched`` says which). False:
            answers only, no passages either (e.g. when the stored questions are the ones an
            evaluation asks).
        passage_words : "auto" or int, keyword-only
            Also key each answer longer than this many words by its overlapping windows of
            that many words (:func:`qaindex.key_index.passages`; ``Hit.matched`` is then
            ``"passage"``): a model that cuts its answers reads the rest through them, and a
            question about one part of a long answer meets that part. ``"auto"`` (default):
            64 words for a model with a fixed answer length (an exported sentence-transformer),
            none for a static encoder such as the built-in model, which reads answers whole;
            0: none.
        """
        built = encode_corpus(
            corpus,
            model=model,
            device=device,
            index_kind=index_kind,
            hnsw=hnsw,
            overfetch=overfetch,
            batch_size=batch_size,
            progress=progress,
            recall=recall,
            reranker=reranker,
            hybrid=hybrid,
            question_keys=question_keys,
            passage_words=passage_words,
        )
        ranker = cls(
            built.model,
            built.records,
            built.vectors,
            built.coarse,
            overfetch=built.overfetch,
            kind_requested=index_kind,
            reranker=built.reranker,
            keys=built.keys,
        )
        ranker.build_report = {"cuts": built.cuts}
        if built.lexical is not None:  # analysed in the encoding pass (qaindex.indexing.encoding)
            ranker._lexical = ranker._measured(built.lexical)
        return ranker

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str = "auto",
        threads: int | None = 1,
        verify: bool | str = True,
    ) -> Ranker:
        """Open a saved index (cheap: vectors, records and FAISS index are memory-mapped).

        Parameters
        ----------
        path : path-like
            The index directory.
        device : {"auto", "cpu", "cuda"}, keyword-only
        threads : int or None, keyword-only
            onnxruntime threads (1 is fastest for single questions; None: all cores).
        verify : {True, "lazy", "full", False}, keyword-only
            True: no byte of the index is used before it is proved to be the one its writer
            saved. The large files (vectors, records, BM25 terms, counts and postings) are
            checked against their chunk digests as a search first reads them (a load costs
            what it reads: :mod:`qaindex.store.chunk_checks`) and by a background thread
            that verifies the rest within seconds; the others against the size and SHA-256
            the manifest lists, now. Vectors are checked
            finite (inside the ball) and records strict JSON as they are read. ``"lazy"``:
            the same without the background thread (a short-lived process that reads a few
            rows). ``"full"``: every file hashed and all content scanned now (as indexes saved
            before chunk digests always are). ``False`` skips the checksums and scans, for a
            faster start of a trusted index; the manifests are still validated and every
            path they name must stay inside the index directory.

        Raises
        ------
        IndexFormatError, ModelFormatError
            The index is missing, of an unknown version, corrupted, or names paths outside
            its directory; the message names the file and field.
        """
        root = path_arg(path, "path", what="an index directory")
        check_device(device)
        threads = threads_arg(threads)
        verify = verify_arg(verify)
        return read_consistently(
            root, lambda manifest: cls._open_snapshot(root, manifest, device=device, threads=threads, verify=verify)
        )

    @classmethod
    def _open_snapshot(
        cls, root: Path, manifest: dict[str, Any], *, device: str, threads: int | None, verify: bool | str
    ) -> Ranker:
        opened = open_snapshot(root, manifest, device=device, threads=threads, verify=verify)
        ranker = cls(*opened.pieces(), **opened.options(root, manifest))
        ranker._disk.served = (manifest["snapshot"], manifest["files"])
        return ranker

    @classmethod
    @contextlib.contextmanager
    def edit(
        cls,
        path: str | os.PathLike[str],
        *,
        device: str = "auto",
        threads: int | None = None,
        verify: bool | str = True,
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
            As for :meth:`load` (True verifies as ``"lazy"`` does: the save reads every row).
        lock_timeout : float or None, keyword-only
            Seconds to wait for another writer before raising :class:`IndexLockedError`;
            None or ``math.inf`` waits as long as it takes.

        Example
        -------
        >>> _ = Ranker.build("examples/faq.jsonl").save("qaindex-index", overwrite=True)
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
        verify = verify_arg(verify)
        read_index_manifest(root)  # a clear error for a missing index, before any lock file
        with index_lock(root, timeout=lock_timeout):
            # the save verifies every row before it writes: no background verification beside it
            ranker = cls.load(root, device=device, threads=threads, verify="lazy" if verify is True else verify)
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

        Example
        -------
        >>> record = ranker.get("account-reset-password")
        >>> record.id, record.metadata["category"]
        ('account-reset-password', 'account')
        """
        return self._records.get(row_of(self._records, id))

    @writing
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
        breadths = {"ef_search": ef_search, "nprobe": nprobe, "refine": refine}
        settings = check_settings(overfetch=overfetch, **breadths, memory_budget=memory_budget)
        self.overfetch = settings.pop("overfetch", self.overfetch)
        self.memory_budget = settings.pop("memory_budget", self.memory_budget)
        for name, value in settings.items():  # each breadth applies to its own kinds
            if BREADTH_PARAM.get(self._coarse.kind) == name:
                self._coarse.set_breadth(value)

    @writing
    def enable_hybrid(self) -> Ranker:
        """Build the BM25 index of hybrid search from the stored answers (replacing any); returns self.

        Saved with the index; searches then fuse dense and BM25 rankings unless told
        ``hybrid=False``. Needs PyStemmer (``pip install 'qaindex[hybrid]'``).

        Example
        -------
        >>> ranker.enable_hybrid().info()["hybrid"]["kind"]
        'bm25'
        """
        self._lexical = self._measured(LexicalIndex.from_texts([r.answer for r in self.records()]))
        self._keys = self._keys and self._keys.with_lexical(self._records)  # the stored questions' BM25 rows too
        return self

    def _measured(self, lexical: LexicalIndex, previous: Any = None) -> LexicalIndex:  # adaptive fusion's ratio
        return with_dense_ratio(
            self.model, self._checked_vectors(), lexical, lambda row: self._records.get(row).answer, previous
        )

    @property
    def has_hybrid(self) -> bool:
        """Whether the index has a lexical (BM25) index for hybrid search."""
        return self._lexical is not None

    def records(self) -> Iterator[Record]:
        """Every stored record, in row order.

        Example
        -------
        >>> [r.id for r in ranker.records()][:2]
        ['account-create', 'account-verify-email-resend']
        """
        for row in range(len(self)):
            yield self._records.get(row)

    def _state(self, *, refresh: bool = True, rows_checked: bool = False) -> IndexState:
        # what a call reads, built under the caller's lock; searches bring the coarse index up to date first.
        # A search verifies the rows of vectors.npy it reads (rows_checked); any other call, all of them.
        if refresh:
            self._refresh_coarse()
        if not rows_checked:
            self._checked_vectors()
        return IndexState(
            self.model,
            self._records,
            self._vectors,
            self._coarse,
            lexical=self._lexical,
            keys=self._keys,
            reranker=self.reranker,
            overfetch=self.overfetch,
            memory_budget=self.memory_budget,
            path=self.path,
            created=self.created,
            vectors_source=self._disk.vectors_source(self.path),
            vector_checks=self._checks() if rows_checked else None,
        )

    def _checks(self) -> ChunkedFile | None:
        # the lazy verification of the served vectors, while they are the loaded file's and unverified
        checks = self._vector_checks
        if checks is None or checks.complete or checks.array is not self._vectors:
            return None
        return checks

    def _checked_vectors(self) -> np.ndarray:
        # every vector and every loaded file, verified (a save, a coarse rebuild, any call but a search)
        checks = self._checks()
        if checks is not None:
            checks.check_all()
        for other in self._file_checks:
            other.check_all()
        return self._vectors

    @reading
    def state(self) -> IndexState:
        """The index as a search reads it, read-only: :class:`~qaindex.search.state.IndexState`
        (model, records, vectors, coarse, lexical and key indexes, reranker, settings), the
        coarse index brought up to date first. It holds references: valid until the next
        ``add``/``upsert``/``remove``, which give the Ranker new pieces.

        Example
        -------
        >>> state = ranker.state()
        >>> len(state.records) == len(ranker), state.overfetch == ranker.overfetch
        (True, True)
        """
        return self._state()

    @reading
    def plan(
        self,
        k: int = 10,
        *,
        where: Where | None = None,
        min_score: float | None = None,
        rerank: Reranker | str | os.PathLike[str] | bool | None = None,
        depth: int | None = None,
        hybrid: bool | None = None,
        fusion: Fusion | Mapping[str, Any] | None = None,
        explain: bool = False,
    ) -> SearchPlan:
        """What a search with these arguments (those of :meth:`search`) does, each checked: a
        :class:`~qaindex.search.plan.SearchPlan` (filter, fusion, reranking stage, questions
        per call within the memory budget). The command line asks for it instead of deciding
        the stages itself.

        Example
        -------
        >>> plan = ranker.plan(3, hybrid=False)
        >>> plan.fusion is None, plan.first_k, plan.questions_per_call > 1
        (True, 3, True)
        """
        options: dict[str, Any] = {"where": where, "min_score": min_score, "rerank": rerank, "depth": depth}
        return search_plan(self._state(rows_checked=True), k, **options, hybrid=hybrid, fusion=fusion, explain=explain)

    @reading
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
        explain: bool = False,
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
            Fuse the dense ranking with the index's BM25 ranking (:mod:`qaindex.search.fusion`) over
            the two stages' best ``max(k × overfetch, 100)`` each. None (default): hybrid when the index has
            a lexical index (``hybrid=True`` or :meth:`enable_hybrid`); True requires one; False: dense only.
        fusion : Fusion or mapping, keyword-only, optional
            The fusion rule (default :data:`qaindex.search.fusion.DEFAULT_FUSION`).
        explain : bool, keyword-only
            Give each hit its ``explanation`` (:class:`~qaindex.search.hits.Explanation`: dense and BM25 parts).

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
        qs = check_question(question)
        options: dict[str, Any] = {"where": where, "min_score": min_score, "rerank": rerank, "depth": depth}
        state = self._state(rows_checked=True)
        plan = search_plan(state, k, **options, hybrid=hybrid, fusion=fusion, explain=explain)
        return pipeline.search_batch(state, qs, plan)[0]

    @reading
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
        explain: bool = False,
    ) -> list[list[Hit]]:
        """:meth:`search` for many questions at once: one list of hits per question.

        ``questions`` is a list of non-empty texts (a single string is refused: use
        :meth:`search`); each list has ``min(k, len(self))`` hits or fewer; the keyword
        arguments are those of :meth:`search`.

        Example
        -------
        >>> [len(h) for h in ranker.search_batch(["refund?", "reset password"], k=2)]
        [2, 2]
        """
        qs = check_questions(questions)
        options: dict[str, Any] = {"where": where, "min_score": min_score, "rerank": rerank, "depth": depth}
        state = self._state(rows_checked=True)
        plan = search_plan(state, k, **options, hybrid=hybrid, fusion=fusion, explain=explain)
        return pipeline.search_batch(state, qs, plan)

    @reading
    def hits(self, scores: Any, distances: Any, rows: Any, probabilities: Any = None) -> list[list[Hit]]:
        """Hits from the ``(n, w)`` arrays of :meth:`search_vectors` (rows ``-1`` are skipped),
        one list per query: :func:`qaindex.search.hits.make_hits` (``probabilities``: hybrid scores).

        Example
        -------
        >>> qv = ranker.model.encode(["refund?"], role="question")
        >>> [h.id for h in ranker.hits(*ranker.search_vectors(qv, 2))[0]] == [
        ...     h.id for h in ranker.search("refund?", k=2)]
        True
        """
        return make_hits(
            self._records, self.model.calibration, scores, distances, rows, self.memory_budget, probabilities
        )

    @reading
    def search_vectors(
        self, queries: np.ndarray, k: int, *, use_coarse: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Search with question vectors (``model.encode(..., role="question")``); FAISS-style
        ``(scores, distances, rows)`` arrays of ``min(k, len(self))`` columns, described in
        :func:`qaindex.search.pipeline.search_vectors`.

        Example
        -------
        >>> qv = ranker.model.encode(["refund?"], role="question")
        >>> ranker.search_vectors(qv, 10**12)[2].shape == (1, len(ranker))
        True
        """
        k = check_k(k)
        use_coarse = flag(use_coarse, "use_coarse")
        q = check_queries(self.model, queries)
        return pipeline.search_vectors(self._state(rows_checked=True), q, k, use_coarse=use_coarse)

    @reading
    def candidates(self, queries: np.ndarray, m: int, *, use_coarse: bool = False) -> np.ndarray:
        """Rows recalled by the coarse stage, ``(n, min(m, len(self)))`` (all rows when ``m >=
        len(self)``, unless ``use_coarse``): :func:`qaindex.search.pipeline.candidates`.

        Example
        -------
        >>> ranker.candidates(ranker.model.encode(["refund?"], role="question"), 3).shape
        (1, 3)
        """
        m = positive_int(m, "m")
        use_coarse = flag(use_coarse, "use_coarse")
        q = check_queries(self.model, queries)
        return pipeline.candidates(self._state(rows_checked=True), q, m, use_coarse=use_coarse)

    @reading
    def recall(
        self, k: int = 10, *, questions: Sequence[str] | None = None, sample: int = 200, seed: int = 0
    ) -> dict[str, Any]:
        """Recall@k of the coarse stage and of the full pipeline against exact search.

        See :func:`qaindex.search.recall.measure_recall` (the ground truth: a brute-force float64
        ranking of every stored answer, the coarse index brought up to date first). Returns
        ``{"k", "queries", "candidates", "coarse_recall", "recall", "source"}``.

        Example
        -------
        >>> ranker.recall(k=10)["recall"]
        1.0
        """
        k, qs, sample, seed = check_recall(k, questions, sample, seed)
        return measure_recall(self._state(), k, questions=qs, sample=sample, seed=seed)

    # -- updates ---------------------------------------------------------------------------
    @writing
    def add(
        self, records: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record], *, batch_size: int = 256
    ) -> int:
        """Add answers (a corpus file or records); their ids must be new. Returns how many.

        Parameters
        ----------
        records : path or iterable
            A JSONL corpus file, or records (dicts in the corpus format, or :class:`Record`).
        batch_size : int, keyword-only
            Answers per encoder call (positive).

        Example
        -------
        >>> ranker.add([{"id": "new", "answer": "Open Settings, then Privacy."}])
        1
        """
        batch_size = positive_int(batch_size, "batch_size")
        return self._adopt(updates.add(self._state(refresh=False), records, batch_size, self._coarse_stale))

    @writing
    def upsert(
        self, records: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record], *, batch_size: int = 256
    ) -> int:
        """Add answers, replacing those whose id is stored already; every record needs an id.
        All or nothing, like :meth:`add`. Returns how many were written.

        Example
        -------
        >>> ranker.upsert([{"id": "billing-refund-policy", "answer": "Refunds within 30 days."}])
        1
        """
        batch_size = positive_int(batch_size, "batch_size")
        return self._adopt(updates.upsert(self._state(refresh=False), records, batch_size, self._coarse_stale))

    @writing
    def remove(self, ids: Iterable[str | int]) -> int:
        """Remove answers by id; every id must exist. Returns how many were removed.

        Parameters
        ----------
        ids : list of str or int
            The ids to remove (a single id must be wrapped in a list: a string is refused,
            never iterated character by character).

        Example
        -------
        >>> ranker.remove(["billing-refund-policy"])
        1
        """
        return self._adopt(updates.remove(self._state(refresh=False), ids))

    def _adopt(self, update: updates.Update) -> int:
        # an update's new state becomes the Ranker's (its coarse index was extended in place, or is stale)
        state = update.state
        self._records, self._vectors = state.records, state.vectors
        self._keys, self._lexical = state.keys, state.lexical
        self._coarse_stale = update.coarse_stale
        return update.changed

    def _refresh_coarse(self) -> None:
        # Searches call this under the read lock, so two may race here: one rebuilds, the
        # others wait for it; the flag drops only once the new index is in place.
        if not self._coarse_stale:
            return
        with self._refresh_mutex:
            if not self._coarse_stale:
                return
            self._coarse = rebuilt_coarse(self._coarse, self.kind_requested, self.model, self._checked_vectors())
            self._coarse_stale = False

    # -- persistence ---------------------------------------------------------------------
    @writing
    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> Path:
        """Save atomically: a new snapshot, then ``manifest.json`` replaced, then cleanup.

        Under the index's writer lock (``INDEX/.lock``); it refuses to replace an index this Ranker
        did not load or save, or one changed since by another writer (:mod:`qaindex.snapshot`).
        For read-modify-write, load under the lock: ``with Ranker.edit(path) as r: r.add(...)``.

        Parameters
        ----------
        path : path-like
            The index directory (created if missing).
        overwrite : bool, keyword-only
            Replace the index at ``path`` even if this Ranker did not load it or it changed since (``--force``).
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
            ``path`` holds an index this Ranker did not load or one changed since, without ``overwrite``.
        IndexFormatError
            ``path`` is not a new or empty directory nor a qaindex index (a folder qaindex
            did not write is never overwritten; see :mod:`qaindex.store.ownership`).
        DiskFullError
            The disk (or a file-size limit) ran out; the message names the file being
            written and the space needed. The previous index is unchanged.

        Example
        -------
        >>> _ = Ranker.build("examples/faq.jsonl").save("qaindex-index", overwrite=True)
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
        self._disk.save(
            root,
            overwrite=overwrite,
            lock_timeout=lock_timeout,
            model=self.model,
            records=self._records,
            vectors=self._checked_vectors(),
            coarse=self._coarse,
            reranker=self.reranker,
            lexical=self._lexical,
            created=self.created,
            requested=self.kind_requested,
            overfetch=self.overfetch,
            keys=self._keys,
        )
        self.path = root
        return root

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
        self._disk.verify(self.path)

    @reading
    def info(self) -> dict[str, Any]:
        """What ``qaindex info`` shows: model, counts, index kind, devices actually used
        (:meth:`qaindex.search.state.IndexState.info`)."""
        return self._state().info()
