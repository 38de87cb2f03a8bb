"""The geometries as objects: what the coarse index and exact search need of each one.

A model's manifest names its geometry (``"poincare"``, ``"cosine"`` or ``"bilinear"``) and,
for Poincaré, its ranking rule (``"distance"`` or ``"relative"``); :func:`qaindex.geometry.get`
turns the pair into one of the objects below. Each object gives, with its formula:

- ``lift`` / ``lift_query``: the vectors FAISS stores and searches, so that the index's metric
  (inner product for ``flat``/IVF/PQ, :attr:`Geometry.hnsw_metric` for HNSW) ranks like the
  geometry;
- ``distance``: the exact ranking distance (lower is better), float64, from element
  differences: the ground truth;
- ``screened_distance``: the same from squared norms and inner products, for a fast first
  pass over large corpora that ``distance`` then re-ranks.

The math itself lives in :mod:`~qaindex.geometry.hyperbolic` and
:mod:`~qaindex.geometry.bilinear` (shared with training); these objects only route to it.

Example
-------
>>> import numpy as np
>>> from qaindex import geometry
>>> ball = geometry.get("poincare")
>>> q, a = np.zeros((1, 2)), np.array([[0.5, 0.0]])
>>> bool(np.isclose(ball.distance(q, a)[0], 2 * np.arctanh(0.5)))
True
>>> geometry.get("poincare", "relative").lifted_dimension(4, inner_product=True)
5
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from . import bilinear, hyperbolic

__all__ = ["Bilinear", "Cosine", "Geometry", "Poincare", "PoincareRelative"]


def _f32(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def _unit(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x64, axis=-1, keepdims=True)
    return _f32(x64 / np.maximum(norms, 1e-30))


class Geometry:
    """What the coarse index and exact search need of a geometry (the base: no lift).

    Attributes
    ----------
    name : str
        The manifest's name of the geometry.
    ranking : str
        The ranking rule (``"distance"``; Poincaré also ``"relative"``).
    ball : bool
        Whether vectors must lie strictly inside the unit ball.
    hnsw_metric : {"l2", "ip"}
        The metric HNSW kinds search the lifted vectors with.
    bounded : bool
        Whether the HNSW lift pads vectors to a norm fixed by the corpus (``bound``).
    saturates : bool
        Whether the float32 score saturates (ties), so that evaluation ranks by distance.
    probed : bool
        Whether loading an index probes the model's scorer with :meth:`scorer_measures`.
    """

    name: ClassVar[str] = ""
    ball: ClassVar[bool] = False
    hnsw_metric: ClassVar[str] = "l2"
    bounded: ClassVar[bool] = False
    saturates: ClassVar[bool] = False
    probed: ClassVar[bool] = False

    def __init__(self) -> None:
        self.ranking = "distance"

    def __repr__(self) -> str:
        return f"<geometry {self.name} ranking={self.ranking}>"

    def lifted_dimension(self, dim: int, *, inner_product: bool) -> int:
        """Dimension of the lifted vectors for ``dim``-dimensional ones."""
        return dim

    def lift(self, vectors: np.ndarray, *, inner_product: bool, bound: float | None = None) -> np.ndarray:
        """The stored (database) side: float32 ``(n, lifted_dimension)``."""
        return _f32(vectors)

    def lift_query(self, queries: np.ndarray, *, inner_product: bool) -> np.ndarray:
        """The searched (query) side matching :meth:`lift`, float32."""
        return _f32(queries)

    def lift_scores(self, lifted_query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """Inner products of one lifted query with the inner-product lift of ``vectors`` (rows)."""
        lifted = self.lift(vectors, inner_product=True)
        # einsum's loops, not BLAS's threads (their wake-ups cost milliseconds on a busy machine)
        out: np.ndarray = np.einsum("ij,j->i", lifted, lifted_query[: lifted.shape[1]])
        return out

    def distance(self, q: np.ndarray, a: np.ndarray) -> np.ndarray:
        """The exact ranking distance (lower is better) over the last axis, broadcasting."""
        raise NotImplementedError

    def screened_distance(self, q_sq: np.ndarray, a_sq: np.ndarray, dot: np.ndarray) -> np.ndarray:
        """:meth:`distance` of every pair from ``|q|²`` (n,), ``|a|²`` (m,) and ``⟨q, a⟩`` (n, m)."""
        raise NotImplementedError

    def scorer_measures(self, distance: float) -> bool:
        """Whether a scorer's distance between ``0.1 e1`` and ``0.2 e1`` fits this geometry."""
        return True

    def near_centre(self, vectors: np.ndarray) -> dict[str, Any] | None:
        """Answers near the ball's centre and whether they can be hubs (``info``); None off the ball."""
        return None


class Poincare(Geometry):
    """The Poincaré ball, ranked by distance (geoopt's ``PoincareBall`` with ``c = 1``).

    ``d(x, y) = arcosh(1 + 2 |x − y|² / ((1 − |x|²)(1 − |y|²)))``

    FAISS: inner-product kinds search the lift ``(−α, −α|y|², 2αy)``, ``α = 1/(1 − |y|²)``,
    against ``(|x|², 1, x)`` (:func:`~qaindex.geometry.hyperbolic.lift`), which ranks exactly
    by distance; HNSW searches L2 on the raw coordinates (a recall heuristic).
    """

    name = "poincare"
    ball = True
    probed = True

    def lifted_dimension(self, dim: int, *, inner_product: bool) -> int:
        return dim + 2 if inner_product else dim

    def lift(self, vectors: np.ndarray, *, inner_product: bool, bound: float | None = None) -> np.ndarray:
        if inner_product:
            lifted: np.ndarray = hyperbolic.lift(vectors)
            return lifted
        return _f32(vectors)

    def lift_query(self, queries: np.ndarray, *, inner_product: bool) -> np.ndarray:
        if inner_product:
            lifted: np.ndarray = hyperbolic.lift_query(queries)
            return lifted
        return _f32(queries)

    def distance(self, q: np.ndarray, a: np.ndarray) -> np.ndarray:
        out: np.ndarray = hyperbolic.distance(q, a)
        return out

    def screened_distance(self, q_sq: np.ndarray, a_sq: np.ndarray, dot: np.ndarray) -> np.ndarray:
        out: np.ndarray = hyperbolic.distance_from_gram(q_sq[:, None], a_sq[None, :], dot)
        return out

    def scorer_measures(self, distance: float) -> bool:
        return bool(np.isfinite(distance) and distance > 1e-3)

    def near_centre(self, vectors: np.ndarray) -> dict[str, Any] | None:
        # :func:`~qaindex.geometry.hyperbolic.near_centre`; hubs only under plain-distance ranking
        report = hyperbolic.near_centre(vectors)
        return {**report, "ranking": self.ranking, "hub_risk": self.ranking == "distance"}


class PoincareRelative(Poincare):
    """The Poincaré ball, ranked by the origin-relative distance ``f(x, y) = d(x, y) − d(0, y)``.

    ``e^f`` is an inner product of the lifts :func:`~qaindex.geometry.hyperbolic.relative_lift`
    and :func:`~qaindex.geometry.hyperbolic.relative_lift_query` (one extra coordinate); HNSW
    searches L2 after a second extra coordinate pads every stored lift to the squared norm
    ``RELATIVE_LIFT_BOUND``, so L2 order is inner-product order.
    """

    def __init__(self) -> None:
        self.ranking = "relative"

    def lifted_dimension(self, dim: int, *, inner_product: bool) -> int:
        return dim + (1 if inner_product else 2)

    def lift(self, vectors: np.ndarray, *, inner_product: bool, bound: float | None = None) -> np.ndarray:
        rel: np.ndarray = hyperbolic.relative_lift(vectors)
        if inner_product:
            return rel
        sq = np.sum(rel.astype(np.float64) ** 2, axis=1, keepdims=True)
        extra = np.sqrt(np.maximum(hyperbolic.RELATIVE_LIFT_BOUND - sq, 0.0))
        return _f32(np.concatenate([rel, extra], axis=1))

    def lift_query(self, queries: np.ndarray, *, inner_product: bool) -> np.ndarray:
        rel: np.ndarray = hyperbolic.relative_lift_query(queries)
        if inner_product:
            return rel
        return np.ascontiguousarray(np.concatenate([rel, np.zeros_like(rel[:, :1])], axis=1))

    def lift_scores(self, lifted_query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        # the lift's inner product without building the lifted rows
        out: np.ndarray = hyperbolic.relative_lift_scores(lifted_query[: vectors.shape[1] + 1], vectors)
        return out

    def distance(self, q: np.ndarray, a: np.ndarray) -> np.ndarray:
        out: np.ndarray = hyperbolic.relative_distance(q, a)
        return out

    def screened_distance(self, q_sq: np.ndarray, a_sq: np.ndarray, dot: np.ndarray) -> np.ndarray:
        zero = np.zeros_like(a_sq)
        origin: np.ndarray = hyperbolic.distance_from_gram(zero, a_sq, zero)  # d(0, a)
        out: np.ndarray = super().screened_distance(q_sq, a_sq, dot) - origin[None, :]
        return out


class Cosine(Geometry):
    """Cosine geometry, ranked by ``1 − cos(x, y)``, ``cos(x, y) = ⟨x, y⟩ / (|x| |y|)``.

    FAISS searches the inner product of unit-normalised vectors (every kind).
    """

    name = "cosine"
    hnsw_metric = "ip"
    probed = True

    def lift(self, vectors: np.ndarray, *, inner_product: bool, bound: float | None = None) -> np.ndarray:
        return _unit(vectors)

    def lift_query(self, queries: np.ndarray, *, inner_product: bool) -> np.ndarray:
        return _unit(queries)

    def distance(self, q: np.ndarray, a: np.ndarray) -> np.ndarray:
        out: np.ndarray = 1.0 - hyperbolic.cosine_similarity(q, a)
        return out

    def screened_distance(self, q_sq: np.ndarray, a_sq: np.ndarray, dot: np.ndarray) -> np.ndarray:
        norms = np.sqrt(np.maximum(q_sq, 1e-300))[:, None] * np.sqrt(np.maximum(a_sq, 1e-300))[None, :]
        out: np.ndarray = 1.0 - dot / norms
        return out

    def scorer_measures(self, distance: float) -> bool:
        return abs(distance) < 1e-3


class Bilinear(Geometry):
    """Bilinear scoring ``σ(q·c + b)`` of the recurrent dual encoders, ranked by ``−q·c``.

    FAISS: inner-product kinds search the raw vectors; HNSW searches L2 on the MIPS lift
    ``(c, √(bound − |c|²))`` against ``(q, 0)`` (:func:`~qaindex.geometry.bilinear.mips_lift`),
    ``bound`` fixed by the corpus's largest norm.
    """

    name = "bilinear"
    bounded = True
    saturates = True

    def lifted_dimension(self, dim: int, *, inner_product: bool) -> int:
        return dim if inner_product else dim + 1

    def lift(self, vectors: np.ndarray, *, inner_product: bool, bound: float | None = None) -> np.ndarray:
        if inner_product:
            return _f32(vectors)
        if bound is None:
            bound = bilinear.mips_bound(vectors)
        return bilinear.mips_lift(vectors, bound)

    def lift_query(self, queries: np.ndarray, *, inner_product: bool) -> np.ndarray:
        return _f32(queries) if inner_product else bilinear.mips_query(queries)

    def distance(self, q: np.ndarray, a: np.ndarray) -> np.ndarray:
        out: np.ndarray = -np.sum(q * a, axis=-1)
        return out

    def screened_distance(self, q_sq: np.ndarray, a_sq: np.ndarray, dot: np.ndarray) -> np.ndarray:
        return -dot
