"""What ``qaindex info`` and :meth:`qaindex.Ranker.info` show of an index, read from its
:class:`~qaindex.search.state.IndexState`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..devices import devices_info

if TYPE_CHECKING:
    from ..search.state import IndexState

__all__ = ["index_info"]


def index_info(state: IndexState) -> dict[str, Any]:
    """Model, counts, index kind, devices actually used, hybrid and key indexes, calibration.

    Example
    -------
    >>> index_info(ranker.state())["answers"] == len(ranker)
    True
    """
    m = state.model.manifest
    coarse = state.coarse
    return {
        "path": str(state.path) if state.path else None,
        "answers": len(state),
        "dimension": state.model.dimension,
        "geometry": state.model.geometry,
        "index": {**coarse.describe(), "overfetch": state.overfetch},
        "model": {
            "name": state.model.name,
            "kind": m["kind"],
            "parameters": m.get("parameters", {}),
            "metrics": m.get("metrics", {}),
        },
        "devices": devices_info(state.model, coarse.device, coarse.kind),
        "reranker": None if state.reranker is None else {"name": state.reranker.name, **state.reranker.providers},
        "hybrid": None if state.lexical is None else state.lexical.describe(),
        "keys": None if state.keys is None else state.keys.entry(),
        "calibration": state.calibration.describe(),
        "created": state.created,
        "near_centre": state.model.space.near_centre(state.vectors),
    }
