"""Poincaré-ball geometry as pure functions, shared by training (torch) and runtime (numpy).

Every function takes either numpy arrays or torch tensors and computes the *same* formula
with the same clamps, so the distance a model is trained with, the distance its exported
ONNX scorer computes and the distance the runtime checks are one piece of code. torch is
never imported here: a tensor argument brings its own module.

Numerics (float32 is what serving uses):

- Points are kept strictly inside the unit ball, at norm at most ``1 - ball_eps(dtype)``
  (1e-3 in float32, 1e-5 in float64): at norm 1 the distance is infinite, and in float32
  ``1 - |x|^2`` loses all precision close to it.
- ``1 - |x|^2`` is computed as ``(1 - |x|)(1 + |x|)``.
- ``|x - y|^2`` is computed from element differences, never as ``|x|^2 + |y|^2 - 2<x, y>``,
  which cancels catastrophically for nearby points near the boundary.
- ``arcosh(1 + z)`` is computed as ``log1p(z + sqrt(z (z + 2)))``, exact for small ``z``; the
  square root's argument is clamped away from 0 so the gradient stays finite when x == y.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "RANKINGS",
    "RELATIVE_LIFT_BOUND",
    "arcosh1p",
    "ball_eps",
    "cosine_similarity",
    "distance",
    "distance_from_gram",
    "lift",
    "lift_query",
    "lognorm_map",
    "max_norm_for",
    "near_centre",
    "one_minus_sqnorm",
    "origin_distance",
    "pairwise_distance",
    "pairwise_relative_distance",
    "project",
    "relative_distance",
    "relative_lift",
    "relative_lift_query",
    "relative_lift_scores",
    "sqnorm",
]

RANKINGS = ("distance", "relative")

Array = Any  # numpy.ndarray or torch.Tensor

_BALL_EPS = {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-3, "float64": 1e-5}


def _is_torch(x: Array) -> bool:
    return type(x).__module__.startswith("torch")


def _dtype_name(x: Array) -> str:
    return str(x.dtype).removeprefix("torch.")


def _tiny(x: Array) -> float:
    """Smallest clamp value used for ``x``'s dtype (the square of its machine epsilon)."""
    name = _dtype_name(x)
    eps = float(np.finfo(np.float64 if name == "float64" else np.float32).eps)
    return eps * eps


def _sum_last(x: Array) -> Array:
    if _is_torch(x):
        return x.sum(dim=-1, keepdim=True)
    return np.sum(x, axis=-1, keepdims=True)


def _clamp_min(x: Array, low: float) -> Array:
    if _is_torch(x):
        return x.clamp(min=low)
    return np.maximum(x, np.asarray(low, dtype=x.dtype))


def _clamp_max(x: Array, high: float) -> Array:
    if _is_torch(x):
        return x.clamp(max=high)
    return np.minimum(x, np.asarray(high, dtype=x.dtype))


def _sqrt(x: Array) -> Array:
    return x.sqrt() if _is_torch(x) else np.sqrt(x)


def _log1p(x: Array) -> Array:
    return x.log1p() if _is_torch(x) else np.log1p(x)


def _log(x: Array) -> Array:
    return x.log() if _is_torch(x) else np.log(x)


def _sigmoid(x: Array) -> Array:
    if _is_torch(x):
        return x.sigmoid()
    return (0.5 * (1.0 + np.tanh(0.5 * x))).astype(x.dtype, copy=False)


def _norm(x: Array) -> Array:
    """``|x|`` over the last axis (kept), from a clamped square so its gradient stays finite."""
    return _sqrt(_clamp_min(sqnorm(x), _tiny(x)))


def ball_eps(dtype: Any) -> float:
    """Margin kept between ball points and the unit sphere for ``dtype``.

    Parameters
    ----------
    dtype : numpy dtype, torch dtype, or their name
        Floating-point type of the points.

    Returns
    -------
    float
        1e-3 for float32, 1e-5 for float64, 1e-2 for 16-bit types.

    Example
    -------
    >>> ball_eps("float32")
    0.001
    """
    name = str(dtype).removeprefix("torch.")
    if name not in _BALL_EPS:
        name = np.dtype(dtype).name
    return _BALL_EPS[name]


def max_norm_for(dtype: Any) -> float:
    """Largest norm a ball point may have in ``dtype``: ``1 - ball_eps(dtype)``.

    Example
    -------
    >>> max_norm_for("float64")
    0.99999
    """
    return 1.0 - ball_eps(dtype)


def sqnorm(x: Array) -> Array:
    """Squared Euclidean norm over the last axis, keeping it: ``sum(x**2, -1)[..., None]``."""
    return _sum_last(x * x)


def one_minus_sqnorm(x: Array) -> Array:
    """``1 - |x|^2`` computed as ``(1 - |x|)(1 + |x|)``, clamped to at least ``eps^2``.

    The norm's square root is taken of a clamped argument, so the gradient at the origin is 0
    rather than NaN.
    """
    tiny = _tiny(x)
    n = _sqrt(_clamp_min(sqnorm(x), tiny))
    return _clamp_min((1.0 - n) * (1.0 + n), tiny)


def project(x: Array, *, max_norm: float | None = None) -> Array:
    """Radially project points into the ball of radius ``max_norm``.

    ``proj(x) = x * min(1, max_norm / |x|)``: points already inside are unchanged.

    Parameters
    ----------
    x : array (..., dim)
        Points.
    max_norm : float, keyword-only, optional
        Radius; defaults to ``max_norm_for(x.dtype)``.

    Returns
    -------
    array (..., dim)
        Points with norm at most ``max_norm``.

    Example
    -------
    >>> import numpy as np
    >>> float(np.linalg.norm(project(np.array([3.0, 4.0]), max_norm=0.5)))
    0.5
    """
    radius = max_norm_for(x.dtype) if max_norm is None else float(max_norm)
    if not 0.0 < radius < 1.0:
        raise ValueError(f"max_norm must be in (0, 1), got {radius}")
    n = _sqrt(_clamp_min(sqnorm(x), _tiny(x)))
    return x * _clamp_max(radius / n, 1.0)


def lognorm_map(v: Array, w: Array, a: float | Array, b: float | Array, *, max_norm: float) -> Array:
    """The ``lognorm`` ball map: a direction ``v`` at a radius set by the log of the evidence ``w``.

    ``x = max_norm * sigmoid(a * log(w) + b) * v / |v|``

    ``w >= 0`` is the text's summed per-token evidence (the last column of the token table:
    0 for tokens that carry none, such as single characters and unknown tokens). The radius
    is a logistic function of ``log w`` (``a > 0``): multiplying the evidence by ``k`` adds
    ``a log k`` to the logit, so informative texts sit close to the boundary without every
    long text saturating, texts with little evidence sit near the centre, and a text without
    any (empty, punctuation, unknown scripts) sits at the origin. ``|v|`` and ``w`` are
    clamped below at the dtype's tiny value, so the map and its gradient stay finite.

    Parameters
    ----------
    v : array (..., dim)
        Bag-of-words sums (the direction).
    w : array (..., 1)
        Summed evidence, non-negative.
    a, b : float or scalar array
        Slope (positive) and offset of the logit.
    max_norm : float, keyword-only
        Radius of the ball (below 1).

    Returns
    -------
    array (..., dim)
        Ball points of norm ``< max_norm``.

    Example
    -------
    >>> import numpy as np
    >>> x = lognorm_map(np.array([[3.0, 4.0], [1.0, 0.0]]), np.array([[np.e], [0.0]]), 1.0, 0.0, max_norm=0.99)
    >>> np.round(np.linalg.norm(x, axis=-1), 4).tolist()   # 0.99 * sigmoid(1), and the origin
    [0.7237, 0.0]
    """
    n = _norm(v)
    return v / n * (max_norm * _sigmoid(a * _log(_clamp_min(w, _tiny(w))) + b))


def arcosh1p(z: Array) -> Array:
    """``arcosh(1 + z)`` for ``z >= 0``, as ``log1p(z + sqrt(z (z + 2)))``.

    Accurate for tiny ``z`` (where ``arcosh(1 + z)`` would round ``1 + z`` to 1). The square
    root's argument is clamped to at least ``eps^2`` so the gradient stays finite at ``z = 0``.

    Example
    -------
    >>> import numpy as np
    >>> bool(np.isclose(arcosh1p(np.array(1e-12)), np.sqrt(2e-12)))
    True
    """
    z = _clamp_min(z, 0.0)
    return _log1p(z + _sqrt(_clamp_min(z * (z + 2.0), _tiny(z))))


def distance(x: Array, y: Array) -> Array:
    """Poincaré distance between ball points, broadcasting over leading axes.

    ``d(x, y) = arcosh(1 + 2 |x - y|^2 / ((1 - |x|^2)(1 - |y|^2)))``

    Parameters
    ----------
    x, y : array (..., dim)
        Points strictly inside the unit ball (see :func:`project`); broadcastable.

    Returns
    -------
    array (...)
        Distances, with the last axis reduced.

    Example
    -------
    >>> import numpy as np
    >>> x = np.array([0.0, 0.0]); y = np.array([0.5, 0.0])
    >>> bool(np.isclose(distance(x, y), 2 * np.arctanh(0.5)))
    True
    """
    diff = x - y
    z = 2.0 * sqnorm(diff) / (one_minus_sqnorm(x) * one_minus_sqnorm(y))
    return arcosh1p(z)[..., 0]


def distance_from_gram(x_sq: Array, y_sq: Array, dot: Array) -> Array:
    """Poincaré distance from squared norms and an inner product (numpy, float64).

    ``d = arcosh(1 + 2 max(|x|² + |y|² − 2⟨x, y⟩, 0) / ((1 − |x|²)(1 − |y|²)))``

    One matrix product gives every ``⟨x, y⟩`` of two blocks, so this is the fast first pass
    over large corpora. ``|x|² + |y|² − 2⟨x, y⟩`` cancels for nearby points (about 1e-16
    relative to the norms in float64), so the ranking it gives is screened again with
    :func:`distance`, which works from element differences.

    Parameters
    ----------
    x_sq, y_sq : array
        Squared norms, broadcastable against ``dot``.
    dot : array
        Inner products ``⟨x, y⟩``.

    Example
    -------
    >>> import numpy as np
    >>> x, y = np.array([0.1, 0.2]), np.array([-0.3, 0.4])
    >>> bool(np.isclose(distance_from_gram(x @ x, y @ y, x @ y), distance(x, y)))
    True
    """
    sq = np.maximum(x_sq + y_sq - 2.0 * dot, 0.0)
    z = 2.0 * sq / ((1.0 - x_sq) * (1.0 - y_sq))
    return arcosh1p(np.asarray(z, dtype=np.float64))


def pairwise_distance(query: Array, candidates: Array) -> Array:
    """Distances from each query to each of its candidates.

    Parameters
    ----------
    query : array (n, dim)
    candidates : array (n, m, dim)

    Returns
    -------
    array (n, m)

    Example
    -------
    >>> import numpy as np
    >>> pairwise_distance(np.zeros((1, 2)), np.zeros((1, 3, 2))).shape
    (1, 3)
    """
    return distance(query[..., None, :], candidates)


def origin_distance(y: Array) -> Array:
    """Poincaré distance from the origin: ``d(0, y) = 2 artanh(|y|)``.

    Computed as ``log1p(2 |y| / (1 - |y|))`` (``2 artanh(r) = log((1 + r) / (1 - r))``), exact
    for small norms; ``1 - |y|`` is clamped to at least ``eps^2`` so a point on the unit
    sphere gives a large finite value rather than ``inf``.

    Parameters
    ----------
    y : array (..., dim)
        Points strictly inside the unit ball.

    Returns
    -------
    array (...)

    Example
    -------
    >>> import numpy as np
    >>> bool(np.isclose(origin_distance(np.array([0.5, 0.0])), 2 * np.arctanh(0.5)))
    True
    """
    n = _norm(y)
    return _log1p(2.0 * n / _clamp_min(1.0 - n, _tiny(y)))[..., 0]


def relative_distance(x: Array, y: Array) -> Array:
    """Origin-relative Poincaré distance (a Busemann-style score): ``d(x, y) - d(0, y)``.

    ``x`` is the question, ``y`` the answer; lower is better. By the triangle inequality
    ``-d(0, x) <= f(x, y) <= d(0, x)``, and ``y = 0`` attains the *maximum* ``d(0, x)``: an
    answer at the ball's centre (an empty, punctuation-only or out-of-vocabulary text) can
    never be a question's nearest neighbour, while an answer deep in the question's direction
    scores best. When every answer has the same norm, ``f = d - const``: the ranking is the
    plain distance ranking. (In Euclidean space, ``|x - y|^2 - |y|^2 = |x|^2 - 2 <x, y>``: this
    is the hyperbolic analogue of inner-product scoring.)

    Parameters
    ----------
    x, y : array (..., dim)
        Ball points, broadcastable.

    Returns
    -------
    array (...)

    Example
    -------
    >>> import numpy as np
    >>> q = np.array([0.9, 0.0])
    >>> centre, deep = np.zeros(2), np.array([0.95, 0.0])
    >>> bool(relative_distance(q, deep) < relative_distance(q, centre))
    True
    """
    return distance(x, y) - origin_distance(y)


def pairwise_relative_distance(query: Array, candidates: Array) -> Array:
    """:func:`relative_distance` from each query (n, dim) to its candidates (n, m, dim) → (n, m).

    Example
    -------
    >>> import numpy as np
    >>> pairwise_relative_distance(np.zeros((1, 2)), np.zeros((1, 3, 2))).shape
    (1, 3)
    """
    return relative_distance(query[..., None, :], candidates)


def relative_lift(y: Array) -> Array:
    """Database-side lift for coarse recall under :func:`relative_distance`, by inner product.

    On the hyperboloid, ``cosh d(x, y) = X0 Y0 - <Xs, Ys>`` with ``X = ((1 + |x|^2), 2x) /
    (1 - |x|^2)``, and ``e^{d(0, y)} = (1 + |y|)^2 / (1 - |y|^2)``. For distances of a few
    units and more, ``e^d ≈ 2 cosh d``, so

    ``e^{f(x, y)} ≈ 2 cosh d(x, y) / e^{d(0, y)} = X0 (a(y) - <k(x), b(y)>)``

    with ``a(y) = 2 (1 + |y|^2) / (1 + |y|)^2``, ``b(y) = 4 y / (1 + |y|)^2`` and the Klein
    coordinates ``k(x) = 2x / (1 + |x|^2)``. ``X0 > 0`` does not depend on ``y``, so the
    smallest ``f`` maximises ``<(-1, k(x)), (a(y), b(y))>``: :func:`relative_lift_query`
    against this lift. (For answers far from the centre ``a ≈ 1`` and ``b ≈ k(y)``: inner
    product against Klein coordinates.) Approximate near ``d = 0`` only, where the exact
    rerank of the over-fetched candidates restores the order.

    Parameters
    ----------
    y : numpy array (n, dim)

    Returns
    -------
    numpy array (n, dim + 1), float32, with squared norm at most 4 (see :data:`RELATIVE_LIFT_BOUND`)

    Example
    -------
    >>> import numpy as np
    >>> relative_lift(np.zeros((1, 2))).tolist()
    [[2.0, 0.0, 0.0]]
    """
    y = np.asarray(y)
    out = np.empty((*y.shape[:-1], y.shape[-1] + 1), dtype=np.float32)
    flat_in, flat_out = y.reshape(-1, y.shape[-1]), out.reshape(-1, out.shape[-1])
    for s in range(0, len(flat_in), _LIFT_ROWS):  # float64 a block of rows at a time
        y64 = flat_in[s : s + _LIFT_ROWS].astype(np.float64)
        a, b = _relative_lift_coefficients(np.sqrt(sqnorm(y64)))
        flat_out[s : s + _LIFT_ROWS, :1] = a
        flat_out[s : s + _LIFT_ROWS, 1:] = b * y64
    return out


_LIFT_ROWS = 16_384  # rows lifted in float64 at once (a few MB, in cache)


def _relative_lift_coefficients(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a = 2 (1 + r^2) / (1 + r)^2`` and ``4 / (1 + r)^2`` of the lift ``(a, 4 y / (1 + r)^2)``,
    ``r = |y|``, in ``r``'s dtype (the one formula of :func:`relative_lift` and
    :func:`relative_lift_scores`)."""
    scale = 1.0 / (1.0 + r) ** 2
    return 2.0 * (1.0 + r * r) * scale, 4.0 * scale


RELATIVE_LIFT_BOUND = 4.0
"""Upper bound of ``|relative_lift(y)|^2`` over the ball (attained at the origin): the fixed
radius of the extra coordinate that turns the inner-product search into an L2 search."""


def relative_lift_query(x: Array) -> Array:
    """Query-side lift matching :func:`relative_lift`: ``(-1, 2x / (1 + |x|^2))``, float32.

    Example
    -------
    >>> import numpy as np
    >>> relative_lift_query(np.array([[0.5, 0.0]])).tolist()
    [[-1.0, 0.800000011920929, 0.0]]
    """
    x64 = np.asarray(x, dtype=np.float64)
    out = np.empty((*x64.shape[:-1], x64.shape[-1] + 1), dtype=np.float32)  # (one question: few numpy calls)
    out[..., 0] = -1.0
    out[..., 1:] = x64 * (2.0 / (1.0 + np.einsum("...i,...i->...", x64, x64)[..., None]))
    return out


def relative_lift_scores(lifted_query: Array, y: Array) -> Array:
    """``<lifted_query, relative_lift(y)>`` for one lifted question and many answers, in float32.

    ``relative_lift(y) = (a, 4 y / (1 + |y|)^2)`` with ``a = 2 (1 + |y|^2) / (1 + |y|)^2``, so
    the inner product is ``l0 a + (4 / (1 + |y|)^2) <l', y>`` for ``lifted_query = (l0, l')``
    (the same coefficients as :func:`relative_lift`), computed without building the lifted
    rows (the refinement step of the ``pq`` index re-scores thousands of answers per question
    with it).

    Parameters
    ----------
    lifted_query : array (dim + 1,)
        :func:`relative_lift_query` of one question.
    y : array (m, dim)
        Ball points.

    Returns
    -------
    numpy array (m,), float32

    Example
    -------
    >>> import numpy as np
    >>> y = np.array([[0.3, 0.1], [0.0, -0.5]], dtype=np.float32)
    >>> q = relative_lift_query(np.array([[0.2, 0.4]]))[0]
    >>> bool(np.allclose(relative_lift_scores(q, y), relative_lift(y) @ q, atol=1e-6))
    True
    """
    y32 = np.asarray(y, dtype=np.float32)
    lq = np.asarray(lifted_query, dtype=np.float32)
    a, b = _relative_lift_coefficients(np.sqrt(np.einsum("ij,ij->i", y32, y32)))
    # einsum's loops, not BLAS: OpenBLAS splits a matrix-vector product over threads, and on a
    # busy machine their wake-ups cost milliseconds for a product of a few thousand rows
    out: np.ndarray = lq[0] * a + b * np.einsum("ij,j->i", y32, lq[1:])
    return out


NEAR_CENTRE_FRACTION = 0.5
NEAR_CENTRE_MARGIN = 2.0
"""An answer is *near the centre* when ``d(0, a)`` is below ``max(NEAR_CENTRE_FRACTION * m,
m - NEAR_CENTRE_MARGIN)``, ``m`` the median answer's ``d(0, a)``. Near the boundary,
``d(q, a) ≈ 2 log|q - a| + t_q + t_a + c`` with depth ``t = -log(1 - |a|) ≈ d(0, a) - log 2``,
and ``2 log|q - a|`` spans about 2 between close and opposite directions: an answer 2 shallower
than the median is closer to almost every question than the answers in its own direction."""


def near_centre(
    vectors: Array,
    *,
    fraction: float = NEAR_CENTRE_FRACTION,
    margin: float = NEAR_CENTRE_MARGIN,
    chunk: int = 65536,
) -> dict[str, Any]:
    """Count answers near the ball's centre: potential hubs under plain-distance ranking.

    A point near the origin is at distance about ``d(0, q)`` from *every* question ``q``, while
    two points near the boundary are much further apart, so under ``ranking: "distance"`` such
    an answer (empty, punctuation-only, all out-of-vocabulary) is every question's nearest
    neighbour. Under ``ranking: "relative"`` the centre is the worst place to be and these
    answers are harmless.

    Parameters
    ----------
    vectors : array (n, dim)
        Answer vectors (read in chunks: a memory-mapped array is fine).
    fraction, margin : float, keyword-only
        Threshold ``max(fraction * median, median - margin)`` of ``d(0, a)`` (see
        :data:`NEAR_CENTRE_MARGIN`).

    Returns
    -------
    dict
        ``{"count", "fraction_of_answers", "threshold", "median_origin_distance"}``.

    Example
    -------
    >>> import numpy as np
    >>> near_centre(np.array([[0.999, 0.0], [0.0, 0.998], [0.05, 0.0]]))["count"]
    1
    """
    n = len(vectors)
    if n == 0:
        return {"count": 0, "fraction_of_answers": 0.0, "threshold": 0.0, "median_origin_distance": 0.0}
    d0 = np.concatenate(
        [origin_distance(np.asarray(vectors[i : i + chunk], dtype=np.float64)) for i in range(0, n, chunk)]
    )
    median = float(np.median(d0))
    threshold = max(fraction * median, median - margin)
    count = int(np.sum(d0 < threshold))
    return {
        "count": count,
        "fraction_of_answers": count / n,
        "threshold": threshold,
        "median_origin_distance": median,
    }


def lift(y: Array) -> Array:
    """Database-side lift for exact Poincaré nearest-neighbour search by inner product.

    For a fixed query ``x``, ``d(x, y)`` increases with
    ``|x - y|^2 / (1 - |y|^2) = a |x|^2 + a |y|^2 - 2 a <x, y>``, ``a = 1 / (1 - |y|^2)``, so
    the nearest ``y`` maximises ``<lift_query(x), lift(y)>`` with
    ``lift(y) = (-a, -a |y|^2, 2 a y)`` and ``lift_query(x) = (|x|^2, 1, x)``. Exact in
    exact arithmetic; in float32 it cancels for nearby points near the boundary, so it is
    only used for coarse recall, followed by an exact rerank with :func:`distance`.

    Parameters
    ----------
    y : numpy array (n, dim)

    Returns
    -------
    numpy array (n, dim + 2), float32
    """
    y64 = np.asarray(y, dtype=np.float64)
    a = 1.0 / one_minus_sqnorm(y64)
    out = np.concatenate([-a, -a * sqnorm(y64), 2.0 * a * y64], axis=-1)
    return np.ascontiguousarray(out, dtype=np.float32)


def lift_query(x: Array) -> Array:
    """Query-side lift matching :func:`lift`: ``(|x|^2, 1, x)``, float32."""
    x64 = np.asarray(x, dtype=np.float64)
    out = np.concatenate([sqnorm(x64), np.ones_like(x64[..., :1]), x64], axis=-1)
    return np.ascontiguousarray(out, dtype=np.float32)


def cosine_similarity(x: Array, y: Array) -> Array:
    """Cosine similarity over the last axis, broadcasting; 0 for a zero vector.

    ``cos(x, y) = <x, y> / max(|x| |y|, eps^2)``

    Example
    -------
    >>> import numpy as np
    >>> float(cosine_similarity(np.array([1.0, 0.0]), np.array([2.0, 0.0])))
    1.0
    """
    num = _sum_last(x * y)
    den = _sqrt(_clamp_min(sqnorm(x), _tiny(x))) * _sqrt(_clamp_min(sqnorm(y), _tiny(y)))
    return (num / den)[..., 0]
