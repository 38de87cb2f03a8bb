"""Search keys beside the answers: each record's stored questions, each mapping to its record.

A record's ``question``/``questions`` (:class:`~qaindex.Record`) are indexed as *keys*: one
vector each (encoded on the model's **answer** side, so that a key is scored against a
question by the same scorer, geometry and calibration as an answer is) and, in a hybrid
index, one BM25 row each. A search scores answers and keys and returns each record once, by
its best key (:mod:`qaindex.search.keys`).

Stored in a snapshot as::

    keys/
      vectors.npy      float32 (K, dim): one vector per stored question
      owners.npy       int64 (K,): the record row of each key, non-decreasing
      lexical/         the keys' BM25 index (hybrid indexes only; qaindex.text.lexical)

and named by the index manifest's optional ``keys`` field (``{"count", "directory": "keys",
"kind": "question", "side": "answer", "lexical"}``); an index without it has no keys.

Example
-------
>>> import numpy as np
>>> keys = KeyIndex(np.zeros((3, 2), np.float32), np.array([0, 0, 2]), None)
>>> keys.kept(np.array([0, 2])).owners.tolist()
[0, 0, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import IndexFormatError
from .text.lexical import LexicalBuilder, LexicalIndex

__all__ = ["DIRECTORY", "KEY_SIDE", "KeyIndex", "build_keys", "check_entry", "load_keys"]

DIRECTORY = "keys"
#: the encoder role stored questions are encoded with (see the module docstring)
KEY_SIDE = "answer"
_ENCODE_CHUNK = 4096  # stored questions per encoder call of a build


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

    def __len__(self) -> int:
        return len(self.owners)

    def kept(self, rows: np.ndarray) -> KeyIndex:
        """The keys of the kept record ``rows`` (sorted), their owners renumbered to the new rows."""
        rows = np.asarray(rows, dtype=np.int64)
        new_row = np.full(int(self.owners.max(initial=-1)) + 1, -1, np.int64)
        inside = rows[rows < len(new_row)]
        new_row[inside] = np.searchsorted(rows, inside)
        take = np.flatnonzero(new_row[self.owners] >= 0) if len(self.owners) else np.zeros(0, np.int64)
        lexical = None if self.lexical is None else self.lexical.kept(take)
        vectors = np.ascontiguousarray(np.asarray(self.vectors)[take], dtype=np.float32)
        return KeyIndex(vectors, new_row[self.owners[take]], lexical)

    def appended(self, vectors: np.ndarray, owners: np.ndarray, texts: Sequence[str]) -> KeyIndex:
        """These keys followed by new ones (``texts`` feed the BM25 rows when there are any)."""
        lexical = None if self.lexical is None else self.lexical.appended(list(texts))
        return KeyIndex(
            np.ascontiguousarray(np.concatenate([np.asarray(self.vectors), vectors]), dtype=np.float32),
            np.concatenate([self.owners, np.asarray(owners, np.int64)]),
            lexical,
        )

    def with_lexical(self, records: Any) -> KeyIndex:
        """These keys with a BM25 index of their texts, the stored questions of ``records``."""
        return KeyIndex(self.vectors, self.owners, LexicalIndex.from_texts([text for _, text in key_texts(records)]))

    def entry(self) -> dict[str, Any]:
        """The index manifest's ``keys`` field."""
        return {
            "count": len(self),
            "directory": DIRECTORY,
            "kind": "question",
            "side": KEY_SIDE,
            "lexical": self.lexical is not None,
        }

    def save(self, directory: Path) -> None:
        """Write the key files into ``directory`` (a new snapshot's ``keys/``)."""
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / "vectors.npy", np.ascontiguousarray(self.vectors, dtype=np.float32), allow_pickle=False)
        np.save(directory / "owners.npy", np.asarray(self.owners, dtype=np.int64), allow_pickle=False)
        if self.lexical is not None:
            self.lexical.save(directory / "lexical")


def key_texts(records: Any, rows: Sequence[int] | None = None) -> Iterator[tuple[int, str]]:
    """``(row, question)`` for every stored question of ``records`` (a RecordStore or list), in row order
    (of a store, only the rows that may hold questions are decoded: ``RecordStore.question_rows``)."""
    if rows is None:
        rows = records.question_rows().tolist() if hasattr(records, "question_rows") else range(len(records))
    for row in rows:
        for question in records.get(row).questions if hasattr(records, "get") else records[row].questions:
            yield row, question


def build_keys(
    records: Any,
    encode: Callable[[list[str]], np.ndarray],
    dimension: int,
    *,
    lexical: bool,
    first_row: int = 0,
) -> tuple[KeyIndex, list[str]]:
    """The keys of every stored question of ``records``, encoded by ``encode`` in chunks.

    ``first_row`` is added to each owner (records appended after ``first_row`` others). Also
    returns the key texts (for a BM25 index built later).
    """
    owners: list[int] = []
    texts: list[str] = []
    for row, question in key_texts(records):
        owners.append(row + first_row)
        texts.append(question)
    parts = [encode(texts[s : s + _ENCODE_CHUNK]) for s in range(0, len(texts), _ENCODE_CHUNK)]
    vectors = np.concatenate(parts) if parts else np.zeros((0, dimension), np.float32)
    keys = KeyIndex(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(owners, np.int64), None)
    if lexical:
        builder = LexicalBuilder()
        builder.add(texts)
        keys = KeyIndex(keys.vectors, keys.owners, builder.finish())
    return keys, texts


def check_entry(entry: Any, files: Mapping[str, Any], mpath: Path) -> int:
    """Validate the index manifest's ``keys`` field; returns the key count."""
    needed = [f"{DIRECTORY}/vectors.npy", f"{DIRECTORY}/owners.npy"]
    ok = isinstance(entry, dict) and entry.get("directory") == DIRECTORY and entry.get("side") == KEY_SIDE
    count = entry.get("count") if isinstance(entry, dict) else None
    ok = ok and isinstance(count, int) and not isinstance(count, bool) and count >= 0
    ok = ok and isinstance(entry.get("lexical"), bool) and all(name in files for name in needed)
    if not ok:
        raise IndexFormatError(
            f'{mpath}: field "keys" must be {{"count", "directory": "keys", "kind": "question", "side": '
            f'"{KEY_SIDE}", "lexical"}} with {" and ".join(needed)} listed in "files", got {entry!r}; '
            "the index is corrupted, rebuild it"
        )
    return int(count)  # type: ignore[arg-type]


def load_keys(
    directory: Path, entry: dict[str, Any], count: int, records: int, dimension: int, *, listed: Collection[str]
) -> KeyIndex:
    """Read and check a snapshot's ``keys/`` (memory-mapped vectors; raises :class:`IndexFormatError`).

    ``listed``: the names in ``keys/lexical/`` the index manifest lists (:meth:`LexicalIndex.load`)."""
    try:
        vectors = np.load(directory / "vectors.npy", mmap_mode="r", allow_pickle=False)
        owners = np.load(directory / "owners.npy", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise IndexFormatError(f"{directory}: cannot read the stored keys ({exc}); rebuild the index") from None
    if (
        vectors.dtype != np.float32
        or vectors.shape != (count, dimension)
        or owners.shape != (count,)
        or not np.issubdtype(owners.dtype, np.integer)
        or (count and (owners.min() < 0 or owners.max() >= records or (np.diff(owners) < 0).any()))
    ):
        raise IndexFormatError(
            f"{directory}: the stored keys do not match the manifest ({count} float32 vectors of dimension "
            f"{dimension}, owners non-decreasing rows below {records}); the index is corrupted, rebuild it"
        )
    lexical = LexicalIndex.load(directory / "lexical", count, listed=listed) if entry["lexical"] else None
    return KeyIndex(vectors, owners.astype(np.int64), lexical)
