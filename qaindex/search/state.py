"""The index state: what a search, ``info``, ``recall`` and an update read of a Ranker.

A :class:`~qaindex.Ranker` holds its pieces (model, records, vectors, coarse, lexical and
key indexes, reranker, settings) behind its locks. For each call it builds one
:class:`IndexState` under its lock, its coarse index brought up to date first, and hands it
down: to the query pipeline (:mod:`.pipeline`, with :mod:`.keys`, :mod:`.budget` and the
plan of :mod:`.plan`), to :mod:`.recall`, to ``info`` (:meth:`IndexState.info`) and to the
updates (:mod:`qaindex.indexing.updates`, which return a new state for the Ranker to adopt).
None of them reads the Ranker itself, so the path of a call goes down from the Ranker and
never back to it.

The state is frozen and holds references, not copies: building one costs nothing, and an
update replaces the Ranker's pieces rather than changing those of a state handed out (the
coarse index, which ``add`` extends in place, under the write lock that keeps searches out).

Example
-------
>>> state = ranker.state()
>>> len(state) == len(ranker), state.model is ranker.model
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..devices import devices_info
from ..store.chunk_checks import CheckedRows

if TYPE_CHECKING:
    from ..key_index import KeyIndex
    from ..model import Model
    from ..reranker import Reranker
    from ..store.chunk_checks import ChunkedFile
    from ..store.records import RecordStore
    from ..text.lexical import LexicalIndex
    from ..vector_index import CoarseIndex
    from .calibration import Calibration

__all__ = ["IndexState"]


@dataclass(frozen=True)
class IndexState:
    """One Ranker's index, read-only, as one call sees it.

    Attributes
    ----------
    model : Model
        The encoder and scorer (its calibration maps raw scores to probabilities).
    records : RecordStore
        The stored answers, in row order.
    vectors : numpy.ndarray (N, dimension)
        The stored answer vectors (a memory map for a loaded index).
    coarse : CoarseIndex
        The coarse (FAISS) index over ``vectors``, up to date.
    lexical : LexicalIndex or None
        The BM25 index of hybrid search; None: dense only.
    keys : KeyIndex or None
        The stored questions as search keys (:mod:`qaindex.key_index`); None: answers only.
    reranker : Reranker or None
        The reranking stage searches use by default.
    overfetch : int
        Coarse candidates per hit.
    memory_budget : int or None
        Bytes one request may use (:mod:`.budget`); None: the environment's or 1 GiB.
    path : Path or None
        The index directory it was loaded from or saved to.
    created : str
        When the index was built.
    vectors_source : Path or str
        The served ``vectors.npy`` (or a description), named by errors about damaged vectors.
    vector_checks : ChunkedFile or None
        For a search of a loaded index whose ``vectors.npy`` is not verified whole yet: its
        chunk checks (:mod:`qaindex.store.chunk_checks`), which :meth:`check_rows` applies to
        every row the search reads. None: every vector is verified (or was never on disk).
    """

    model: Model
    records: RecordStore
    vectors: np.ndarray
    coarse: CoarseIndex
    lexical: LexicalIndex | None = None
    keys: KeyIndex | None = None
    reranker: Reranker | None = None
    overfetch: int = 10
    memory_budget: int | None = None
    path: Path | None = None
    created: str = ""
    vectors_source: Path | str = "the stored vectors"
    vector_checks: ChunkedFile | None = None

    def __len__(self) -> int:
        return len(self.records)

    def check_rows(self, rows: np.ndarray) -> None:
        """Verify the rows of ``vectors`` a search is about to read (valid row numbers, any shape)."""
        if self.vector_checks is not None:
            self.vector_checks.check_rows(rows)

    def row_reader(self) -> np.ndarray | CheckedRows:
        """``vectors`` for a reader that gathers rows by fancy indexing (the ``pq`` refine): a plain
        array when they are verified, else one that verifies the rows each gather reads."""
        if self.vector_checks is None:
            return np.asarray(self.vectors)  # a plain view of the memory map: fancy indexing skips its overhead
        return CheckedRows(self.vector_checks)

    @property
    def calibration(self) -> Calibration:
        """The model's calibration (raw score → probability of relevance), applied to every hit."""
        return self.model.calibration

    def info(self) -> dict[str, Any]:
        """What ``qaindex info`` and :meth:`qaindex.Ranker.info` show: model, counts, index
        kind, devices actually used, hybrid and key indexes, calibration.

        Example
        -------
        >>> ranker.state().info()["answers"] == len(ranker)
        True
        """
        m = self.model.manifest
        coarse = self.coarse
        return {
            "path": str(self.path) if self.path else None,
            "answers": len(self),
            "dimension": self.model.dimension,
            "geometry": self.model.geometry,
            "index": {**coarse.describe(), "overfetch": self.overfetch},
            "model": {
                "name": self.model.name,
                "kind": m["kind"],
                "parameters": m.get("parameters", {}),
                "metrics": m.get("metrics", {}),
            },
            "devices": devices_info(self.model, coarse.device, coarse.kind),
            "reranker": None if self.reranker is None else {"name": self.reranker.name, **self.reranker.providers},
            "hybrid": None if self.lexical is None else self.lexical.describe(),
            "keys": None if self.keys is None else self.keys.describe(),
            "calibration": self.calibration.describe(),
            "created": self.created,
            "near_centre": self.model.space.near_centre(self.vectors),
        }
