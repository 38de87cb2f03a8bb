"""``Ranker``: build, load, search, update and save a question→answer index.

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

import json
import mmap
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from . import hyperbolic
from .corpus import Record, read_corpus, records_from_dicts
from .errors import IndexFormatError, ModelFormatError, QAIndexError, QueryError
from .model import Model
from .storage import (
    file_entry,
    fsync_tree,
    read_json_object,
    verify_files,
    write_json_atomic,
)
from .vector_index import CoarseIndex, choose_kind, exact_search

__all__ = ["DEFAULT_OVERFETCH", "INDEX_FORMAT", "INDEX_FORMAT_VERSION", "Hit", "Ranker"]

INDEX_FORMAT = "qaindex-index"
INDEX_FORMAT_VERSION = 1
DEFAULT_OVERFETCH = 10
_LOAD_HASH_LIMIT = 64 << 20
_QUERY_CHUNK = 256
_RECORD_CACHE = 4096  # decoded records kept per index (cleared when full)


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
        The model's score, higher is better.
    distance : float
        Poincaré distance between question and answer (1 - cosine for cosine models).
    metadata : dict
        The answer's other corpus fields.
    """

    id: str | int
    answer: str
    score: float
    distance: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"id", "answer", "score", "distance", "metadata"}``."""
        return {
            "id": self.id,
            "answer": self.answer,
            "score": self.score,
            "distance": self.distance,
            "metadata": self.metadata,
        }


class _Records:
    """Answers stored as JSON lines with byte offsets; decoded only when needed."""

    def __init__(self, data: bytes | mmap.mmap, offsets: np.ndarray) -> None:
        self.data = data
        self.offsets = offsets
        self._ids: dict[str, int] | None = None
        self._cache: dict[int, Record] = {}

    @classmethod
    def from_lines(cls, lines: Sequence[bytes]) -> _Records:
        offsets = np.zeros(len(lines) + 1, dtype=np.int64)
        np.cumsum([len(line) for line in lines], out=offsets[1:])
        return cls(b"".join(lines), offsets)

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> _Records:
        return cls.from_lines([_encode_record(r) for r in records])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def raw(self, row: int) -> bytes:
        return bytes(self.data[int(self.offsets[row]) : int(self.offsets[row + 1])])

    def get(self, row: int) -> Record:
        cached = self._cache.get(row)
        if cached is None:
            cached = Record.from_json(json.loads(self.raw(row).decode("utf-8")))
            if len(self._cache) >= _RECORD_CACHE:
                self._cache.clear()
            self._cache[row] = cached
        return cached

    def ids(self) -> dict[str, int]:
        if self._ids is None:
            self._ids = {str(self.get(row).id): row for row in range(len(self))}
        return self._ids

    def append(self, records: Sequence[Record]) -> _Records:
        extra = _Records.from_records(records)
        offsets = np.concatenate([self.offsets, extra.offsets[1:] + self.offsets[-1]])
        return _Records(bytes(self.data[: int(self.offsets[-1])]) + bytes(extra.data), offsets)

    def keep(self, rows: np.ndarray) -> _Records:
        return _Records.from_lines([self.raw(int(r)) for r in rows])


def _encode_record(record: Record) -> bytes:
    return (json.dumps(record.to_json(), ensure_ascii=False) + "\n").encode("utf-8")


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise QueryError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _check_questions(questions: Sequence[str]) -> list[str]:
    if isinstance(questions, str):
        raise QueryError("search_batch takes a list of questions; use search() for one question")
    out = []
    for i, q in enumerate(questions):
        if not isinstance(q, str):
            raise QueryError(f"question {i + 1} is {type(q).__name__}, not text")
        if not q.strip():
            where = "the question" if len(questions) == 1 else f"question {i + 1}"
            raise QueryError(f"{where} is empty; ask a question with at least one word")
        out.append(q)
    return out


class Ranker:
    """A question→answer index: ONNX encoder, FAISS coarse recall, exact ONNX rerank.

    Build with :meth:`build`, or open a saved index with :meth:`load`.

    Example
    -------
    >>> ranker = Ranker.build("examples/faq.jsonl")           # doctest: +SKIP
    >>> ranker.save("qaindex-index")                          # doctest: +SKIP
    >>> ranker = Ranker.load("qaindex-index")                 # doctest: +SKIP
    >>> [h.id for h in ranker.search("How do I reset my password?", k=3)]  # doctest: +SKIP
    ['account-password-reset', ...]
    """

    def __init__(
        self,
        model: Model,
        records: _Records,
        vectors: np.ndarray,
        coarse: CoarseIndex,
        *,
        overfetch: int = DEFAULT_OVERFETCH,
        kind_requested: str = "auto",
        path: Path | None = None,
        created: str | None = None,
    ) -> None:
        self.model = model
        self._records = records
        self._vectors = vectors
        self._coarse = coarse
        self._coarse_stale = False
        self.overfetch = int(overfetch)
        self.kind_requested = kind_requested
        self.path = path
        self.created = created or _now()

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
    ) -> Ranker:
        """Encode a corpus and index it.

        Parameters
        ----------
        corpus : path or iterable
            A JSONL corpus file, or records (dicts in the corpus format, or :class:`Record`).
        model : path, Model or None, keyword-only
            Model directory or loaded model; None uses the built-in default model.
        device : {"auto", "cpu", "cuda"}, keyword-only
        index_kind : {"auto", "flat", "hnsw"}, keyword-only
            ``auto``: exact ``flat`` up to 20,000 answers, ``hnsw`` above.
        hnsw : mapping, keyword-only
            HNSW parameters (``M``, ``ef_construction``, ``ef_search``).
        overfetch : int, keyword-only
            The coarse stage recalls ``k * overfetch`` candidates for the exact rerank.
        batch_size : int, keyword-only
            Answers per encoder call.
        progress : bool, keyword-only
            Show a progress bar on stderr (when it is a terminal).

        Returns
        -------
        Ranker
        """
        if isinstance(overfetch, bool) or not isinstance(overfetch, int) or overfetch < 1:
            raise QAIndexError(f"overfetch must be a positive integer, got {overfetch!r}")
        loaded = model if isinstance(model, Model) else Model.load(model, device=device, threads=None)
        if isinstance(corpus, str | os.PathLike):
            records = read_corpus(corpus)
        else:
            records = records_from_dicts(corpus)
        vectors = _encode_answers(loaded, [r.answer for r in records], batch_size, progress)
        kind = choose_kind(index_kind, len(records))
        coarse = CoarseIndex(loaded.geometry, loaded.dimension, kind, hnsw, device=device, ranking=loaded.ranking)
        coarse.add(vectors)
        return cls(
            loaded,
            _Records.from_records(records),
            vectors,
            coarse,
            overfetch=overfetch,
            kind_requested=index_kind,
        )

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
            Check every file's size, and the checksum of files up to 64 MiB (use
            :meth:`verify` for all of them).

        Returns
        -------
        Ranker
        """
        root = Path(path)
        for attempt in range(3):
            manifest = _read_index_manifest(root)
            try:
                return cls._open_snapshot(root, manifest, device=device, threads=threads, verify=verify)
            except (IndexFormatError, ModelFormatError, FileNotFoundError):
                # A concurrent save may have replaced the snapshot between reading the
                # manifest and opening its files: read the manifest again.
                if attempt == 2 or _read_index_manifest(root)["snapshot"] == manifest["snapshot"]:
                    raise
        raise AssertionError("unreachable")

    @classmethod
    def _open_snapshot(
        cls, root: Path, manifest: dict[str, Any], *, device: str, threads: int | None, verify: bool
    ) -> Ranker:
        snap = root / manifest["snapshot"]
        if verify:
            verify_files(snap, manifest["files"], error=IndexFormatError, what="index", hash_limit=_LOAD_HASH_LIMIT)
        model = Model.load(snap / "model", device=device, threads=threads, verify=verify)
        try:
            vectors = np.load(snap / "vectors.npy", mmap_mode="r", allow_pickle=False)
            offsets = np.load(snap / "records.offsets.npy", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise IndexFormatError(f"{snap}: cannot read the stored arrays ({exc}); rebuild the index") from None
        count = manifest["count"]
        if vectors.shape != (count, model.dimension) or offsets.shape != (count + 1,):
            raise IndexFormatError(
                f"{snap}: stored arrays do not match the manifest ({count} answers of dimension "
                f"{model.dimension}); rebuild the index"
            )
        with open(snap / "records.jsonl", "rb") as handle:
            data: bytes | mmap.mmap = (
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(handle.fileno()).st_size else b""
            )
        if len(data) != int(offsets[-1]):
            raise IndexFormatError(f"{snap / 'records.jsonl'}: size does not match its offsets; rebuild the index")
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
        )
        return cls(
            model,
            _Records(data, offsets),
            vectors,
            coarse,
            overfetch=manifest["overfetch"],
            kind_requested=coarse_info.get("requested", coarse_info["kind"]),
            path=root,
            created=manifest.get("created"),
        )

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
        """The stored record with this id (KeyError-like :class:`QueryError` if absent)."""
        row = self._records.ids().get(str(id))
        if row is None:
            raise QueryError(f"no answer with id {json.dumps(id)} in the index")
        return self._records.get(row)

    def configure(self, *, overfetch: int | None = None, ef_search: int | None = None) -> None:
        """Change the speed/recall trade-off of later searches (saved with the index).

        Parameters
        ----------
        overfetch : int, optional
            The coarse stage recalls ``k * overfetch`` candidates for the exact rerank.
        ef_search : int, optional
            HNSW search breadth (at least the number of candidates is always used);
            ignored by ``flat`` indexes.

        Example
        -------
        >>> ranker.configure(ef_search=512)                      # doctest: +SKIP
        >>> ranker.recall(10)["recall"]                          # doctest: +SKIP
        0.94
        """
        for name, value in (("overfetch", overfetch), ("ef_search", ef_search)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise QAIndexError(f"{name} must be a positive integer, got {value!r}")
        if overfetch is not None:
            self.overfetch = overfetch
        if ef_search is not None and self._coarse.kind == "hnsw":
            self._coarse.params["ef_search"] = ef_search

    def records(self) -> Iterator[Record]:
        """Every stored record, in row order.

        Example
        -------
        >>> [r.id for r in ranker.records()][:2]                 # doctest: +SKIP
        ['account-create', 'account-verify-email-resend']
        """
        for row in range(len(self)):
            yield self._records.get(row)

    def search(self, question: str, k: int = 10) -> list[Hit]:
        """The ``k`` best answers for one question, best first.

        Parameters
        ----------
        question : str
            Non-empty text.
        k : int
            Number of hits (fewer if the index holds fewer answers).

        Returns
        -------
        list of Hit

        Example
        -------
        >>> ranker.search("can I get a refund?", k=1)[0].id    # doctest: +SKIP
        'billing-refund-policy'
        """
        if not isinstance(question, str):
            raise QueryError(f"the question must be text, got {type(question).__name__}")
        return self.search_batch([question], k)[0]

    def search_batch(self, questions: Sequence[str], k: int = 10) -> list[list[Hit]]:
        """:meth:`search` for many questions at once (one list of hits per question)."""
        qs = _check_questions(questions)
        k = _check_k(k)
        if not qs:
            return []
        qv = self.model.encode(qs, role="question")
        scores, distances, rows = self.search_vectors(qv, k)
        out: list[list[Hit]] = []
        for srow, drow, rrow in zip(scores, distances, rows, strict=True):
            hits = []
            for s, d, r in zip(srow, drow, rrow, strict=True):
                if r < 0:
                    break
                rec = self._records.get(int(r))
                hits.append(Hit(rec.id, rec.answer, float(s) + 0.0, float(d) + 0.0, dict(rec.metadata)))
            out.append(hits)
        return out

    def search_vectors(
        self, queries: np.ndarray, k: int, *, use_coarse: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Search with question vectors; FAISS-style arrays.

        Parameters
        ----------
        queries : array (n, dimension)
            Question vectors (from ``model.encode(..., role="question")``).
        k : int
        use_coarse : bool, keyword-only
            Go through FAISS even when ``k * overfetch`` covers every answer (by default
            such small searches rerank every answer exactly and skip FAISS).

        Returns
        -------
        scores : numpy.ndarray (n, k), float32, ``-inf`` where missing
        distances : numpy.ndarray (n, k), float32, ``inf`` where missing
        rows : numpy.ndarray (n, k), int64, ``-1`` where missing
        """
        k = _check_k(k)
        q = np.ascontiguousarray(queries, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != self.dimension:
            raise QueryError(f"queries must have shape (n, {self.dimension}), got {q.shape}")
        parts = [
            self._search_chunk(q[s : s + _QUERY_CHUNK], k, use_coarse) for s in range(0, len(q), _QUERY_CHUNK)
        ]
        if not parts:
            return (
                np.zeros((0, k), np.float32),
                np.zeros((0, k), np.float32),
                np.zeros((0, k), np.int64),
            )
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]

    def candidates(self, queries: np.ndarray, m: int, *, use_coarse: bool = False) -> np.ndarray:
        """Rows recalled by the coarse stage (all rows when ``m >= len(self)``, unless
        ``use_coarse``)."""
        total = len(self)
        if m >= total and not use_coarse:
            return np.broadcast_to(np.arange(total, dtype=np.int64), (len(queries), total)).copy()
        self._refresh_coarse()
        return self._coarse.search(queries, m)

    def _search_chunk(self, q: np.ndarray, k: int, use_coarse: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(q)
        m = min(len(self), k * self.overfetch)
        rows = self.candidates(q, m, use_coarse=use_coarse)
        valid = rows >= 0
        all_valid = bool(valid.all())
        safe_rows = rows if all_valid else np.where(valid, rows, 0)
        gathered = np.asarray(self._vectors[safe_rows.ravel()], dtype=np.float32)
        score, dist = self.model.score(q, gathered.reshape(n, rows.shape[1], self.dimension))
        if not all_valid:
            score = np.where(valid, score, -np.inf)
            dist = np.where(valid, dist, np.inf)
            rows = np.where(valid, rows, np.iinfo(np.int64).max)
        # best score first; ties by distance, then by row (missing rows sort last)
        order = np.lexsort((rows, dist, -score), axis=-1)[:, :k]
        pick = (np.arange(n)[:, None], order)
        w = order.shape[1]
        top_s = np.full((n, k), -np.inf, dtype=np.float32)
        top_d = np.full((n, k), np.inf, dtype=np.float32)
        top_r = np.full((n, k), -1, dtype=np.int64)
        top_s[:, :w] = score[pick]
        top_d[:, :w] = dist[pick]
        top_r[:, :w] = np.where(np.isneginf(top_s[:, :w]), -1, rows[pick])
        return top_s, top_d, top_r

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

        Returns
        -------
        dict
            ``{"k", "queries", "candidates", "coarse_recall", "recall", "source"}``.

        Example
        -------
        >>> ranker.recall(k=10)["recall"]                        # doctest: +SKIP
        1.0
        """
        k = _check_k(k)
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
        qv = self.model.encode(qs, role="question")
        kk = min(k, len(self))
        _, truth = exact_search(qv, self._vectors, kk, geometry=self.model.geometry, ranking=self.model.ranking)
        m = min(len(self), k * self.overfetch)
        coarse_rows = self.candidates(qv, m)
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
    def add(
        self, records: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record], *, batch_size: int = 256
    ) -> int:
        """Add answers (a corpus file or records); their ids must be new.

        Returns
        -------
        int
            The number of answers added.
        """
        existing = list(self._records.ids())
        if isinstance(records, str | os.PathLike):
            new = read_corpus(records, existing_ids=existing)
        else:
            new = records_from_dicts(records, existing_ids=existing)
        vectors = _encode_answers(self.model, [r.answer for r in new], batch_size, False)
        self._records = self._records.append(new)
        self._vectors = np.concatenate([np.asarray(self._vectors), vectors])
        if not self._coarse_stale:
            self._coarse.add(vectors)
        return len(new)

    def remove(self, ids: Iterable[str | int]) -> int:
        """Remove answers by id; every id must exist.

        Returns
        -------
        int
            The number of answers removed.
        """
        index = self._records.ids()
        wanted = list(ids)
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
        self._coarse_stale = True
        return len(drop)

    def _refresh_coarse(self) -> None:
        if self._coarse_stale:
            kind = choose_kind(self.kind_requested, len(self)) if self.kind_requested == "auto" else self._coarse.kind
            self._coarse = CoarseIndex(
                self.model.geometry,
                self.dimension,
                kind,
                self._coarse.params or None,
                device=self._coarse.device,
                ranking=self.model.ranking,
            )
            self._coarse.add(np.asarray(self._vectors))
            self._coarse_stale = False

    # -- persistence ---------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save atomically: a new snapshot, then ``manifest.json`` replaced, then cleanup.

        Returns
        -------
        Path
            The index directory.
        """
        self._refresh_coarse()
        root = Path(path)
        if root.exists() and not root.is_dir():
            raise IndexFormatError(f"{root}: exists and is not a directory; choose another --index path")
        if root.is_dir() and any(root.iterdir()) and not (root / "manifest.json").is_file():
            raise IndexFormatError(
                f"{root}: exists and is not a qaindex index; choose another --index path or remove it"
            )
        root.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        snap_name = f"data-{stamp}-{os.getpid()}"
        snap = root / f".{snap_name}.tmp"
        snap.mkdir()
        try:
            with open(snap / "records.jsonl", "wb") as handle:
                handle.write(bytes(self._records.data[: int(self._records.offsets[-1])]))
            np.save(snap / "records.offsets.npy", np.asarray(self._records.offsets, dtype=np.int64), allow_pickle=False)
            np.save(snap / "vectors.npy", np.ascontiguousarray(self._vectors, dtype=np.float32), allow_pickle=False)
            self._coarse.save(snap / "coarse.faiss")
            self.model.copy_to(snap / "model")
            files = {p.relative_to(snap).as_posix(): file_entry(p) for p in sorted(snap.rglob("*")) if p.is_file()}
            fsync_tree(snap)
            os.replace(snap, root / snap_name)
        except BaseException:
            shutil.rmtree(snap, ignore_errors=True)
            raise
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
            "coarse": {"kind": self._coarse.kind, "params": self._coarse.params, "requested": self.kind_requested},
            "overfetch": self.overfetch,
            "model": {
                "name": self.model.name,
                "directory": "model",
                "manifest_sha256": files["model/manifest.json"]["sha256"],
            },
            "files": files,
        }
        try:
            write_json_atomic(root / "manifest.json", manifest)
        except BaseException:
            shutil.rmtree(root / snap_name, ignore_errors=True)
            raise
        # The new snapshot is live; remove older ones and leftovers of interrupted saves.
        for entry in root.iterdir():
            if entry.name != snap_name and (entry.name.startswith("data-") or entry.name.startswith(".data-")):
                # a reader that memory-mapped the old snapshot keeps its data (POSIX unlink)
                shutil.rmtree(entry, ignore_errors=True)
        self.path = root
        return root

    def verify(self) -> None:
        """Check the size and SHA-256 of every file of the saved index (raises on mismatch)."""
        if self.path is None:
            raise QAIndexError("this index has not been saved; nothing to verify")
        manifest = _read_index_manifest(self.path)
        verify_files(self.path / manifest["snapshot"], manifest["files"], error=IndexFormatError, what="index")

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
            "devices": {"onnxruntime": self.model.providers, "faiss": self._coarse.device},
            "created": self.created,
            "near_centre": _near_centre(self.model, self._vectors),
        }


def _near_centre(model: Model, vectors: np.ndarray) -> dict[str, Any] | None:
    """Answers near the ball's centre (:func:`qaindex.hyperbolic.near_centre`) and whether
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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _read_index_manifest(root: Path) -> dict[str, Any]:
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
