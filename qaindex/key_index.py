"""Search keys beside the answers: each record's stored questions and passages, each mapping to its record.

A record's ``question``/``questions`` (:class:`~qaindex.Record`) are indexed as *keys*: one
vector each (encoded on the model's **answer** side, so that a key is scored against a
question by the same scorer, geometry and calibration as an answer is) and, in a hybrid
index, one BM25 row each. A search scores answers and keys and returns each record once, by
its best key (:mod:`qaindex.search.keys`).

An index built with passages (``passage_words`` W > 0) also keys every answer longer than W
words by its overlapping windows of W words (a step of W // 2, the last window ending at the
answer's end): a model that cuts its answers reads the rest through them, and a question
about one paragraph of a long answer meets that paragraph rather than the whole answer's
average. A passage key has an empty BM25 row (BM25 reads the whole answer already).

Stored in a snapshot as::

    keys/
      vectors.npy      float32 (K, dim): one vector per key
      owners.npy       int64 (K,): the record row of each key, non-decreasing
      kinds.npy        int8 (K,): 1 stored question, 2 passage (indexes with passages only)
      lexical/         the keys' BM25 index (hybrid indexes only; qaindex.text.lexical)

and named by the index manifest's optional ``keys`` field (``{"count", "directory": "keys",
"kind": "question", "side": "answer", "lexical"}``, with ``"kind": "question+passage"`` and
``"passages": {"words": W, "step": W // 2}`` for an index with passages); an index without it
has no keys.

Example
-------
>>> import numpy as np
>>> keys = KeyIndex(np.zeros((3, 2), np.float32), np.array([0, 0, 2]), None)
>>> keys.kept(np.array([0, 2])).owners.tolist()
[0, 0, 1]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import IndexFormatError, QueryError
from .text.lexical import LexicalBuilder, LexicalIndex

__all__ = [
    "DIRECTORY",
    "KEY_SIDE",
    "PASSAGE",
    "PASSAGE_WORDS",
    "QUESTION",
    "KeyIndex",
    "auto_passage_words",
    "build_keys",
    "check_entry",
    "choose_passage_words",
    "key_entries",
    "load_keys",
    "passages",
]

_log = logging.getLogger(__name__)

DIRECTORY = "keys"
#: the encoder role stored questions are encoded with (see the module docstring)
KEY_SIDE = "answer"
#: key kinds, by their code in ``kinds.npy`` (``Hit.matched``: qaindex.search.hits.MATCHED)
QUESTION, PASSAGE = 1, 2
#: words per passage key when a build chooses (``passage_words="auto"``) for a model that cuts its answers
PASSAGE_WORDS = 64
MIN_PASSAGE_WORDS = 8
#: the most passage keys ``"auto"`` makes: every key is scored exactly at search time, so beyond
#: it a build keys none unless asked for a number of words
AUTO_PASSAGE_LIMIT = 200_000
_ENCODE_CHUNK = 4096  # keys per encoder call of a build


@dataclass(frozen=True)
class KeyIndex:
    """The stored-question keys of an index: vectors, owning record rows, BM25 rows.

    Attributes
    ----------
    vectors : array (K, dimension), float32
    owners : int64 array (K,)
        The record row each key maps to (non-decreasing: keys follow their records).
    lexical : LexicalIndex or None
        The keys' BM25 index (row ``i`` is key ``i``), for hybrid search.
    """

    vectors: np.ndarray
    owners: np.ndarray
    lexical: LexicalIndex | None
    #: each key's kind (:data:`QUESTION` or :data:`PASSAGE`), int8 (K,); None: every key a stored question
    kinds: np.ndarray | None = None
    #: words per passage key (0: the index keys no passages)
    passage_words: int = 0

    def __len__(self) -> int:
        return len(self.owners)

    def kind_codes(self, numbers: np.ndarray | None = None) -> np.ndarray:
        """The kind codes (int8) of keys ``numbers``; None: of every key."""
        if self.kinds is None:
            return np.full(len(self) if numbers is None else np.shape(numbers), QUESTION, np.int8)
        codes: np.ndarray = np.asarray(self.kinds, np.int8)
        return codes if numbers is None else codes[numbers]

    def kept(self, rows: np.ndarray) -> KeyIndex:
        """The keys of the kept record ``rows`` (sorted), their owners renumbered to the new rows."""
        rows = np.asarray(rows, dtype=np.int64)
        new_row = np.full(int(self.owners.max(initial=-1)) + 1, -1, np.int64)
        inside = rows[rows < len(new_row)]
        new_row[inside] = np.searchsorted(rows, inside)
        take = np.flatnonzero(new_row[self.owners] >= 0) if len(self.owners) else np.zeros(0, np.int64)
        lexical = None if self.lexical is None else self.lexical.kept(take)
        vectors = np.ascontiguousarray(np.asarray(self.vectors)[take], dtype=np.float32)
        kinds = None if self.kinds is None else np.asarray(self.kinds, np.int8)[take]
        return KeyIndex(vectors, new_row[self.owners[take]], lexical, kinds, self.passage_words)

    def appended(self, added: KeyIndex, texts: Sequence[str]) -> KeyIndex:
        """These keys followed by the ``added`` ones (their ``texts``, as :func:`key_entries`
        gives them, feed the BM25 rows when there are any)."""
        lexical = None if self.lexical is None else self.lexical.appended(list(texts))
        kinds = None
        if self.kinds is not None or added.kinds is not None:
            kinds = np.concatenate([self.kind_codes(), added.kind_codes()])
        return KeyIndex(
            np.ascontiguousarray(np.concatenate([np.asarray(self.vectors), added.vectors]), dtype=np.float32),
            np.concatenate([self.owners, np.asarray(added.owners, np.int64)]),
            lexical,
            kinds,
            self.passage_words,
        )

    def with_lexical(self, records: Any) -> KeyIndex:
        """These keys with a BM25 index of their texts (:func:`key_entries` of ``records``)."""
        texts = [_lexical_text(text, kind) for _, text, kind in key_entries(records, self.passage_words)]
        return KeyIndex(self.vectors, self.owners, LexicalIndex.from_texts(texts), self.kinds, self.passage_words)

    def entry(self) -> dict[str, Any]:
        """The index manifest's ``keys`` field."""
        entry: dict[str, Any] = {
            "count": len(self),
            "directory": DIRECTORY,
            "kind": "question+passage" if self.passage_words else "question",
            "side": KEY_SIDE,
            "lexical": self.lexical is not None,
        }
        if self.passage_words:
            entry["passages"] = {"words": self.passage_words, "step": self.passage_words // 2}
        return entry

    def describe(self) -> dict[str, Any]:
        """:meth:`entry` with the number of keys of each kind (``Ranker.info()["keys"]``)."""
        passage_keys = int((self.kind_codes() == PASSAGE).sum())
        return {**self.entry(), "stored_questions": len(self) - passage_keys, "passage_keys": passage_keys}

    def save(self, directory: Path) -> None:
        """Write the key files into ``directory`` (a new snapshot's ``keys/``)."""
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / "vectors.npy", np.ascontiguousarray(self.vectors, dtype=np.float32), allow_pickle=False)
        np.save(directory / "owners.npy", np.asarray(self.owners, dtype=np.int64), allow_pickle=False)
        if self.passage_words:
            np.save(directory / "kinds.npy", self.kind_codes(), allow_pickle=False)
        if self.lexical is not None:
            self.lexical.save(directory / "lexical")


def choose_passage_words(value: Any, *, static_encoder: bool) -> int:
    """The words per passage key of a build's ``passage_words`` (0: no passage keys).

    ``"auto"`` keys passages of :data:`PASSAGE_WORDS` words for a model that cuts its answers
    (a fixed ``max_tokens``), none for a static encoder (which reads answers whole, and whose
    scores of short windows and whole answers are on different scales); an int is the
    number of words (at least :data:`MIN_PASSAGE_WORDS`), 0 none.

    Example
    -------
    >>> choose_passage_words("auto", static_encoder=False), choose_passage_words("auto", static_encoder=True)
    (64, 0)
    """
    if value == "auto":
        return 0 if static_encoder else PASSAGE_WORDS
    if isinstance(value, int) and not isinstance(value, bool) and (value == 0 or value >= MIN_PASSAGE_WORDS):
        return value
    raise QueryError(
        f'passage_words must be "auto", 0 (no passage keys) or a number of words of at least '
        f"{MIN_PASSAGE_WORDS}, got {value!r}"
    )


def auto_passage_words(value: Any, records: Any, *, static_encoder: bool) -> int:
    """:func:`choose_passage_words` for a build of ``records``: ``"auto"`` keys none when its
    passages would be more than :data:`AUTO_PASSAGE_LIMIT` (each costs search time), and logs why."""
    words = choose_passage_words(value, static_encoder=static_encoder)
    if value != "auto" or not words:
        return words
    count = 0
    for row in range(len(records)):
        count += len(passages(_record(records, row).answer, words))
        if count > AUTO_PASSAGE_LIMIT:
            _log.warning(
                "passages: none (passage_words='auto' would key more than %d passages of %d words, each scored "
                "at every search; pass passage_words=%d / --passage-words %d to key them anyway)",
                AUTO_PASSAGE_LIMIT,
                words,
                words,
                words,
            )
            return 0
    return words


def passages(text: str, words: int) -> list[str]:
    """The passage keys of an answer: windows of ``words`` words, a step of ``words // 2``
    apart, the last one ending at the answer's end; none for an answer of ``words`` words or
    fewer (its own vector reads it whole).

    Example
    -------
    >>> passages("a b c d e f g", 4)
    ['a b c d', 'c d e f', 'd e f g']
    >>> passages("a b c", 4)
    []
    """
    split = text.split()
    if words <= 0 or len(split) <= words:
        return []
    step = max(1, words // 2)
    starts = [*range(0, len(split) - words, step), len(split) - words]
    return [" ".join(split[s : s + words]) for s in starts]


def key_entries(records: Any, passage_words: int = 0) -> Iterator[tuple[int, str, int]]:
    """``(row, text, kind)`` of every key of ``records`` in row order: each record's stored
    questions, then (``passage_words`` > 0) its answer's :func:`passages`."""
    if not passage_words:
        for row, question in key_texts(records):
            yield row, question, QUESTION
        return
    for row in range(len(records)):
        record = _record(records, row)
        for question in record.questions:
            yield row, question, QUESTION
        for passage in passages(record.answer, passage_words):
            yield row, passage, PASSAGE


def _lexical_text(text: str, kind: int) -> str:
    """The text of a key's BM25 row: a stored question's own; a passage's is empty (BM25 reads
    the whole answer already)."""
    return text if kind == QUESTION else ""


def _record(records: Any, row: int) -> Any:
    """The record at ``row`` of a RecordStore or a list of records."""
    return records.get(row) if hasattr(records, "get") else records[row]


def key_texts(records: Any, rows: Sequence[int] | None = None) -> Iterator[tuple[int, str]]:
    """``(row, question)`` for every stored question of ``records`` (a RecordStore or list), in row order
    (of a store, only the rows that may hold questions are decoded: ``RecordStore.question_rows``)."""
    if rows is None:
        rows = records.question_rows().tolist() if hasattr(records, "question_rows") else range(len(records))
    for row in rows:
        for question in _record(records, row).questions:
            yield row, question


def build_keys(
    records: Any,
    encode: Callable[[list[str]], np.ndarray],
    dimension: int,
    *,
    lexical: bool,
    first_row: int = 0,
    passage_words: int = 0,
) -> tuple[KeyIndex, list[str]]:
    """The keys of ``records`` (:func:`key_entries`), encoded by ``encode`` in chunks.

    ``first_row`` is added to each owner (records appended after ``first_row`` others). Also
    returns the keys' BM25 texts (for a BM25 index built later).
    """
    owners: list[int] = []
    texts: list[str] = []
    kinds: list[int] = []
    for row, text, kind in key_entries(records, passage_words):
        owners.append(row + first_row)
        texts.append(text)
        kinds.append(kind)
    parts = [encode(texts[s : s + _ENCODE_CHUNK]) for s in range(0, len(texts), _ENCODE_CHUNK)]
    vectors = np.concatenate(parts) if parts else np.zeros((0, dimension), np.float32)
    lexical_texts = [_lexical_text(text, kind) for text, kind in zip(texts, kinds, strict=True)]
    index = None
    if lexical:
        builder = LexicalBuilder()
        builder.add(lexical_texts)
        index = builder.finish()
    codes = np.asarray(kinds, np.int8) if passage_words else None
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    return KeyIndex(vectors, np.asarray(owners, np.int64), index, codes, passage_words), lexical_texts


def passage_setting(entry: Any) -> int | None:
    """The words per passage key an index manifest's ``keys`` field names (0: none); None
    where its ``kind`` and ``passages`` do not agree."""
    if not isinstance(entry, dict):
        return None
    kind, setting = entry.get("kind"), entry.get("passages")
    if kind == "question" and setting is None:
        return 0
    words = setting.get("words") if isinstance(setting, dict) else None
    if kind != "question+passage" or not isinstance(words, int) or isinstance(words, bool):
        return None
    return words if words >= MIN_PASSAGE_WORDS and setting == {"words": words, "step": words // 2} else None


def check_entry(entry: Any, files: Mapping[str, Any], mpath: Path) -> int:
    """Validate the index manifest's ``keys`` field; returns the key count."""
    needed = [f"{DIRECTORY}/vectors.npy", f"{DIRECTORY}/owners.npy"]
    words = passage_setting(entry)
    if words:
        needed.append(f"{DIRECTORY}/kinds.npy")
    ok = isinstance(entry, dict) and entry.get("directory") == DIRECTORY and entry.get("side") == KEY_SIDE
    count = entry.get("count") if isinstance(entry, dict) else None
    ok = ok and words is not None and isinstance(count, int) and not isinstance(count, bool) and count >= 0
    ok = ok and isinstance(entry.get("lexical"), bool) and all(name in files for name in needed)
    if not ok:
        raise IndexFormatError(
            f'{mpath}: field "keys" must be {{"count", "directory": "keys", "kind": "question", "side": '
            f'"{KEY_SIDE}", "lexical"}} (or "kind": "question+passage" with "passages": {{"words": W >= '
            f'{MIN_PASSAGE_WORDS}, "step": W // 2}}) with {" and ".join(needed)} listed in "files", got {entry!r}; '
            "the index is corrupted, rebuild it"
        )
    return int(count)  # type: ignore[arg-type]


def load_keys(
    directory: Path, entry: dict[str, Any], count: int, records: int, dimension: int, *, listed: Collection[str]
) -> KeyIndex:
    """Read and check a snapshot's ``keys/`` (memory-mapped vectors; raises :class:`IndexFormatError`).

    ``listed``: the names in ``keys/lexical/`` the index manifest lists (:meth:`LexicalIndex.load`)."""
    words = passage_setting(entry) or 0
    try:
        vectors = np.load(directory / "vectors.npy", mmap_mode="r", allow_pickle=False)
        owners = np.load(directory / "owners.npy", allow_pickle=False)
        kinds = np.load(directory / "kinds.npy", allow_pickle=False) if words else None
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{directory}: cannot read the stored keys ({exc}); rebuild the index") from None
    if (
        vectors.dtype != np.float32
        or vectors.shape != (count, dimension)
        or owners.shape != (count,)
        or not np.issubdtype(owners.dtype, np.integer)
        or (count and (owners.min() < 0 or owners.max() >= records or (np.diff(owners) < 0).any()))
        or (
            kinds is not None
            and (kinds.dtype != np.int8 or kinds.shape != (count,) or not np.isin(kinds, (QUESTION, PASSAGE)).all())
        )
    ):
        raise IndexFormatError(
            f"{directory}: the stored keys do not match the manifest ({count} float32 vectors of dimension "
            f"{dimension}, owners non-decreasing rows below {records}{', int8 kinds 1 or 2' if words else ''}); "
            "the index is corrupted, rebuild it"
        )
    lexical = LexicalIndex.load(directory / "lexical", count, listed=listed) if entry["lexical"] else None
    return KeyIndex(vectors, owners.astype(np.int64), lexical, kinds, words)
