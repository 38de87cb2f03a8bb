"""The record store of an index: answers as JSON lines with byte offsets.

A snapshot keeps ``records.jsonl`` (one ``{"id", "answer", "questions", "metadata"}`` object
per line) and ``records.offsets.npy`` (``n + 1`` int64 byte offsets). :class:`RecordStore`
serves rows from memory-mapped bytes and decodes a record only when it is asked for.
"""

from __future__ import annotations

import json
import mmap
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .. import fast_path_switch
from ..corpus import Record
from ..errors import IndexFormatError
from .chunk_checks import CheckedBytes
from .index_checks import check_records, parse_record

__all__ = ["RecordStore", "encode_record", "encode_records"]

_RECORD_CACHE = 4096  # decoded records kept per index (cleared when full)
# in a line qaindex encoded, a non-empty "questions" list starts so; inside a JSON string a quote
# is escaped, so these bytes are a key: the record's own, or one in its metadata
_NON_EMPTY_QUESTIONS = re.compile(rb'"questions": \["')


# What ``json.dumps(..., ensure_ascii=False)`` uses for a str, and an encoder with its settings.
_quote: Callable[[str], str] = getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def encode_record(record: Record) -> bytes:
    """One stored line: the record's JSON (UTF-8, not ASCII-escaped) and a newline.

    The bytes are exactly ``json.dumps(record.to_json(), ensure_ascii=False) + "\\n"``; the
    usual shapes (a str or int id, str questions, a dict of metadata) are assembled from
    their parts without building the dict.

    Example
    -------
    >>> encode_record(Record(id=1, answer="Yes.", questions=(), metadata={}))
    b'{"id": 1, "answer": "Yes.", "questions": [], "metadata": {}}\\n'
    """
    return _record_line(record).encode("utf-8")


def encode_records(records: Sequence[Record]) -> list[bytes]:
    """:func:`encode_record` of each record, in order.

    Example
    -------
    >>> encode_records([Record(id="a", answer="Oui.", questions=("Q?",))])
    [b'{"id": "a", "answer": "Oui.", "questions": ["Q?"], "metadata": {}}\\n']
    """
    return [_record_line(record).encode("utf-8") for record in records]


def _record_line(record: Record) -> str:
    if not fast_path_switch.enabled():
        return json.dumps(record.to_json(), ensure_ascii=False) + "\n"
    ident, questions, metadata = record.id, record.questions, record.metadata
    kind = type(ident)
    if kind is int:
        id_text = int.__repr__(ident)
    elif isinstance(ident, str) and kind is str:
        id_text = _quote(ident)
    else:
        return json.dumps(record.to_json(), ensure_ascii=False) + "\n"
    if type(metadata) is not dict or type(questions) not in (tuple, list):
        return json.dumps(record.to_json(), ensure_ascii=False) + "\n"
    if questions:
        if not all(type(q) is str for q in questions):
            return json.dumps(record.to_json(), ensure_ascii=False) + "\n"
        questions_text = "[" + ", ".join(map(_quote, questions)) + "]"
    else:
        questions_text = "[]"
    metadata_text = _ENCODER.encode(metadata) if metadata else "{}"
    return (
        '{"id": '
        + id_text
        + ', "answer": '
        + _quote(record.answer)
        + ', "questions": '
        + questions_text
        + ', "metadata": '
        + metadata_text
        + "}\n"
    )


class RecordStore:
    """Answers stored as JSON lines with byte offsets; decoded only when needed.

    Parameters
    ----------
    data : bytes, mmap.mmap or CheckedBytes
        The concatenated lines (a loaded file's verified as they are read).
    offsets : numpy.ndarray
        ``n + 1`` int64 byte offsets of the lines in ``data``.

    Example
    -------
    >>> store = RecordStore.from_records([Record(id="a", answer="Yes.", questions=(), metadata={})])
    >>> len(store), store.get(0).answer, store.ids()
    (1, 'Yes.', {'a': 0})
    """

    def __init__(
        self,
        data: bytes | mmap.mmap | CheckedBytes,
        offsets: np.ndarray,
        *,
        source: Path | None = None,
        checked: bool = False,
        canonical: bool = False,
    ) -> None:
        self.data = data
        self.offsets = offsets
        self.source = source  # the file the lines came from, for errors about damaged lines
        # every line is known good: encoded from validated records, or scanned by a load
        # (qaindex.store.index_checks); a save scans only a store that is not
        self.checked = checked
        # every line is exactly what encode_record wrote (not a file read back, whose spacing
        # may differ): question_rows may search its bytes
        self.canonical = canonical
        self._ids: dict[str, int] | None = None
        self._cache: dict[int, Record] = {}

    @classmethod
    def from_lines(cls, lines: Sequence[bytes]) -> RecordStore:
        """A store of already encoded lines (each ending with a newline)."""
        offsets = np.zeros(len(lines) + 1, dtype=np.int64)
        np.cumsum([len(line) for line in lines], out=offsets[1:])
        return cls(b"".join(lines), offsets)

    @classmethod
    def from_records(cls, records: Sequence[Record]) -> RecordStore:
        """A store of these records, in order; ``checked``: records are validated when made."""
        store = cls.from_lines(encode_records(records))
        store.checked = store.canonical = True
        return store

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def raw(self, row: int) -> bytes:
        """The stored line of ``row`` (with its newline)."""
        return bytes(self.data[int(self.offsets[row]) : int(self.offsets[row + 1])])

    def content(self) -> bytes:
        """Every stored line, as written to ``records.jsonl``."""
        return bytes(self.data[: int(self.offsets[-1])])

    def buffer(self) -> bytes | mmap.mmap:
        """The stored lines' whole buffer, every byte verified (a loaded file's lines are
        verified as they are read: :class:`~qaindex.store.chunk_checks.CheckedBytes`)."""
        return self.data.verified() if isinstance(self.data, CheckedBytes) else self.data

    def write_to(self, handle: BinaryIO, block: int = 1 << 22) -> None:
        """Write :meth:`content` to a binary file in blocks (no copy of the whole store in memory)."""
        end = int(self.offsets[-1])
        view = memoryview(self.buffer())
        for start in range(0, end, block):
            handle.write(view[start : min(end, start + block)])

    def get(self, row: int) -> Record:
        """The decoded record of ``row`` (cached)."""
        cached = self._cache.get(row)
        if cached is None:
            try:
                cached = Record.from_json(parse_record(self.raw(row)))
            except ValueError as exc:  # a damaged line of a loaded index (qaindex.store.index_checks)
                raise IndexFormatError(
                    f"{self.source or 'records.jsonl'}: line {row + 1}: {exc}; the index is corrupted, rebuild it"
                ) from None
            if len(self._cache) >= _RECORD_CACHE:
                self._cache.clear()
            self._cache[row] = cached
        return cached

    def question_rows(self) -> np.ndarray:
        """The rows whose record may hold stored questions, ascending: every row, or, in a
        store of lines qaindex encoded (``canonical``), the rows whose line holds a non-empty
        ``"questions"`` list, found by one search of the bytes (a metadata key of that name
        counts too; decoding the row tells). A corpus without questions costs no decoding.

        Example
        -------
        >>> store = RecordStore.from_records([Record(id=1, answer="A."), Record(id=2, answer="B.", questions=("Q?",))])
        >>> store.question_rows().tolist()
        [1]
        """
        if not self.canonical or not fast_path_switch.enabled():
            return np.arange(len(self), dtype=np.int64)
        view = memoryview(self.buffer())[: int(self.offsets[-1])]
        starts = np.fromiter((m.start() for m in _NON_EMPTY_QUESTIONS.finditer(view)), dtype=np.int64)
        return np.unique(np.searchsorted(self.offsets, starts, side="right") - 1)

    def ids(self) -> dict[str, int]:
        """``{str(id): row}`` for every record (for a loaded store, found by the load's scan of
        every line: :func:`~qaindex.store.index_checks.check_records`)."""
        if self._ids is None and self.source is not None and not self.checked:
            self._ids = check_records(self.source, self.data, self.offsets)
            self.checked = True
        if self._ids is None:
            ids: dict[str, int] = {}
            for row in range(len(self)):
                key = str(self.get(row).id)
                if key in ids:
                    raise IndexFormatError(
                        f"{self.source or 'records.jsonl'}: id {json.dumps(self.get(row).id)} is on lines "
                        f"{ids[key] + 1} and {row + 1}; ids must be unique; the index is corrupted, rebuild it"
                    )
                ids[key] = row
            self._ids = ids
        return self._ids

    def append(self, records: Sequence[Record]) -> RecordStore:
        """A new store: these rows followed by ``records``."""
        extra = RecordStore.from_records(records)
        offsets = np.concatenate([self.offsets, extra.offsets[1:] + self.offsets[-1]])
        return RecordStore(self.content() + extra.content(), offsets, checked=self.checked, canonical=self.canonical)

    def keep(self, rows: np.ndarray) -> RecordStore:
        """A new store of the given rows, in that order."""
        store = RecordStore.from_lines([self.raw(int(r)) for r in rows])
        store.checked, store.canonical = self.checked, self.canonical
        return store
