"""Adding, finding and removing answers by id: the records to add, the rows to keep.

:meth:`qaindex.Ranker.add` and :meth:`qaindex.Ranker.remove` change nothing until these
checks pass (ids new, resp. present, and at least one answer left).

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
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..arguments import id_list, path_or_records
from ..corpus import Record, read_corpus, records_from_dicts
from ..errors import QueryError
from ..store.records import RecordStore

__all__ = ["new_records", "row_of", "rows_kept"]


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


def new_records(
    records: str | os.PathLike[str] | Iterable[Mapping[str, Any] | Record], store: RecordStore
) -> list[Record]:
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
