"""Streaming build: a JSONL corpus encoded chunk by chunk, with bounded memory.

``Ranker.build`` on a corpus file (and so ``qaindex build``) reads the corpus a line at a
time, validates each line as :func:`qaindex.corpus.read_corpus` does (same rules, same
messages naming the file and line), and every ``chunk_size`` answers encodes the chunk and
appends its vectors and its stored record lines to unlinked temporary files. Only one
chunk of texts is in memory at a time; what grows with the corpus is the per-answer index
state: the vectors (memory-mapped from their temporary file), the FAISS index, 8 bytes of
record offset and the id table (for duplicate ids) per answer. The FAISS index is built
once the count is known (``auto`` picks its kind from it), from the vectors in chunks.

Encoding is pipelined (:class:`EncodePipeline`): while one worker thread runs the ONNX
encoder over chunk i (onnxruntime releases the GIL), the calling thread reads, validates
and tokenizes chunk i+1. Each chunk gets exactly the batches ``Model.encode`` would give
it and vectors are appended in chunk order, so the result is the same as encoding the
chunks one after the other.

An error in line N stops the build before anything is written to an index directory (the
temporary files vanish with the process's handles), like the in-memory build.

:mod:`qaindex.indexing.distributed` reuses :class:`RecordSpool`, :func:`validate_corpus` and
:func:`assemble_index`, so a Ray build validates, stores and indexes exactly like this one.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .. import fast_path_switch
from ..corpus import Record, _Collector, read_json_lines
from ..model import Model
from ..store.diskspace import writing
from ..store.records import RecordStore, encode_record, encode_records
from ..vector_index import CoarseIndex, choose_kind
from .cuts import TextSink

__all__ = [
    "DEFAULT_CHUNK",
    "EncodePipeline",
    "RecordSpool",
    "VectorSpool",
    "assemble_index",
    "build_from_file",
    "validate_corpus",
]

DEFAULT_CHUNK = 8192  # answers encoded (and texts held in memory) at a time
_COPY_BLOCK = 1 << 22


class _Growable:
    """A 1-D numpy array that grows by doubling (amortised O(1) appends)."""

    def __init__(self, dtype: Any) -> None:
        self._data = np.zeros(1024, dtype=dtype)
        self._size = 0

    def append(self, value: int) -> None:
        if self._size == len(self._data):
            self._data = np.resize(self._data, 2 * len(self._data))
        self._data[self._size] = value
        self._size += 1

    def extend(self, values: np.ndarray) -> None:
        while self._size + len(values) > len(self._data):
            self._data = np.resize(self._data, 2 * len(self._data))
        self._data[self._size : self._size + len(values)] = values
        self._size += len(values)

    def __getitem__(self, i: int) -> int:
        return int(self._data[i])

    def array(self) -> np.ndarray:
        return self._data[: self._size].copy()


def _spooling(
    directory: str | os.PathLike[str] | None, handle: BinaryIO | None, needed: int
) -> contextlib.AbstractContextManager[None]:
    """A full temporary directory (or ``ulimit -f``) while spooling is a :class:`DiskFullError` naming it."""
    where = Path(directory if directory is not None else tempfile.gettempdir())
    return writing(
        where,
        "the build's temporary spool file (set TMPDIR to put it elsewhere)",
        needed=needed,
        file_bytes=(0 if handle is None else handle.tell()) + needed,
    )


def _spool_file(directory: str | os.PathLike[str] | None, prefix: str) -> BinaryIO:
    """A new unnamed temporary file (no inode left in the directory: :class:`DiskFullError`)."""
    with _spooling(directory, None, 4096):
        return tempfile.TemporaryFile(dir=directory, prefix=prefix)


class RecordSpool:
    """The records of a build in progress: pending in memory, then spooled to a temporary file.

    Behaves as the list of records that :class:`~qaindex.corpus._Collector` fills:
    ``append`` adds a pending record, indexing reads one back (from memory, or from the file
    for records already spooled), assignment replaces one (the answer-selection format adds
    questions to an answer seen earlier). :meth:`take_pending` writes the pending records'
    lines to the file and returns them; :meth:`store` gives the final
    :class:`~qaindex.store.records.RecordStore`, memory-mapped.

    Parameters
    ----------
    directory : path-like, optional
        Where the temporary file lives (default: the system's temporary directory).

    Example
    -------
    >>> spool = RecordSpool()
    >>> spool.append(Record(id=1, answer="Yes."))
    >>> [r.answer for r in spool.take_pending()], spool.store().get(0).answer
    (['Yes.'], 'Yes.')
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._directory = directory
        self._file = _spool_file(directory, "qaindex-records-")
        self._offsets = _Growable(np.int64)
        self._offsets.append(0)
        self.flushed = 0
        self.pending: list[Record] = []
        self.patches: dict[int, Record] = {}

    def __len__(self) -> int:
        return self.flushed + len(self.pending)

    def append(self, record: Record) -> None:
        self.pending.append(record)

    def __getitem__(self, row: int) -> Record:
        if row >= self.flushed:
            return self.pending[row - self.flushed]
        if row in self.patches:
            return self.patches[row]
        start, end = self._offsets[row], self._offsets[row + 1]
        line = os.pread(self._file.fileno(), end - start, start)
        return Record.from_json(json.loads(line.decode("utf-8")))

    def __setitem__(self, row: int, record: Record) -> None:
        if row >= self.flushed:
            self.pending[row - self.flushed] = record
        else:
            self.patches[row] = record

    def take_pending(self) -> list[Record]:
        """Spool the pending records to the file and return them (in row order)."""
        chunk, self.pending = self.pending, []
        lines = encode_records(chunk)
        self._offsets.extend(np.cumsum([len(line) for line in lines], dtype=np.int64) + self._offsets[self.flushed])
        data = b"".join(lines)
        with _spooling(self._directory, self._file, len(data)):
            self._file.write(data)
            self._file.flush()
        self.flushed += len(chunk)
        return chunk

    def store(self) -> RecordStore:
        """The spooled records as a memory-mapped store (pending records are spooled first).

        Records replaced after they were spooled are rewritten into a fresh file, the rest
        copied block by block.
        """
        self.take_pending()
        offsets = self._offsets.array()
        source = self._file
        if self.patches:
            source, offsets = self._rewrite(offsets)
        size = int(offsets[-1])
        data: bytes | mmap.mmap = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        source.close()  # the mapping stays valid; the unlinked file goes when it is unmapped
        return RecordStore(data, offsets, checked=True, canonical=True)  # lines of validated records, encoded here

    def _rewrite(self, offsets: np.ndarray) -> tuple[BinaryIO, np.ndarray]:
        out = _spool_file(self._directory, "qaindex-records-")
        with _spooling(self._directory, out, int(offsets[-1])):
            return self._rewrite_into(out, offsets)

    def _rewrite_into(self, out: BinaryIO, offsets: np.ndarray) -> tuple[BinaryIO, np.ndarray]:
        fd = self._file.fileno()
        delta = np.zeros(len(offsets), dtype=np.int64)
        position = 0
        for row in sorted(self.patches):
            _copy_range(fd, int(offsets[position]), int(offsets[row]), out)
            line = encode_record(self.patches[row])
            out.write(line)
            delta[row + 1] = len(line) - int(offsets[row + 1] - offsets[row])
            position = row + 1
        _copy_range(fd, int(offsets[position]), int(offsets[-1]), out)
        out.flush()
        self._file.close()
        return out, offsets + np.cumsum(delta)


def _copy_range(fd: int, start: int, end: int, out: BinaryIO) -> None:
    while start < end:
        block = os.pread(fd, min(_COPY_BLOCK, end - start), start)
        out.write(block)
        start += len(block)


class VectorSpool:
    """Answer vectors appended chunk by chunk to a temporary file, then memory-mapped.

    Example
    -------
    >>> spool = VectorSpool(2)
    >>> spool.append(np.ones((3, 2), np.float32))
    >>> spool.finish().shape
    (3, 2)
    """

    def __init__(self, dimension: int, directory: str | os.PathLike[str] | None = None) -> None:
        self.dimension = int(dimension)
        self._directory = directory
        self._file = _spool_file(directory, "qaindex-vectors-")
        self.count = 0

    def append(self, vectors: np.ndarray) -> None:
        """Append rows (float32, ``dimension`` columns)."""
        block = np.ascontiguousarray(vectors, dtype=np.float32)
        with _spooling(self._directory, self._file, block.nbytes):
            self._file.write(block.tobytes())
        self.count += len(block)

    def finish(self) -> np.ndarray:
        """All rows, as a read-only memory map (an empty array when there are none)."""
        with _spooling(self._directory, self._file, 0):
            self._file.flush()
        if self.count == 0:
            self._file.close()
            return np.zeros((0, self.dimension), dtype=np.float32)
        out = np.memmap(self._file, dtype=np.float32, mode="r", shape=(self.count, self.dimension))
        self._file.close()
        return out


class _LineTable(Mapping[str, str]):
    """``id key -> "file:line"`` where it was first seen, computed from the row's line number."""

    def __init__(self, collector: _StreamingCollector) -> None:
        self._collector = collector

    def __contains__(self, key: object) -> bool:
        return key in self._collector._where

    def __getitem__(self, key: str) -> str:
        row = self._collector._where[key]
        return f"{self._collector.source}:{self._collector.lines[row]}"

    def __iter__(self) -> Iterator[str]:
        return iter(self._collector._where)

    def __len__(self) -> int:
        return len(self._collector._where)


class _StreamingCollector(_Collector):
    """:class:`~qaindex.corpus._Collector` over a :class:`RecordSpool`: the same rules and
    messages, with one line number (not one string) kept per answer."""

    def __init__(self, source: str, records: RecordSpool) -> None:
        super().__init__(source)
        self.records = records  # type: ignore[assignment]
        self.lines = _Growable(np.int64)  # row -> the line that created it
        self._line_of = _LineTable(self)  # type: ignore[assignment]
        self._current = 0

    def add(self, obj: Any, line: int | None, default_id: int) -> None:
        self._current = line or 0
        super().add(obj, line, default_id)

    def add_plain(self, obj: Any, at: str, default_id: int) -> bool:
        self._current = default_id  # the line number (validate_corpus passes it as the default id)
        return super().add_plain(obj, at, default_id)

    def _register(self, ident: str | int, at: str) -> None:
        self._where[str(ident)] = len(self.records)
        self.lines.append(self._current)


def validate_corpus(
    path: str | os.PathLike[str],
    spool: RecordSpool,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    on_chunk: Callable[[list[Record]], None] | None = None,
) -> np.ndarray:
    """Read and validate a corpus file into ``spool``, calling ``on_chunk`` every ``chunk_size`` answers.

    Parameters
    ----------
    path : path-like
        The JSONL corpus.
    spool : RecordSpool
        Receives the records.
    chunk_size : int, keyword-only
        Answers per chunk.
    on_chunk : callable, optional
        Called with each chunk of new records, in order (the last one may be shorter).

    Returns
    -------
    numpy.ndarray of int64
        For each answer, the 1-based line number that created it.

    Raises
    ------
    CorpusError
        As :func:`qaindex.corpus.read_corpus`, for the first bad line.
    """
    collector = _StreamingCollector(os.fspath(path), spool)
    source = collector.source
    for number, obj in read_json_lines(path):
        if not collector.add_plain(obj, f"{source}:{number}", number):
            collector.add(obj, number, number)
        if len(spool.pending) >= chunk_size:
            chunk = spool.take_pending()
            if on_chunk is not None:
                on_chunk(chunk)
    collector.finish()  # no answers at all: a CorpusError
    chunk = spool.take_pending()
    if chunk and on_chunk is not None:
        on_chunk(chunk)
    return collector.lines.array()


def assemble_index(
    model: Model,
    vectors: np.ndarray,
    *,
    index_kind: str = "auto",
    hnsw: Mapping[str, int] | None = None,
    device: str = "auto",
    chunk_size: int = DEFAULT_CHUNK,
) -> CoarseIndex:
    """The coarse FAISS index over all answer vectors (its kind chosen from their count).

    Vectors are added ``chunk_size`` rows at a time, so the transformed copy FAISS needs
    (lifted or normalised rows) exists for one chunk only; trainable kinds first train on the
    same seeded sample of all the vectors as a build that adds them at once, and every
    size-dependent default (IVF lists, PQ refinement, HNSW construction) follows the count,
    so the index is the one ``Ranker.build`` makes from the same vectors in memory.
    """
    kind = choose_kind(index_kind, len(vectors))
    coarse = CoarseIndex(model.space, model.dimension, kind, hnsw, device=device, count=len(vectors))
    coarse.train(vectors)
    for start in range(0, len(vectors), chunk_size):
        coarse.add(np.asarray(vectors[start : start + chunk_size]))
    return coarse


class EncodePipeline:
    """Encodes chunks of answers in order, overlapping the encoder with the next chunk's Python work.

    :meth:`submit` tokenizes and pads a chunk in the calling thread, then hands the ONNX
    runs to one worker thread (onnxruntime releases the GIL) and returns, so reading,
    validating and tokenizing chunk i+1 overlaps encoding chunk i. Vectors are appended to
    the spool in chunk order, and each chunk is encoded with exactly the batches
    ``Model.encode`` would use for it, so the result is identical to encoding the chunks
    one after the other. Without the fast paths (:func:`qaindex.fast_path_switch.generic_only`)
    everything runs in the calling thread, as before.
    """

    def __init__(
        self,
        model: Model,
        vectors: VectorSpool | list[np.ndarray],
        batch_size: int,
        progress: Callable[[int], None] | None,
        lexical: TextSink | None = None,
    ) -> None:
        self._model = model
        self._lexical = lexical
        self._vectors = vectors
        self._batch_size = batch_size
        self._progress = progress
        self._threaded = fast_path_switch.enabled()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qaindex-encode") if self._threaded else None
        self._pending: tuple[Future[np.ndarray], int] | None = None

    def submit(self, chunk: list[Record]) -> None:
        """Encode one chunk of records' answers (in the worker thread when threaded)."""
        self.submit_texts([r.answer for r in chunk])

    def submit_texts(self, texts: list[str]) -> None:
        """Encode one chunk of answer texts (in the worker thread when threaded)."""
        if self._pool is None:
            self._vectors.append(
                self._model.encode(texts, role="answer", batch_size=self._batch_size, progress=self._progress)
            )
        else:
            feeds = list(self._model._feeds(texts, "answer", self._batch_size))
            self._drain()
            run = self._model._run_feeds
            self._pending = (self._pool.submit(run, "answer", feeds, len(texts), None, texts), len(texts))
        if self._lexical is not None:  # the BM25 rows, while the worker runs the encoder
            self._lexical.add(texts)

    def _drain(self) -> None:
        if self._pending is not None:
            future, count = self._pending
            self._pending = None
            self._vectors.append(future.result())
            if self._progress is not None:
                self._progress(count)

    def __enter__(self) -> EncodePipeline:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        try:
            if kind is None:
                self._drain()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)


def count_lines(path: str | os.PathLike[str], *, block: int = 1 << 20) -> int | None:
    """The number of lines of a file (the last one need not end with a newline), or None if
    unreadable or not a regular file (a pipe or a device may never end: nothing is read).

    The progress bar's total for a file build: counting newlines reads the file once at
    disk speed, far faster than validating and encoding it.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
    >>> _ = p.write_bytes(b'{"answer": "a"}\\n{"answer": "b"}')
    >>> count_lines(p), count_lines(p.parent / "missing.jsonl")
    (2, None)
    """
    lines, last = 0, b"\n"
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            while chunk := f.read(block):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return None
    return lines + (last != b"\n")


def build_from_file(
    path: str | os.PathLike[str],
    model: Model,
    *,
    index_kind: str = "auto",
    hnsw: Mapping[str, int] | None = None,
    device: str = "auto",
    batch_size: int = 256,
    chunk_size: int = DEFAULT_CHUNK,
    progress: Callable[[int], None] | None = None,
    spool_dir: str | os.PathLike[str] | None = None,
    lexical: TextSink | None = None,
) -> tuple[RecordStore, np.ndarray, CoarseIndex]:
    """Encode and index a corpus file chunk by chunk (see the module docstring).

    ``lexical``, when given, receives every chunk's answer texts in row order (the BM25
    index of hybrid search, built in the same pass; call its ``finish``).

    Returns
    -------
    records : RecordStore
    vectors : numpy.ndarray (n, dimension), float32, memory-mapped
    coarse : CoarseIndex

    Example
    -------
    >>> records, vectors, coarse = build_from_file("examples/faq.jsonl", Model.load(), chunk_size=100)
    >>> len(records) == len(vectors) == coarse.ntotal
    True
    """
    spool = RecordSpool(spool_dir)
    vectors = VectorSpool(model.dimension, spool_dir)
    with EncodePipeline(model, vectors, batch_size, progress, lexical) as pipeline:
        validate_corpus(path, spool, chunk_size=chunk_size, on_chunk=pipeline.submit)
    store = spool.store()
    matrix = vectors.finish()
    coarse = assemble_index(model, matrix, index_kind=index_kind, hnsw=hnsw, device=device, chunk_size=chunk_size)
    return store, matrix, coarse
