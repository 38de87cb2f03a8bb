"""Per-chunk checksums: a large memory-mapped file verified where it is read, on first touch.

A load that hashed every byte of a million-answer index would read a gigabyte of vectors,
records and BM25 postings before answering its first question, though a search reads a few
hundred rows of them. So a snapshot stores, beside each of :data:`LAZY_FILES` (the vectors,
the records, the BM25 terms, counts and postings), the SHA-256 of each ``CHUNK_BYTES`` slice
of it (``vectors.npy.chunks``: the 32-byte digests back to back; the slice ``i`` is bytes
``[i * CHUNK_BYTES, min((i + 1) * CHUNK_BYTES, size))``). That file is listed in the
manifest and hashed whole with the other files; the file itself is then verified lazily
(:class:`ChunkedFile`): the first read of a row (a vector, a record's line, a term's
postings) hashes the chunks that hold it and compares them with their digests; for the
vectors it also checks the rows those chunks hold as a full load would (finite, inside the
ball of a Poincaré model: :func:`~.index_checks.check_vectors`; the other files' content is
checked by the load, or as a record is decoded). A chunk is hashed once per load; one that
differs raises :class:`~qaindex.errors.IndexFormatError` naming the bytes and rows, on every
read that touches it. So nothing is used before its bytes were proved to be those the
index's writer saved, and a load costs what it reads. Code that reads a whole file (a save,
an update) goes through :class:`CheckedRows` or :class:`CheckedBytes`, which verify it first.

Searches would otherwise keep paying for first touches: a million-answer index holds about
250,000 chunks of vectors, and the first thousand searches of it would each hash a thousand
new ones. So after a default load a background thread (:func:`verify_in_background`) hashes
every chunk not verified yet, file after file, :data:`_BACKGROUND_CHUNKS` at a time, from
:data:`_START_DELAY` after the load (a first search asked at once runs alone) and pausing
while a search verifies what it reads (SHA-256 releases the GIL, but the two hashing loops
would take turns at it), and within seconds every file is verified and searches hash
nothing. It changes no result: a search still verifies what it reads itself unless the
thread got there first, and the same chunk verified twice is verified twice. A damaged
chunk it finds is logged (``qaindex.store`` warning) and left unverified, so the first read
that touches it raises as before; the thread then stops. ``Ranker.load(verify="lazy")``
verifies on first touch only, without the thread.

``Ranker.verify`` and ``Ranker.load(verify="full")`` still hash every byte.
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import IndexFormatError, QAIndexError
from .atomic_files import create_file
from .index_checks import check_vectors

__all__ = [
    "CHUNK_BYTES",
    "DIGEST_SUFFIX",
    "LAZY_FILES",
    "CheckedBytes",
    "CheckedRows",
    "ChunkedFile",
    "chunk_digests",
    "lazy_digests_name",
    "lazy_files",
    "verify_in_background",
    "write_chunk_digests",
]

CHUNK_BYTES = 1 << 12  # a page: the first search of a large index hashes about 4 KiB a row it reads
DIGEST_SUFFIX = ".chunks"
_DIGEST = 32  # bytes of one SHA-256 digest
_REBUILD = "the index is corrupted, rebuild it"
#: The files a snapshot stores chunk digests of: the large ones a search reads a little of, in
#: the order the background thread verifies them: first the BM25 postings (a frequent term's
#: are long, and read by many searches), then the vectors (each search reads rows of its own),
#: the records (ten lines a search) and the terms and counts (a few candidates' rows).
LAZY_FILES = (
    "lexical/postings-rows.npy",
    "lexical/postings-weights.npy",
    "vectors.npy",
    "records.jsonl",
    "lexical/terms.npy",
    "lexical/counts.npy",
)
_CHUNK_RANGE = (1 << 12, 1 << 26)
_BATCH_BYTES = 1 << 24
#: Chunks the background thread verifies at a time (256 KiB): small, so a search that checks
#: the same chunks meanwhile does not wait on it for long.
_BACKGROUND_CHUNKS = 16
_YIELD_SECONDS = 0.0002
#: Seconds between the load and the background thread's first hash: a process that loads an
#: index to answer a question at once (a command, a cold start) answers it alone.
_START_DELAY = 0.2
_log = logging.getLogger("qaindex.store")


def chunk_digests(path: str | os.PathLike[str], chunk_bytes: int = CHUNK_BYTES) -> bytes:
    """The SHA-256 digests of each ``chunk_bytes`` slice of a file, back to back.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "x"; _ = p.write_bytes(b"ab" * 5)
    >>> d = chunk_digests(p, chunk_bytes=4)
    >>> len(d) // 32, d[:32] == hashlib.sha256(b"abab").digest()
    (3, True)
    """
    out = bytearray()
    with open(path, "rb") as handle:
        while chunk := handle.read(chunk_bytes):
            out += hashlib.sha256(chunk).digest()
    return bytes(out)


def write_chunk_digests(path: Path) -> Path:
    """Write ``path``'s chunk digests to a new file (:func:`lazy_digests_name`) and return it."""
    target = path.with_name(lazy_digests_name(path.name))
    with create_file(target) as handle:
        handle.write(chunk_digests(path))
    return target


def lazy_digests_name(name: str) -> str:
    """The name of the file holding ``name``'s chunk digests."""
    return name + DIGEST_SUFFIX


def lazy_files(snap: Path, files: Mapping[str, Any], mpath: Path) -> set[str]:
    """The files of a snapshot that a load may verify chunk by chunk: those whose manifest
    entry gives ``chunk_bytes`` and whose digests file is listed, of the right size. Empty for
    a snapshot written before chunk digests (every file is hashed whole then).

    Example
    -------
    >>> files = {"vectors.npy": {"bytes": 70000, "sha256": "0" * 64, "chunk_bytes": 65536},
    ...          "vectors.npy.chunks": {"bytes": 64, "sha256": "0" * 64}}
    >>> sorted(lazy_files(Path("snap"), files, Path("manifest.json")))
    ['vectors.npy']
    """
    out = set()
    for name in LAZY_FILES:
        entry = files.get(name)
        if not isinstance(entry, Mapping) or "chunk_bytes" not in entry:
            continue
        chunk = entry["chunk_bytes"]
        low, high = _CHUNK_RANGE
        if isinstance(chunk, bool) or not isinstance(chunk, int) or not low <= chunk <= high or chunk & (chunk - 1):
            raise IndexFormatError(
                f'{mpath}: field "files.{name}.chunk_bytes" must be a power of two from {low} to {high}, got '
                f"{chunk!r}; {_REBUILD}"
            )
        digests = files.get(lazy_digests_name(name))
        want = -(-int(entry["bytes"]) // chunk) * _DIGEST
        if not isinstance(digests, Mapping) or digests.get("bytes") != want:
            raise IndexFormatError(
                f'{mpath}: field "files.{name}.chunk_bytes" needs "files.{lazy_digests_name(name)}" of {want} bytes '
                f"(the chunk digests of {snap / name}); {_REBUILD}"
            )
        out.add(name)
    return out


class ChunkedFile:
    """The rows of a memory-mapped file, verified chunk by chunk on first touch.

    Parameters
    ----------
    path : Path
        The file: a ``.npy`` array (``array`` maps it), or raw bytes (``array`` is a uint8
        view of them, a row a byte).
    array : numpy.ndarray (rows,) or (rows, dimension)
        Its memory map, as the index serves it.
    digests : bytes
        :func:`chunk_digests` of the file, as its snapshot stored them.
    chunk_bytes : int
        The slice the digests cover.
    ball : bool or None
        For vectors: rows must be finite and (True) lie inside the unit ball (a Poincaré
        model's), checked as their chunks are verified. None: no content check here.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "v.npy"
    >>> np.save(p, np.full((3000, 4), 0.1, np.float32))
    >>> checks = ChunkedFile(p, np.load(p, mmap_mode="r"), chunk_digests(p, 4096), 4096, ball=True)
    >>> checks.check_rows(np.array([0, 2999])); int(checks.done.sum()), len(checks.done)
    (2, 12)
    """

    def __init__(
        self, path: Path, array: np.ndarray, digests: bytes, chunk_bytes: int, *, ball: bool | None = None
    ) -> None:
        self.path = path
        self.array = array
        self.size = os.path.getsize(path)
        self.chunk_bytes = chunk_bytes
        count = -(-self.size // chunk_bytes)
        if len(digests) != count * _DIGEST:
            raise IndexFormatError(
                f"{path.with_name(lazy_digests_name(path.name))}: holds {len(digests)} bytes, not the "
                f"{count * _DIGEST} of {count} chunk digests of {path.name}; {_REBUILD}"
            )
        self._digests = digests
        self.row_bytes = int(array.dtype.itemsize * (array.shape[1] if array.ndim > 1 else 1))
        self.header = self.size - self.row_bytes * len(array)
        self.ball = ball
        # one flag per chunk: hashed and found right (a chunk that failed stays False)
        self.done = np.zeros(count, dtype=bool)
        self.complete = count == 0
        # the background verification (verify_in_background) and the error that stopped it
        self.background: threading.Thread | None = None
        self.background_error: QAIndexError | None = None
        # the searches verifying what they read now, in any file of the index: the background
        # thread waits meanwhile (verify_in_background gives the files it verifies one count)
        self.readers = _Readers()
        with open(path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None

    def check_rows(self, rows: np.ndarray) -> None:
        """Verify the chunks that hold these rows (valid row numbers, any shape), once each."""
        if self.complete:
            return
        rows = np.asarray(rows, dtype=np.int64).ravel()
        if len(rows) == 0:
            return
        first = (self.header + rows * self.row_bytes) // self.chunk_bytes
        last = (self.header + (rows + 1) * self.row_bytes - 1) // self.chunk_bytes
        # a row shorter than a chunk spans at most two; a longer one, every chunk from its first to its last
        chunks = np.union1d(first, last) if self.row_bytes <= self.chunk_bytes else np.unique(_spans(first, last + 1))
        self._verify(chunks)

    def check_span(self, start: int, stop: int) -> None:
        """Verify the chunks that hold rows ``start`` to ``stop - 1`` (a slice's), once each."""
        if self.complete or stop <= start:
            return
        first = (self.header + start * self.row_bytes) // self.chunk_bytes
        last = (self.header + stop * self.row_bytes - 1) // self.chunk_bytes
        self._verify(np.arange(first, last + 1, dtype=np.int64))

    def _verify(self, chunks: np.ndarray) -> None:
        """A search's read: hash those of ``chunks`` not verified yet."""
        todo = chunks[~self.done[chunks]]
        if len(todo):
            with self.readers:  # the background thread waits meanwhile: both hashing loops would share one GIL
                self._check(todo)

    def check_all(self) -> None:
        """Verify every chunk not verified yet (an update, a save, ``info``: all rows are read),
        in batches of :data:`_BATCH_BYTES` (the content check copies a batch's rows)."""
        todo = np.flatnonzero(~self.done)
        step = max(1, _BATCH_BYTES // self.chunk_bytes)
        for start in range(0, len(todo), step):
            self._check(todo[start : start + step])

    def verify_in_background(self) -> None:
        """:func:`verify_in_background` of this file alone."""
        verify_in_background([self])

    def _check(self, chunks: np.ndarray) -> None:
        """Hash these chunks and compare each with its digest, then check the content of the rows
        they hold (:func:`~.index_checks.check_vectors`, as a full load scans every row) in one pass."""
        if len(chunks) == 0:
            return
        view = memoryview(self._map) if self._map is not None else memoryview(b"")
        size, step, digests = self.size, self.chunk_bytes, self._digests
        for chunk in chunks.tolist():
            start = chunk * step
            if hashlib.sha256(view[start : start + step]).digest() != digests[chunk * _DIGEST : (chunk + 1) * _DIGEST]:
                end = min(size, start + step)
                first, last = (int(v[0]) for v in self._rows_of(np.array([chunk])))
                # a matrix's rows, a 1-D array's entries; a raw file's bytes are named already
                unit = "rows" if self.array.ndim > 1 else "entries" if self.array.dtype != np.uint8 else None
                held = f" ({unit} {first}..{last - 1})" if unit else ""
                raise IndexFormatError(
                    f"{self.path}: bytes {start}..{end}{held} do not match their checksum in "
                    f"{lazy_digests_name(self.path.name)}; {_REBUILD}"
                )
        if self.ball is not None:
            rows = np.unique(_spans(*self._rows_of(chunks)))  # the rows these chunks hold, merged
            if len(rows):
                check_vectors(self.path, np.asarray(self.array)[rows], ball=self.ball, scan=True, rows=rows)
        self.done[chunks] = True
        self.complete = bool(self.done.all())

    def _rows_of(self, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each chunk, the rows ``[first, last)`` with at least one byte in it (empty: none)."""
        starts = chunks * self.chunk_bytes
        ends = np.minimum(self.size, starts + self.chunk_bytes)
        first = np.maximum(0, (starts - self.header) // self.row_bytes)
        last = np.minimum(len(self.array), -(-(ends - self.header) // self.row_bytes))
        return first, np.maximum(first, last)


def verify_in_background(files: Sequence[ChunkedFile]) -> threading.Thread | None:
    """Start one daemon thread that verifies every chunk not verified yet of these files, one
    file after the other (see the module docstring); None when all are verified. Each file's
    ``background`` is the thread. It holds a file only while it verifies a batch of it, so
    it stops once the index is let go.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "v.npy"
    >>> np.save(p, np.eye(3, dtype=np.float32))
    >>> checks = ChunkedFile(p, np.load(p, mmap_mode="r"), chunk_digests(p, 4096), 4096, ball=False)
    >>> verify_in_background([checks]).join(); checks.complete
    True
    """
    todo = [f for f in files if not f.complete and f.background is None]
    if not todo:
        return None
    for f in todo[1:]:  # a search reading any of them pauses the thread
        f.readers = todo[0].readers
    thread = threading.Thread(
        target=_verify_files,
        args=([(weakref.ref(f), np.flatnonzero(~f.done)) for f in todo],),
        name=f"qaindex-verify-{todo[0].path.parent.name}",
        daemon=True,
    )
    for f in todo:
        f.background = thread
    thread.start()
    return thread


class _Readers:
    """How many searches are verifying what they read now (``with readers:`` counts one)."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.count += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.count -= 1


def _verify_files(work: list[tuple[weakref.ref[ChunkedFile], np.ndarray]]) -> None:
    """The background thread of :func:`verify_in_background`."""
    time.sleep(_START_DELAY)
    for ref, todo in work:
        if not _verify_rest(ref, todo):
            return


def _verify_rest(ref: weakref.ref[ChunkedFile], todo: np.ndarray) -> bool:
    """Verify these chunks of one file in batches; False when it stopped early (the file was
    let go, or a chunk was damaged)."""
    for start in range(0, len(todo), _BACKGROUND_CHUNKS):
        checks = ref()
        if checks is None:  # the index was let go
            return False
        batch = todo[start : start + _BACKGROUND_CHUNKS]
        while checks.readers.count:  # a search is verifying what it reads: let it have the interpreter
            time.sleep(_YIELD_SECONDS)
        try:
            checks._check(batch[~checks.done[batch]])
        except QAIndexError as exc:  # damaged bytes or content: a search that reads them raises
            checks.background_error = exc
            _log.warning("%s (found by the background verification; searches that read these rows refuse them)", exc)
            return False
        del checks  # hold the file only while verifying a batch
    return True


class CheckedRows:
    """A :class:`ChunkedFile`'s array for code that reads rows (``rows[found]``, ``rows[a:b]``):
    each read verifies the rows it reads first; ``numpy.asarray`` of it verifies every row.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "v.npy"
    >>> np.save(p, np.eye(3, dtype=np.float32))
    >>> checks = ChunkedFile(p, np.load(p, mmap_mode="r"), chunk_digests(p, 4096), 4096, ball=False)
    >>> CheckedRows(checks)[np.array([2])].tolist(), checks.complete
    ([[0.0, 0.0, 1.0]], True)
    """

    def __init__(self, checks: ChunkedFile) -> None:
        self.checks = checks
        self.shape = checks.array.shape
        self.dtype = checks.array.dtype

    def __len__(self) -> int:
        return len(self.checks.array)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, rows: np.ndarray | slice | int) -> Any:
        checks = self.checks
        if checks.complete:
            return checks.array[rows]
        if isinstance(rows, slice):
            start, stop, _ = rows.indices(len(checks.array))
            checks.check_span(start, max(start, stop))
            return checks.array[rows]
        rows = np.asarray(rows)
        if rows.dtype.kind not in "iu":
            raise TypeError(f"rows must be integer row numbers, got {rows.dtype}")
        checks.check_rows(np.where(rows < 0, rows + len(checks.array), rows))
        return np.asarray(checks.array)[rows]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        self.checks.check_all()
        return np.asarray(self.checks.array, dtype=dtype)

    def astype(self, dtype: Any) -> np.ndarray:
        """Every row, verified, as ``dtype`` (a copy)."""
        return np.asarray(self).astype(dtype)


class CheckedBytes:
    """A :class:`ChunkedFile`'s bytes (a records file) for code that slices them
    (``data[a:b]``): each slice verifies the bytes it reads first; :meth:`verified` gives
    the whole buffer, every byte verified.

    Example
    -------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.jsonl"; _ = p.write_bytes(b"x" * 9000)
    >>> raw = np.fromfile(p, np.uint8)
    >>> data = CheckedBytes(ChunkedFile(p, raw, chunk_digests(p, 4096), 4096), raw.tobytes())
    >>> data[8000:8002], data.checks.done.tolist()
    (b'xx', [False, True, False])
    """

    def __init__(self, checks: ChunkedFile, data: Any) -> None:
        self.checks = checks
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, key: slice) -> Any:
        if not self.checks.complete:
            start, stop, _ = key.indices(len(self.data))
            self.checks.check_span(start, max(start, stop))
        return self.data[key]

    def verified(self) -> Any:
        """The whole buffer (bytes or a memory map), every chunk verified first."""
        self.checks.check_all()
        return self.data


def _spans(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """Every integer of the ranges ``[first[i], last[i])``, concatenated (``last >= first``).

    Example
    -------
    >>> _spans(np.array([0, 5]), np.array([2, 8])).tolist()
    [0, 1, 5, 6, 7]
    """
    lengths = last - first
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    out: np.ndarray = np.arange(total, dtype=np.int64) - np.repeat(ends - lengths - first, lengths)
    return out
