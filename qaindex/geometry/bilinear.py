"""The bilinear (inner-product) geometry of the recurrent dual encoders (RDE, HRDE, ...).

The HRDE-LTC paper (Yoon et al., 2018) scores a pair by ``p = σ(qᵀ M a + b)``. Served as a dual
encoder, the answer encoder graph already outputs ``c = M a`` (``M`` is folded into it), so

    logit(q, c)    = q·c + b
    score(q, c)    = σ(q·c + b)  = (1 + tanh((q·c + b) / 2)) / 2        higher is better
    distance(q, c) = -q·c                                               lower is better

``σ`` is monotone, so ranking by the inner product ``q·c`` is exact; float32 ``σ`` saturates
at 1 for large logits, and the runtime's tie-break by distance then keeps the exact order.
The manifest's geometry is ``{"name": "bilinear", "bias": b}``.

Coarse recall: ``flat`` is FAISS ``IndexFlatIP`` on the raw vectors; ``hnsw`` searches L2 after
the extra-coordinate lift (:func:`mips_lift`, :func:`mips_query`) that turns maximum inner
product search into nearest-neighbour search, as the origin-relative Poincaré ranking does.

Like :mod:`qaindex.geometry.hyperbolic`, every function takes numpy arrays or torch tensors and
computes the same formula (the exported scorer is traced from :func:`bilinear_score`); torch
is never imported here.

Example
-------
>>> import numpy as np
>>> s, d = bilinear_score(np.array([[1.0, 0.0]]), np.array([[[2.0, 5.0], [0.0, 1.0]]]), 0.5)
>>> np.round(s, 4).tolist(), d.tolist()
([[0.9241, 0.6225]], [[-2.0, -0.0]])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MIPS_HEADROOM", "bilinear_logit", "bilinear_score", "mips_bound", "mips_lift", "mips_query", "sigmoid"]

Array = Any  # numpy.ndarray or torch.Tensor

MIPS_HEADROOM = 2.0
""":func:`mips_bound` is this many times the largest squared norm of the first vectors indexed,
so answers added later with norms up to ``√2`` times the largest are still searched exactly."""


def _is_torch(x: Array) -> bool:
    return type(x).__module__.startswith("torch")


def sigmoid(x: Array) -> Array:
    """``σ(x) = (1 + tanh(x / 2)) / 2``, finite for every finite ``x`` (numpy or torch).

    Example
    -------
    >>> float(sigmoid(np.float64(0.0))), float(sigmoid(np.float64(-1000.0)))
    (0.5, 0.0)
    """
    half = x * 0.5
    return (1.0 + (half.tanh() if _is_torch(x) else np.tanh(half))) * 0.5


def bilinear_logit(query: Array, candidates: Array, bias: float) -> Array:
    """``q·c + b`` over the last axis (broadcasting leading axes).

    Example
    -------
    >>> bilinear_logit(np.array([1.0, 2.0]), np.array([3.0, 4.0]), -1.0).item()
    10.0
    """
    return (query * candidates).sum(-1) + bias


def bilinear_score(query: Array, candidates: Array, bias: float) -> tuple[Array, Array]:
    """Scorer contract: ``query`` (n, d), ``candidates`` (n, m, d) → ``σ(q·c + b)``, ``-q·c`` (n, m).

    Example
    -------
    >>> s, d = bilinear_score(np.zeros((1, 3)), np.ones((1, 2, 3)), 0.0)
    >>> s.tolist(), d.tolist()
    ([[0.5, 0.5]], [[-0.0, -0.0]])
    """
    dot = (query[:, None, :] * candidates).sum(-1)
    return sigmoid(dot + bias), -dot


def mips_bound(vectors: np.ndarray) -> float:
    """Squared norm every lifted vector is padded to: ``MIPS_HEADROOM · max |v|²`` (at least 1e-12).

    Example
    -------
    >>> mips_bound(np.array([[3.0, 4.0]]))
    50.0
    """
    v = np.asarray(vectors, dtype=np.float64)
    top = float(np.max(np.einsum("ij,ij->i", v, v))) if len(v) else 0.0
    return max(MIPS_HEADROOM * top, 1e-12)


def mips_lift(vectors: np.ndarray, bound: float) -> np.ndarray:
    """Database side of MIPS as L2 search: ``(v, √(bound − |v|²))``, float32 (n, d + 1).

    For a query lifted by :func:`mips_query`, ``|(q, 0) − (v, e)|² = |q|² + bound − 2 q·v``,
    so the L2 order is the inner-product order exactly when every ``|v|² ≤ bound``; a vector
    beyond the bound gets ``e = 0`` (searched approximately; the exact rerank still scores it).

    Example
    -------
    >>> mips_lift(np.array([[3.0, 4.0]]), 50.0).tolist()
    [[3.0, 4.0, 5.0]]
    """
    v = np.asarray(vectors, dtype=np.float64)
    extra = np.sqrt(np.maximum(bound - np.einsum("ij,ij->i", v, v), 0.0))[:, None]
    return np.ascontiguousarray(np.concatenate([v, extra], axis=1), dtype=np.float32)


def mips_query(queries: np.ndarray) -> np.ndarray:
    """Query side of :func:`mips_lift`: ``(q, 0)``, float32 (n, d + 1).

    Example
    -------
    >>> mips_query(np.array([[1.0, 2.0]])).tolist()
    [[1.0, 2.0, 0.0]]
    """
    q = np.asarray(queries, dtype=np.float32)
    return np.ascontiguousarray(np.concatenate([q, np.zeros_like(q[:, :1])], axis=1))


def check_bias(value: object) -> float | None:
    """``value`` as the geometry's bias if it is a finite number, else None.

    Example
    -------
    >>> check_bias(0.5), check_bias("x"), check_bias(float("nan"))
    (0.5, None, None)
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)
