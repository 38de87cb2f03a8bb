"""Exact scoring of a set of answers: the model's scorer on every one, or on the short list
of a screening pass (one matrix product) whose order is checked against it.

Filtered search (:mod:`qaindex.search.filters`) ranks the answers a filter lets through with
these: :func:`exact_among` scores them all; :func:`screened_among` gives the same result for
thousands of them at the cost of one matrix-vector product over their vectors.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import numpy as np

from ..geometry.spaces import Geometry

__all__ = [
    "GATHER_COST",
    "SCREEN_TOLERANCE",
    "Scorer",
    "exact_among",
    "screened_among",
    "squared_norms",
]

#: Gathering one matching vector costs about as much as streaming this many: rows read in a
#: scattered order miss the caches and the prefetcher that a sequential pass keeps busy, so a
#: pass reads every row once ``GATHER_COST · matches`` exceeds them.
GATHER_COST = 3
#: Relative margin by which the screening pass's order must agree with the scorer's (float32
#: inner products against the scorer's float32 graph: both err by about 1e-5 relative).
SCREEN_TOLERANCE = 1e-3
_SCORE_BLOCK = 1 << 22  # floats of candidate vectors per scorer call (16 MiB)
_NORMS_LOCK = threading.Lock()

# The model's exact scorer: (questions (n, d), candidates (n, m, d)) -> (scores, distances) (n, m).
Scorer = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]

_NORMS: dict[int, tuple[weakref.ref[np.ndarray], np.ndarray]] = {}


def squared_norms(vectors: np.ndarray) -> np.ndarray:
    """``|a|²`` of every stored vector (float64), computed once per vectors array.

    Example
    -------
    >>> squared_norms(np.array([[3.0, 4.0]], dtype=np.float32)).tolist()
    [25.0]
    """
    with _NORMS_LOCK:
        hit = _NORMS.get(id(vectors))
        if hit is not None and hit[0]() is vectors:
            return hit[1]
    view = np.asarray(vectors)
    norms = np.empty(len(view), np.float64)
    for start in range(0, len(view), 1 << 16):
        block = np.asarray(view[start : start + (1 << 16)], dtype=np.float64)
        norms[start : start + len(block)] = np.einsum("ij,ij->i", block, block)
    with _NORMS_LOCK:
        for key in [key for key, (ref, _) in _NORMS.items() if ref() is None]:
            del _NORMS[key]
        try:
            _NORMS[id(vectors)] = (weakref.ref(vectors), norms)
        except TypeError:  # not weak-referenceable: not cached
            pass
    return norms


def exact_among(
    queries: np.ndarray, vectors: np.ndarray, rows: np.ndarray, k: int, scorer: Scorer
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` best of ``rows`` for each query, scored exactly by ``scorer``.

    Ordered as :meth:`qaindex.Ranker.search_vectors` orders: best score first, ties by
    distance, then by row. Arrays are ``(n, min(k, len(rows)))``.

    Example
    -------
    >>> import numpy as np
    >>> dot = lambda q, c: (np.einsum("nd,nmd->nm", q, c), -np.einsum("nd,nmd->nm", q, c))
    >>> vecs = np.eye(3, dtype=np.float32)
    >>> exact_among(vecs[:1], vecs, np.array([1, 0]), 1, dot)[2].tolist()
    [[0]]
    """
    n, dim = queries.shape
    w = min(k, len(rows))
    top_s = np.full((n, w), -np.inf, np.float32)
    top_d = np.full((n, w), np.inf, np.float32)
    top_r = np.full((n, w), -1, np.int64)
    if w == 0:
        return top_s, top_d, top_r
    gathered = np.ascontiguousarray(np.asarray(vectors)[rows], dtype=np.float32)
    step = max(1, _SCORE_BLOCK // max(1, len(rows) * dim))
    for start in range(0, n, step):
        q = np.ascontiguousarray(queries[start : start + step], dtype=np.float32)
        shape = (len(q), *gathered.shape)
        cands = gathered[None] if len(q) == 1 else np.ascontiguousarray(np.broadcast_to(gathered, shape))
        score, dist = scorer(q, cands)
        keys = np.broadcast_to(rows, score.shape)
        order = np.lexsort((keys, dist, -score), axis=-1)[:, :w]
        top_s[start : start + len(q)] = np.take_along_axis(score, order, axis=-1)
        top_d[start : start + len(q)] = np.take_along_axis(dist, order, axis=-1)
        top_r[start : start + len(q)] = rows[order]
    return top_s, top_d, top_r


def _screen_keep(k: int) -> int:
    return max(4 * k, k + 64)


def screened_among(
    queries: np.ndarray,
    vectors: np.ndarray,
    rows: np.ndarray,
    k: int,
    scorer: Scorer,
    space: Geometry,
    *,
    stream: bool | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`exact_among` (same arrays, same result) through a screening pass.

    ``space.screened_distance`` of every row (from ``|q|²``, ``|a|²`` and one matrix product)
    keeps each query's ``max(4k, k + 64)`` best rows, ``scorer`` ranks those. The result is
    checked: the scorer's ``k`` best must be the screening's ``k`` best and beat every row
    left out, each within :data:`SCREEN_TOLERANCE` (relative); else the short list widens ×8,
    up to :func:`exact_among` of every row.

    Parameters
    ----------
    queries : array (n, dimension)
    vectors : array (N, dimension)
    rows : int array (sorted, unique)
        The rows to rank.
    k : int
    scorer : callable
        The model's exact scorer, ``scorer(q (n, d), candidates (n, m, d)) -> (score, distance)``.
    space : Geometry
        The model's geometry (the scorer ranks by its distance).
    stream : bool, keyword-only, optional
        True: one product with every stored vector, the rows picked from it; False: the
        rows' vectors gathered first. None: whichever reads less (:data:`GATHER_COST`).

    Example
    -------
    >>> from qaindex import geometry
    >>> dot = lambda q, c: (np.einsum("nd,nmd->nm", q, c), -np.einsum("nd,nmd->nm", q, c))
    >>> vecs = np.eye(3, dtype=np.float32)
    >>> screened_among(vecs[:1], vecs, np.array([1, 2]), 1, dot, geometry.get("bilinear"))[2].tolist()
    [[1]]
    """
    n = len(queries)
    count = len(rows)
    keep = _screen_keep(k)
    if count <= keep or n == 0:
        return exact_among(queries, vectors, rows, k, scorer)
    view = np.asarray(vectors)
    if stream is None:
        stream = GATHER_COST * count > len(view)
    a_sq = squared_norms(vectors)[rows]
    q32 = np.ascontiguousarray(queries, dtype=np.float32)
    q_sq = np.einsum("ij,ij->i", q32.astype(np.float64), q32.astype(np.float64))
    gathered = None if stream else np.ascontiguousarray(view[rows], dtype=np.float32)
    w = min(k, count)
    top_s = np.full((n, w), -np.inf, np.float32)
    top_d = np.full((n, w), np.inf, np.float32)
    top_r = np.full((n, w), -1, np.int64)
    step = max(1, min(n, (1 << 22) // max(1, len(view) if stream else count)))  # (step, rows) floats
    for start in range(0, n, step):
        q = q32[start : start + step]
        block = view if stream else gathered
        assert block is not None
        if len(q) < 8:
            # einsum's own loops, not BLAS: a matrix-vector product that OpenBLAS splits over
            # threads waits for their wake-ups, which on a busy machine cost far more than the product
            dot = np.einsum("nd,md->mn", block, q)
        else:  # a matrix product: BLAS
            dot = q @ block.T
        if stream:
            dot = dot[:, rows]  # every vector streamed once, the matching ones kept
        screen = np.asarray(space.screened_distance(q_sq[start : start + step], a_sq, dot.astype(np.float64)))
        for j in range(len(q)):
            i = start + j
            found = _screened_one(queries[i : i + 1], vectors, rows, k, scorer, screen[j], keep)
            top_s[i], top_d[i], top_r[i] = found
    return top_s, top_d, top_r


def _screened_one(
    query: np.ndarray,
    vectors: np.ndarray,
    rows: np.ndarray,
    k: int,
    scorer: Scorer,
    screen: np.ndarray,
    keep: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One query of :func:`screened_among`: ``screen`` is its screened distance of each row."""
    count = len(rows)
    screen = np.where(np.isnan(screen), np.inf, screen)
    while keep < count:
        part = np.argpartition(screen, keep)
        short = np.sort(part[:keep])  # positions in rows, ascending: the tie order of exact_among
        left_out = float(screen[part[keep]])  # the smallest screened distance not kept
        es, ed, er = exact_among(query, vectors, rows[short], k, scorer)
        chosen = screen[short][np.searchsorted(rows[short], er[0])]
        kth = float(np.partition(screen[short], k - 1)[k - 1])  # k <= keep
        worst = float(chosen.max())
        tolerance = SCREEN_TOLERANCE * (1.0 + abs(left_out))
        if np.isfinite(worst) and worst + tolerance < left_out and worst <= kth + tolerance:
            return es[0], ed[0], er[0]
        if worst > kth + tolerance:
            break  # the scorer does not rank by this geometry: score every row
        keep *= 8
    es, ed, er = exact_among(query, vectors, rows, k, scorer)
    return es[0], ed[0], er[0]
