"""What ``qaindex info`` and :meth:`qaindex.Ranker.info` show of an index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..devices import devices_info

if TYPE_CHECKING:
    from ..ranker import Ranker

__all__ = ["index_info"]


def index_info(ranker: Ranker) -> dict[str, Any]:
    """Model, counts, index kind, devices actually used, hybrid and key indexes, calibration.

    Example
    -------
    >>> index_info(ranker)["answers"] == len(ranker)
    True
    """
    m = ranker.model.manifest
    coarse = ranker._coarse
    return {
        "path": str(ranker.path) if ranker.path else None,
        "answers": len(ranker),
        "dimension": ranker.dimension,
        "geometry": ranker.model.geometry,
        "index": {**coarse.describe(), "overfetch": ranker.overfetch},
        "model": {
            "name": ranker.model.name,
            "kind": m["kind"],
            "parameters": m.get("parameters", {}),
            "metrics": m.get("metrics", {}),
        },
        "devices": devices_info(ranker.model, coarse.device, coarse.kind),
        "reranker": None if ranker.reranker is None else {"name": ranker.reranker.name, **ranker.reranker.providers},
        "hybrid": None if ranker._lexical is None else ranker._lexical.describe(),
        "keys": None if ranker._keys is None else ranker._keys.entry(),
        "calibration": ranker.model.calibration.describe(),
        "created": ranker.created,
        "near_centre": ranker.model.space.near_centre(ranker._vectors),
    }
