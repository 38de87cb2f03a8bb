"""Adding, replacing, finding and removing answers by id: what :meth:`qaindex.Ranker.add`,
:meth:`~qaindex.Ranker.upsert` and :meth:`~qaindex.Ranker.remove` do.

Each changes nothing until its checks pass (ids new for ``add``; present for ``remove``, with
at least one answer left; every record with an id for ``upsert``) and the new answers are
encoded: a failure leaves the Ranker as it was. Each reads the Ranker's index state
(:class:`~qaindex.search.state.IndexState`) and returns an :class:`Update`, the new state the
Ranker adopts; only the coarse index is extended in place (under the Ranker's write lock).

Example
-------
>>> from qaindex.corpus import records_from_dicts
>>> store = RecordStore.from_records(records_from_dicts([{"id": "a", "answer": "x"}, {"id": "b", "answer": "y"}]))
>>> [r.id for r in new_records([{"id": "c", "answer": "z"}], store)]
['c']
>>> rows_kept(store, ["a"]).tolist()
[1]
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..checks import id_list, path_or_records
from ..corpus import Record, read_corpus, read_json_lines, records_from_dicts
from ..errors import CorpusError, QueryError
from ..search.fusion import with_dense_ratio
from ..store.records import RecordStore
from .encoding import appended_keys, encode_answers

if TYPE_CHECKING:
    from ..search.state import IndexState
    from ..text.lexical import LexicalIndex

__all__ = ["Update", "add", "new_records", "remove", "row_of", "rows_kept", "upsert", "upsert_plan"]

Records = str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record]
_log = logging.getLogger("qaindex")


def row_of(store: RecordStore, id: Any) -> int:
    """The row of the answer with this id (a :class:`QueryError` for a missing or bad id)."""
    if isinstance(id, bool) or not isinstance(id, str | int | np.integer):
        raise QueryError(f"id must be a str or int, got {type(id).__name__} {id!r}")
    if isinstance(id, np.integer):
        id = int(id)
    row = store.ids().get(str(id))
    if row is None:
        raise QueryError(f"no answer with id {json.dumps(id)} in the index")
    return row


def new_records(records: Records, store: RecordStore) -> list[Record]:
    """The records to add (a corpus file or records), validated, their ids new to ``store``."""
    existing = list(store.ids())
    if path_or_records(records, "records"):
        return read_corpus(records, existing_ids=existing)  # type: ignore[arg-type]
    return records_from_dicts(records, existing_ids=existing)  # type: ignore[arg-type]


def rows_kept(store: RecordStore, ids: Iterable[str | int]) -> np.ndarray:
    """The rows left after removing ``ids`` (each must exist; one answer at least must stay)."""
    wanted = id_list(ids, "ids")
    index = store.ids()
    missing = [i for i in wanted if str(i) not in index]
    if missing:
        shown = ", ".join(json.dumps(i) for i in missing[:5]) + (" …" if len(missing) > 5 else "")
        raise QueryError(f"no answer with id {shown} in the index; nothing was removed")
    drop = {index[str(i)] for i in wanted}
    if len(drop) == len(store):
        raise QueryError("removing every answer would leave an empty index; build a new one instead")
    return np.array([r for r in range(len(store)) if r not in drop], dtype=np.int64)


def upsert_plan(records: Records, store: RecordStore) -> tuple[list[Record], np.ndarray]:
    """The records an upsert writes (validated, every one with an id) and the rows of ``store``
    it keeps: those whose id no record names (an id matches as in ``add``'s check: ``7`` and
    ``"7"`` are one id).

    Raises
    ------
    CorpusError
        A record without an id (it could replace nothing: ``add`` it), or any corpus error.

    Example
    -------
    >>> from qaindex.corpus import records_from_dicts
    >>> store = RecordStore.from_records(records_from_dicts([{"id": "a", "answer": "x"}, {"id": "b", "answer": "y"}]))
    >>> new, keep = upsert_plan([{"id": "b", "answer": "y2"}, {"id": "c", "answer": "z"}], store)
    >>> [r.id for r in new], keep.tolist()
    (['b', 'c'], [0])
    """
    hint = 'upsert replaces answers by id; give this answer an "id", or add it with `add`'
    if path_or_records(records, "records"):
        for line, obj in read_json_lines(records):  # type: ignore[arg-type]
            if isinstance(obj, dict) and "id" not in obj and "aid" not in obj:
                raise CorpusError(f"{os.fspath(records)}:{line}: {hint}")  # type: ignore[arg-type]
        new = read_corpus(records)  # type: ignore[arg-type]
    else:
        if isinstance(records, Iterable) and not isinstance(records, str | bytes | bytearray | Mapping):
            records = list(records)
            for position, item in enumerate(records, start=1):
                if isinstance(item, Mapping) and "id" not in item and "aid" not in item:
                    raise CorpusError(f"records[{position}]: {hint}")
        new = records_from_dicts(records)  # type: ignore[arg-type]
    index = store.ids()
    replaced = {index[str(r.id)] for r in new if str(r.id) in index}
    return new, np.array([r for r in range(len(store)) if r not in replaced], dtype=np.int64)


class Update(NamedTuple):
    """What an update leaves: the index state for the Ranker to adopt, how many answers it
    wrote or removed (``changed``), and whether the coarse index must be rebuilt before the next search."""

    state: IndexState
    changed: int
    coarse_stale: bool


def add(state: IndexState, records: Records, batch_size: int, coarse_stale: bool) -> Update:
    """:meth:`qaindex.Ranker.add`: validate, encode, then append (see there)."""
    new = new_records(records, state.records)
    vectors = encode_answers(state.model, [r.answer for r in new], batch_size, False)
    after = _append(state, new, vectors, batch_size)
    if not coarse_stale:
        state.coarse.add(vectors)
    _log.info("added %d answers; %d in all", len(new), len(after))
    return Update(after, len(new), coarse_stale)


def remove(state: IndexState, ids: Iterable[str | int]) -> Update:
    """:meth:`qaindex.Ranker.remove` (see there)."""
    keep = rows_kept(state.records, ids)
    after = _keep(state, keep)
    _log.info("removed %d answers; %d left", len(state) - len(keep), len(after))
    return Update(after, len(state) - len(keep), True)


def upsert(state: IndexState, records: Records, batch_size: int, coarse_stale: bool) -> Update:
    """:meth:`qaindex.Ranker.upsert`: validate and encode, then append the records and drop the
    answers they replace (appended first, so that the index is never empty on the way)."""
    new, keep = upsert_plan(records, state.records)
    if not new:
        return Update(state, 0, coarse_stale)
    vectors = encode_answers(state.model, [r.answer for r in new], batch_size, False)
    before = len(state)
    after = _append(state, new, vectors, batch_size)
    if not coarse_stale:
        state.coarse.add(vectors)
    if len(keep) < before:
        after = _keep(after, np.concatenate([keep, np.arange(before, before + len(new), dtype=np.int64)]))
        coarse_stale = True
    _log.info("upserted %d answers (%d replaced); %d in all", len(new), before - len(keep), len(after))
    return Update(after, len(new), coarse_stale)


def _measured(state: IndexState, lexical: LexicalIndex, previous: Any) -> LexicalIndex:
    """``lexical`` with adaptive fusion's ratio, measured on ``state``'s answers (kept while
    the number of answers stays near the one it was measured on)."""
    return with_dense_ratio(state.model, state.vectors, lexical, lambda row: state.records.get(row).answer, previous)


def _append(state: IndexState, new: list[Record], vectors: np.ndarray, batch_size: int) -> IndexState:
    lexical = None if state.lexical is None else state.lexical.appended([r.answer for r in new])
    # the new records' stored questions (qaindex.key_index), encoded before anything changes
    keys = appended_keys(state.keys, state.model, new, len(state), batch_size)
    grown = replace(
        state,
        records=state.records.append(new),
        vectors=np.concatenate([np.asarray(state.vectors), vectors]),
        keys=keys,
    )
    if lexical is None:
        return grown
    return replace(grown, lexical=_measured(grown, lexical, state.lexical.ratio_info if state.lexical else None))


def _keep(state: IndexState, keep: np.ndarray) -> IndexState:
    kept = replace(
        state,
        records=state.records.keep(keep),
        vectors=np.ascontiguousarray(np.asarray(state.vectors)[keep]),
        keys=state.keys and state.keys.kept(keep),  # the kept records' stored questions, renumbered
    )
    if state.lexical is None:
        return kept
    return replace(kept, lexical=_measured(kept, state.lexical.kept(keep), state.lexical.ratio_info))
