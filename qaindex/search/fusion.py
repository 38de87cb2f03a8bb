"""Fusion of the dense and lexical (BM25) rankings: the second stage of hybrid search.

For each question the candidates are the union of the dense stage's ``k × overfetch``
best answers (the coarse index's recall) and BM25's ``k × overfetch`` best answers. Every
candidate gets both scores exactly: the model's score (the ONNX scorer, as in a dense
search) and its BM25 score (0 when no term matches). The two are fused by one of two rules,
and the ``k`` best fused candidates are the hits (ties: higher model score, then lower row).

- ``rrf`` (reciprocal-rank fusion, Cormack et al., 2009)::

      fused(a) = 1 / (c + rank_dense(a)) + [bm25(a) > 0] / (c + rank_bm25(a))

  ranks are 1-based within the candidate set (ties by row), and answers without a matching
  term get no lexical part;
- ``convex``: a convex combination of min-max normalised scores over the candidate set::

      fused(a) = w * (s(a) - min s) / (max s - min s) + (1 - w) * bm25(a) / max bm25

  (a constant part counts 0).

The default (:data:`DEFAULT_FUSION`) is the rule and parameter chosen by
``benchmarks/hybrid.py`` on held-out corpora (``docs/hybrid.md``).

Example
-------
>>> fuse(np.array([3.0, 2.0, 1.0]), np.array([0.0, 1.0, 5.0]), Fusion("rrf", c=60)).round(4).tolist()
[0.0164, 0.0323, 0.0323]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import QueryError
from ..text.lexical import top_rows

__all__ = ["DEFAULT_FUSION", "FUSION_RULES", "Fusion", "fuse", "fusion_from", "union_candidates"]

FUSION_RULES = ("rrf", "convex")


@dataclass(frozen=True)
class Fusion:
    """A fusion rule and its parameter.

    Attributes
    ----------
    rule : {"rrf", "convex"}
    c : float
        The ``rrf`` rank constant (the ``k`` of the RRF paper; 60 there).
    weight : float
        The ``convex`` rule's weight of the dense score, in [0, 1].
    """

    rule: str = "rrf"
    c: float = 60.0
    weight: float = 0.5

    def __post_init__(self) -> None:
        if self.rule not in FUSION_RULES:
            raise QueryError(f"fusion rule must be one of {', '.join(FUSION_RULES)}; got {self.rule!r}")
        if not (isinstance(self.c, int | float) and math.isfinite(self.c) and self.c >= 0):
            raise QueryError(f"the rrf constant c must be a non-negative number, got {self.c!r}")
        if not (isinstance(self.weight, int | float) and 0.0 <= self.weight <= 1.0):
            raise QueryError(f"the convex weight must be a number in [0, 1], got {self.weight!r}")

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "c": self.c, "weight": self.weight}


# chosen by benchmarks/hybrid.py (see docs/hybrid.md)
DEFAULT_FUSION = Fusion("convex", weight=0.5)


def fusion_from(value: Any) -> Fusion:
    """A :class:`Fusion` from a Fusion, ``None`` (the default) or a mapping of its fields.

    Example
    -------
    >>> fusion_from({"rule": "rrf", "c": 10})
    Fusion(rule='rrf', c=10, weight=0.5)
    """
    if value is None:
        return DEFAULT_FUSION
    if isinstance(value, Fusion):
        return value
    if isinstance(value, dict):
        unknown = set(value) - {"rule", "c", "weight"}
        if unknown:
            raise QueryError(f"unknown fusion field(s) {sorted(unknown)}; use rule, c, weight")
        return Fusion(**value)
    raise QueryError(f"fusion must be a Fusion, a mapping or None, got {type(value).__name__}")


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based rank of each value, highest first, ties by position."""
    order = np.lexsort((np.arange(len(values)), -values))
    ranks = np.empty(len(values), np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    return ranks


def fuse(dense: np.ndarray, lexical: np.ndarray, fusion: Fusion = DEFAULT_FUSION) -> np.ndarray:
    """Fused scores (float64, higher is better) of one question's candidates.

    Parameters
    ----------
    dense : array (m,)
        The model's scores of the candidates (higher is better), in row order.
    lexical : array (m,)
        Their BM25 scores (0: no matching term).
    fusion : Fusion

    Returns
    -------
    numpy.ndarray (m,)
    """
    d = np.asarray(dense, dtype=np.float64)
    lex = np.asarray(lexical, dtype=np.float64)
    if fusion.rule == "rrf":
        return 1.0 / (fusion.c + _ranks(d)) + np.where(lex > 0, 1.0 / (fusion.c + _ranks(lex)), 0.0)
    span = d.max() - d.min() if len(d) else 0.0
    dn = (d - d.min()) / span if span > 0 else np.zeros_like(d)
    top = lex.max() if len(lex) else 0.0
    ln = lex / top if top > 0 else np.zeros_like(lex)
    return fusion.weight * dn + (1.0 - fusion.weight) * ln


def union_candidates(dense_rows: np.ndarray, lexical_rows: list[np.ndarray]) -> np.ndarray:
    """Per question, the sorted union of its dense rows (``-1``: none) and lexical rows,
    padded with ``-1`` to one width: int64 (n, width)."""
    unions = [np.union1d(d[d >= 0], lx) for d, lx in zip(dense_rows, lexical_rows, strict=True)]
    width = max((len(u) for u in unions), default=0)
    out = np.full((len(unions), width), -1, dtype=np.int64)
    for i, u in enumerate(unions):
        out[i, : len(u)] = u
    return out


def hybrid_arrays(
    model: Any,
    vectors: np.ndarray,
    lexical: Any,
    questions: list[str],
    qv: np.ndarray,
    dense_rows: np.ndarray,
    k: int,
    fusion: Fusion = DEFAULT_FUSION,
    allowed: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` best fused candidates of each question, as :meth:`qaindex.Ranker.search_vectors` arrays.

    Parameters
    ----------
    model : qaindex.Model
        Scores the candidates exactly (``score_checked``).
    vectors : array (N, dimension)
        The index's answer vectors.
    lexical : qaindex.text.lexical.LexicalIndex
        The index's BM25 index (same rows).
    questions : list of str
    qv : array (n, dimension)
        The questions' vectors.
    dense_rows : int array (n, m)
        The dense stage's candidates (``-1``: none); BM25 adds its ``m`` best.
    k : int
    fusion : Fusion
    allowed : bool array (N,), optional
        Rows a filter lets through: BM25 adds only its best allowed rows (``dense_rows``
        must hold allowed rows only).

    Returns
    -------
    scores, distances, rows : (n, k) arrays
        The model's scores and distances of the hits (not the fused values), in fused order;
        ``-inf``, ``inf``, ``-1`` where missing.
    """
    n, m = dense_rows.shape
    lex_scores = [lexical.scores(q) for q in questions]
    if allowed is None:
        lex_rows = [top_rows(scores, m) for scores in lex_scores]
    else:  # the best allowed rows: others ranked last, then dropped
        ranked = [top_rows(np.where(allowed, scores, -np.inf), m) for scores in lex_scores]
        lex_rows = [r[allowed[r]] for r in ranked]
    cand = union_candidates(dense_rows, lex_rows)
    width = cand.shape[1]
    valid = cand >= 0
    safe = np.where(valid, cand, 0)
    gathered = np.asarray(np.asarray(vectors)[safe.ravel()], dtype=np.float32).reshape(n, width, -1)
    score, dist = model.score_checked(np.ascontiguousarray(qv, dtype=np.float32), gathered)
    top_s = np.full((n, k), -np.inf, np.float32)
    top_d = np.full((n, k), np.inf, np.float32)
    top_r = np.full((n, k), -1, np.int64)
    for i in range(n):
        rows = cand[i, valid[i]]
        s, d = score[i, valid[i]], dist[i, valid[i]]
        fused = fuse(s, lex_scores[i][rows], fusion)
        order = np.lexsort((rows, -s.astype(np.float64), -fused))[:k]
        top_s[i, : len(order)] = s[order]
        top_d[i, : len(order)] = d[order]
        top_r[i, : len(order)] = rows[order]
    return top_s, top_d, top_r
