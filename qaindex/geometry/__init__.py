"""Geometries of the encoders' vectors: the Poincaré ball, cosine, and bilinear scoring.

The math lives in :mod:`.hyperbolic` and :mod:`.bilinear` (pure functions shared by training
and the runtime); :mod:`.spaces` wraps each geometry in an object that gives the coarse index
its lift for FAISS, the exact distance and the screened distance. Manifests store the name;
:func:`get` returns the object.

Example
-------
>>> from qaindex import geometry
>>> geometry.NAMES
('poincare', 'cosine', 'bilinear')
>>> geometry.get("cosine").hnsw_metric
'ip'
"""

from __future__ import annotations

from ..errors import QAIndexError
from .hyperbolic import RANKINGS
from .spaces import Bilinear, Cosine, Geometry, Poincare, PoincareRelative

__all__ = ["NAMES", "RANKINGS", "Geometry", "get"]

#: The geometry names a manifest may give, in the order error messages list them.
NAMES = ("poincare", "cosine", "bilinear")

_BY_NAME: dict[str, type[Geometry]] = {"poincare": Poincare, "cosine": Cosine, "bilinear": Bilinear}


def get(name: str | Geometry, ranking: str = "distance") -> Geometry:
    """The geometry object for a manifest's ``name`` and ``ranking`` (an object is returned as is).

    Parameters
    ----------
    name : {"poincare", "cosine", "bilinear"} or Geometry
    ranking : {"distance", "relative"}
        The ranking rule; ``"relative"`` (origin-relative distance) applies to Poincaré only
        and is ignored by the others, as in model manifests.

    Raises
    ------
    QAIndexError
        For an unknown name or ranking.

    Example
    -------
    >>> get("poincare", "relative")
    <geometry poincare ranking=relative>
    """
    if isinstance(name, Geometry):
        return name
    if ranking not in RANKINGS:
        raise QAIndexError(f"unknown ranking {ranking!r}; choose one of: {', '.join(RANKINGS)}")
    if name not in _BY_NAME:
        raise QAIndexError(f"unknown geometry {name!r}")
    if name == "poincare" and ranking == "relative":
        return PoincareRelative()
    return _BY_NAME[name]()
