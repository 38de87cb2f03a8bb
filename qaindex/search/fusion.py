"""Fusion of the dense and lexical (BM25) rankings: the second stage of hybrid search.

For each question the candidates are the union of the dense stage's ``max(k × overfetch,
CANDIDATE_FLOOR)`` best answers (the coarse index's recall) and as many of BM25's best (at
scale, :data:`LEXICAL_SCAN_LIMIT`, BM25 scores the dense candidates only: see
:func:`hybrid_arrays`). Every candidate gets both scores exactly: the model's score (the
ONNX scorer, as in a dense search) and its BM25 score (0 when no term matches). The two are
fused by one of three rules, and the ``k`` best fused candidates are the hits (ties: higher
model score, then lower row).

- ``rrf`` (reciprocal-rank fusion, Cormack et al., 2009)::

      fused(a) = [rank_dense(a) <= D] / (c + rank_dense(a))
                 + [bm25(a) > 0 and rank_bm25(a) <= D] / (c + rank_bm25(a))

  ranks are 1-based within the candidate set (ties by row), each list counts its first
  ``D`` = :data:`CANDIDATE_FLOOR` only, and answers without a matching term get no lexical part;
- ``convex``: a convex combination of normalised scores::

      fused(a) = w * clip((s(a) - s_D) / (max s - s_D), 0, 1) + (1 - w) * bm25(a) / max bm25

  where ``s_D`` is the ``D``-th best model score among the candidates (their lowest when
  there are fewer; a constant part counts 0);
- ``adaptive`` (the default): ``convex`` with a dense weight set per corpus and per question::

      w(q) = clip(a + b * rho, 0, 1) * clip(d - e * cov(q), 0, 1) * min(1, terms / n(q))

  a corpus part, a question part and a length part:

  - ``rho`` is the corpus's *dense/BM25 ratio*, measured label-free when the lexical index
    is built (:func:`dense_ratio`: the model's MRR over BM25's MRR at finding an answer from
    three of its own words, on a sample of the corpus). A corpus of long, similar passages
    (technical documentation) has a low one and leans on BM25. An index without a measured
    ratio uses ``weight`` for the corpus part (``clip(a, 0, 1)`` when ``b`` is 0).
  - ``cov(q)`` is the question's *lexical coverage*: the share of its IDF mass that BM25's
    best candidate contains (:meth:`~qaindex.text.lexical.LexicalIndex.coverage`; terms no
    answer contains count at the largest IDF; 0 when no term matches). A question whose
    rare words the best BM25 answer holds (an entity, an error code, a product name) leans
    on BM25; one that BM25 matches on a few common words only (a paraphrase) on the model.
  - ``n(q)`` is the question's BM25 term count: the dense encoder reads a bounded number of
    tokens, so long questions (forum posts) lean on BM25.

  ``e`` = 0 (``d`` = 1), which a stored fusion without ``d`` and ``e`` means, is the
  rule ``clip(a + b * rho, 0, 1) * min(1, terms / n(q))``.

The constants ``a``, ``b``, ``d``, ``e``, ``terms`` are fitted per model
(:mod:`qaindex.eval.fusion_fit`: ``qaindex export-model`` and ``qaindex train`` fit them on
the model they write; ``tools/fit_default_fusion.py`` on held-out labelled corpora for the
built-in model) and stored in the model manifest (``"fusion"``), which :func:`fusion_from`
reads; a model without one uses the safe fallback :data:`SAFE_FUSION`.

Every quantity a fused value depends on (``max s``, ``s_D``, ``max bm25``, ranks up to ``D``)
comes from the ``D`` best of each list, which every candidate pool holds: so with exact recall
the fused value of an answer, and the order of the hits, do not depend on ``k`` (a larger
``k`` only appends hits). A hybrid hit's ``score`` falls with that order
(:func:`~qaindex.search.scoring.hybrid_scores`): hits are ordered by the score they report.

Example
-------
>>> fuse(np.array([3.0, 2.0, 1.0]), np.array([0.0, 1.0, 5.0]), Fusion("rrf", c=60)).round(4).tolist()
[0.0164, 0.0323, 0.0323]
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ModelFormatError, QueryError
from ..store.field_ranges import (
    FUSED_SCORE,
    FUSED_SCORE_WEIGHTS,
    FUSION,
    FUSION_FIELDS,
    FUSION_RULES,
    FUSION_SCORE,
    SCORE_WEIGHTS,
    fusion_entry_error,
    optional_weights,
)
from ..store.field_ranges import RATIO_REMEASURE as RATIO_REMEASURE
from ..text.lexical import STOPWORDS_EN, LexicalIndex, top_rows
from . import budget
from .hits import Explanation
from .scoring import fused_probability, hybrid_probability, hybrid_scores

if TYPE_CHECKING:
    from ..vector_index import RowSource

#: per question: the records its keys vouch for, their best key's score and distance,
#: whether one of their keys holds exactly the question's terms, their best key's
#: :data:`~qaindex.search.hits.MATCHED` code, and the best score of the stored questions among
#: the keys considered (``-inf`` where none is): :func:`qaindex.search.keys.key_evidence`
Evidence = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]

__all__ = [
    "CANDIDATE_FLOOR",
    "DEFAULT_FUSION",
    "FUSION_RULES",
    "LEXICAL_SCAN_LIMIT",
    "SAFE_FUSION",
    "Fusion",
    "best_coverage",
    "dense_ratio",
    "dense_weight",
    "fuse",
    "fuse_candidates",
    "fused_probability",
    "fusion_from",
    "hybrid_probability",
    "hybrid_scores",
    "question_coverage",
    "union_candidates",
    "with_dense_ratio",
]

# answers beyond which BM25 scores only the dense candidates (no full scan; benchmarks/quality/hybrid.py)
LEXICAL_SCAN_LIMIT = 50_000
# the label-free dense/BM25 ratio: pseudo-questions of RATIO_WORDS words cut from RATIO_QUESTIONS
# answers of a sample of at most RATIO_POOL answers (fixed, so the ratio does not depend on N)
RATIO_POOL = 2000
RATIO_QUESTIONS = 200
RATIO_WORDS = 3
RATIO_MIN_QUESTIONS = 20
RATIO_TEXT_CHARS = 65_536  # pseudo-questions are cut from an answer's first characters (bounded memory)
_WORD = re.compile(r"\w\w+")


@dataclass(frozen=True)
class Fusion:
    """A fusion rule and its parameter.

    Attributes
    ----------
    rule : {"rrf", "convex", "adaptive"}
    c : float
        The ``rrf`` rank constant (the ``k`` of the RRF paper; 60 there).
    weight : float
        The ``convex`` rule's weight of the dense score, in [0, 1] (``adaptive``: the
        weight of an index without a measured dense/BM25 ratio).
    a, b : float
        ``adaptive``: the corpus part ``clip(a + b * rho, 0, 1)`` of the dense weight.
    d, e : float
        ``adaptive``: the question part ``clip(d - e * cov(q), 0, 1)`` (``e`` = 0: none).
    terms : float
        ``adaptive``: questions of more BM25 terms than this lower the dense weight in
        proportion (``inf``: never).
    score : tuple of 4 or 5 float, optional
        An older per-hit calibration of hybrid hits' ``score`` (:func:`hybrid_probability`): bias
        and the weights of the model's calibrated logit, the normalised BM25 score, the fused
        value and (optional) the question's BM25 match. Used only without ``fused_score``,
        and then made monotone with rank (:func:`hybrid_scores`).
    fused_score : tuple of 4 to 7 float, optional
        The calibration of the fused value itself (:func:`fused_probability`): bias and the
        weights of the fused value (>= 0), the calibrated logit of the question's best model
        score, the question's BM25 match and, optional in this order, being the search's first
        hit (>= 0), the question's lexical coverage and ``ln(1 + n(q))``.
    """

    rule: str = "rrf"
    c: float = 60.0
    weight: float = 0.5
    a: float = 0.0
    b: float = 1.0
    terms: float = math.inf
    d: float = 1.0
    e: float = 0.0
    score: tuple[float, ...] | None = None
    fused_score: tuple[float, ...] | None = None

    def __post_init__(self) -> None:  # the ranges: qaindex.store.field_ranges
        if self.rule not in FUSION_RULES:
            raise QueryError(f"fusion rule must be one of {', '.join(FUSION_RULES)}; got {self.rule!r}")
        if not FUSION["c"].holds(self.c):
            raise QueryError(f"the rrf constant c must be a number in {FUSION['c']}, got {self.c!r}")
        if not FUSION["weight"].holds(self.weight):
            raise QueryError(f"the convex weight must be a number in {FUSION['weight']}, got {self.weight!r}")
        for name in ("a", "b", "d", "e"):
            value = getattr(self, name)
            if not FUSION[name].holds(value):
                raise QueryError(f"the adaptive constant {name} must be a number in {FUSION[name]}, got {value!r}")
        if not (FUSION["terms"].holds(self.terms) or (isinstance(self.terms, float) and self.terms == math.inf)):
            raise QueryError(
                f"the adaptive constant terms must be a number in {FUSION['terms']} (or inf), got {self.terms!r}"
            )
        if self.score is not None and (
            not isinstance(self.score, tuple)
            or len(self.score) not in (4, 5)
            or not all(FUSION_SCORE[n].holds(v) for n, v in zip(SCORE_WEIGHTS, self.score, strict=False))
        ):
            raise QueryError(
                "the hybrid score calibration must be 4 or 5 finite numbers (bias in "
                f"{FUSION_SCORE['bias']}, weights in {FUSION_SCORE['dense']}), got {self.score!r}"
            )
        if self.fused_score is not None and (
            not isinstance(self.fused_score, tuple)
            or not 4 <= len(self.fused_score) <= len(FUSED_SCORE_WEIGHTS)
            or not all(FUSED_SCORE[n].holds(v) for n, v in zip(FUSED_SCORE_WEIGHTS, self.fused_score, strict=False))
        ):
            raise QueryError(
                f"the fused score calibration must be 4 to {len(FUSED_SCORE_WEIGHTS)} numbers "
                f"({', '.join(FUSED_SCORE_WEIGHTS)}; fused and first in {FUSED_SCORE['fused']}, bias in "
                f"{FUSED_SCORE['bias']}), got {self.fused_score!r}"
            )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "c": self.c, "weight": self.weight}
        if self.rule == "adaptive":
            out.update(a=self.a, b=self.b, terms=None if math.isinf(self.terms) else self.terms, d=self.d, e=self.e)
        if self.score is not None:
            out["score"] = dict(zip(SCORE_WEIGHTS, self.score, strict=False))
        if self.fused_score is not None:
            out["fused_score"] = dict(zip(FUSED_SCORE_WEIGHTS, self.fused_score, strict=False))
        return out


# the rule of a mapping without a rule (the constants tools/fit_default_fusion.py fitted for the
# built-in default model, whose manifest stores them; see docs/hybrid.md)
DEFAULT_FUSION = Fusion("adaptive", weight=0.5, a=0.0, b=2.0, terms=10.0, d=1.25, e=1.5)
# the fallback of a model whose manifest has no fitted rule: dense weight clip(0.5 + rho, 0, 1),
# no question part, no length part; a model whose pseudo-question MRR is at least half BM25's
# (pseudo-questions are the answer's own words, which favours BM25) ranks by its own scores
# (see docs/hybrid.md)
SAFE_FUSION = Fusion("adaptive", weight=0.8, a=0.5, b=1.0, terms=math.inf, d=1.0, e=0.0)
FIELDS = FUSION_FIELDS
# the depth D of each ranking that fusion reads: the dense normalisation's reference rank, the
# RRF lists' length and the smallest candidate pool of a hybrid search (so the pool never shrinks with k)
CANDIDATE_FLOOR = 100


def _weights(value: Any, names: tuple[str, ...], what: str) -> Any:
    """A score calibration's weights as a tuple in the order of ``names`` (the first four
    required, :func:`~qaindex.store.field_ranges.optional_weights` after them), from an object
    or a list; anything else as it is (for :class:`Fusion` to refuse). An object's missing
    optional weights before its last one count as 0."""
    if isinstance(value, list):
        return tuple(value)
    if not isinstance(value, Mapping):
        return value
    optional = optional_weights(names)
    if set(value) - set(optional) != set(names[:4]):
        raise QueryError(
            f"the {what} score calibration needs exactly {', '.join(names[:4])} (and optionally "
            f"{', '.join(optional)}), got {sorted(value)}"
        )
    last = max(i for i, k in enumerate(names) if k in value)
    return tuple(value.get(k, 0.0) for k in names[: last + 1])


def _from_mapping(value: Mapping[str, Any]) -> Fusion:
    unknown = set(value) - set(FIELDS)
    if unknown:
        raise QueryError(f"unknown fusion field(s) {sorted(unknown)}; use {', '.join(FIELDS)}")
    fields = dict(value)
    if fields.get("terms", 0) is None:  # JSON has no inf
        fields["terms"] = math.inf
    for key, names, what in (("score", SCORE_WEIGHTS, "hybrid"), ("fused_score", FUSED_SCORE_WEIGHTS, "fused")):
        if key in fields:
            fields[key] = _weights(fields[key], names, what)
    base = DEFAULT_FUSION if fields.get("rule", DEFAULT_FUSION.rule) == DEFAULT_FUSION.rule else Fusion()
    return replace(base, **fields)


def fusion_from(value: Any, model: Any = None) -> Fusion:
    """A :class:`Fusion` from a Fusion, ``None`` (the default) or a mapping of its fields.

    ``None`` gives the model's fitted fusion (its manifest's ``"fusion"``) when ``model`` has
    one, else the safe fallback :data:`SAFE_FUSION` (:data:`DEFAULT_FUSION` without a
    model); a mapping's missing fields come from :data:`DEFAULT_FUSION` (a stored
    ``adaptive`` fusion without ``e`` has no question part:
    ``e`` = 0; a stored score calibration alone, from ``qaindex calibrate``, goes with
    the safe fallback).

    Example
    -------
    >>> fusion_from({"rule": "rrf", "c": 10}).c
    10
    """
    if value is None:
        if model is None:
            return DEFAULT_FUSION
        stored = getattr(model, "manifest", {}).get("fusion")
        if stored is None:
            return SAFE_FUSION
        for seen, parsed in _PARSED:  # every search asks: the model's stored fusion, parsed once
            if _same(seen, stored):
                return parsed
        parsed = _stored_fusion(stored, model)
        _PARSED[:] = [(copy.deepcopy(stored), parsed), *_PARSED[: _PARSED_KEPT - 1]]
        return parsed
    if isinstance(value, Fusion):
        return value
    if isinstance(value, Mapping):
        return _from_mapping(value)
    raise QueryError(f"fusion must be a Fusion, a mapping or None, got {type(value).__name__}")


# the stored fusions parsed last (a copy of the manifest's entry, compared by value: a manifest
# changed in memory is parsed, and checked, again)
_PARSED: list[tuple[Any, Fusion]] = []
_PARSED_KEPT = 4


def _same(a: Any, b: Any) -> bool:
    """Equal JSON values of the same types (``1``, ``1.0`` and ``True`` differ: the checks do)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _stored_fusion(stored: Any, model: Any) -> Fusion:
    """A model manifest's ``"fusion"`` entry, checked and parsed (see :func:`fusion_from`)."""
    why = fusion_entry_error(stored)  # checked by Model.load too; a manifest changed in memory since
    if why is not None:
        raise ModelFormatError(
            f"{model.directory / 'manifest.json'}: {why}; "
            "refit it with `python -m tools.fit_default_fusion` or remove the field"
        )
    try:
        fields = {k: v for k, v in stored.items() if k in FIELDS}
        fitted_rule = set(fields) - {"score", "fused_score"}  # only a score calibration: the safe rule
        if not fitted_rule:
            parsed = _from_mapping(fields)
            return replace(SAFE_FUSION, score=parsed.score, fused_score=parsed.fused_score)
        if fields.get("rule", DEFAULT_FUSION.rule) == "adaptive" and "e" not in fields:
            fields.update(d=1.0, e=0.0)  # no question part stored: the rule without it
        return _from_mapping(fields)
    except (QueryError, TypeError, AttributeError) as exc:
        raise ModelFormatError(
            f'{model.directory / "manifest.json"}: field "fusion" is invalid ({exc}); refit it with '
            "`python -m tools.fit_default_fusion` or remove the field"
        ) from None


def dense_weight(fusion: Fusion, ratio: float | None, terms: int, coverage: float = 0.0) -> float:
    """The dense weight of the ``convex`` combination for one question.

    ``convex``: ``fusion.weight``; ``adaptive``::

        clip(a + b * ratio, 0, 1) * clip(d - e * coverage, 0, 1) * min(1, fusion.terms / terms)

    with ``fusion.weight`` for the first factor when the index has no ``ratio`` (and ``b``
    is not 0). ``coverage``: the question's lexical coverage
    (:meth:`~qaindex.text.lexical.LexicalIndex.coverage` of BM25's best candidate).

    Example
    -------
    >>> dense_weight(Fusion("adaptive", a=-0.25, b=1.0, terms=10), 0.75, 20)
    0.25
    >>> dense_weight(Fusion("adaptive", a=0.0, b=2.0, d=1.25, e=1.5), 0.8, 4, coverage=0.5)
    0.5
    """
    if fusion.rule != "adaptive":
        return float(fusion.weight)
    if ratio is None and fusion.b != 0:
        corpus = fusion.weight
    else:
        corpus = min(1.0, max(0.0, fusion.a + fusion.b * (ratio or 0.0)))
    question = min(1.0, max(0.0, fusion.d - fusion.e * coverage))
    return float(corpus * question * min(1.0, fusion.terms / max(terms, 1)))


def question_coverage(
    fusion: Fusion, lexical: Any, terms: np.ndarray, length: int, rows: np.ndarray, bm25: Any
) -> float:
    """The lexical coverage ``fusion`` reads for one question: that of its best BM25 candidate
    (ties: the first of ``rows``), 0 when no candidate matches a term or nothing reads it (the
    ``adaptive`` rule's question part reads it where ``e`` is not 0, the fused score
    calibration where its coverage weight is not 0, under any rule).

    Example
    -------
    >>> from qaindex.text.lexical import LexicalIndex
    >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats and dogs"])
    >>> terms, length = lex.query("cats and dogs")
    >>> rows = np.array([0, 2])
    >>> question_coverage(Fusion("adaptive", e=1.0), lex, terms, length, rows, lex.scores_of_rows(terms, rows))
    1.0
    """
    at = FUSED_SCORE_WEIGHTS.index("coverage")
    scored = fusion.fused_score is not None and len(fusion.fused_score) > at and fusion.fused_score[at] != 0
    if not scored and (fusion.rule != "adaptive" or fusion.e == 0):
        return 0.0
    return best_coverage(lexical, terms, length, rows, bm25)


def best_coverage(lexical: Any, terms: np.ndarray, length: int, rows: np.ndarray, bm25: Any) -> float:
    """:meth:`~qaindex.text.lexical.LexicalIndex.coverage` of the best of ``rows`` by ``bm25``
    (ties: the first), 0 when none matches a term."""
    bm25 = np.asarray(bm25)
    if not len(bm25) or bm25.max() <= 0:
        return 0.0
    return float(lexical.coverage(terms, length, int(rows[int(np.argmax(bm25))])))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based rank of each value, highest first, ties by position."""
    order = np.lexsort((np.arange(len(values)), -values))
    ranks = np.empty(len(values), np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    return ranks


def fuse(
    dense: np.ndarray, lexical: np.ndarray, fusion: Fusion = DEFAULT_FUSION, depth: int | None = None
) -> np.ndarray:
    """Fused scores (float64, higher is better) of one question's candidates.

    Parameters
    ----------
    dense : array (m,)
        The model's scores of the candidates (higher is better), in row order.
    lexical : array (m,)
        Their BM25 scores (0: no matching term).
    fusion : Fusion
    depth : int, optional
        ``D``: the dense scores are normalised against the ``D``-th best (``convex``), each
        list's ranks count up to ``D`` (``rrf``). None: every candidate (``D = m``), as a
        search uses :data:`CANDIDATE_FLOOR`.

    Returns
    -------
    numpy.ndarray (m,)

    Example
    -------
    >>> fuse(np.array([3.0, 2.0, 1.0]), np.array([0.0, 1.0, 2.0]), Fusion("convex", weight=0.5), depth=2).tolist()
    [0.5, 0.25, 0.5]
    """
    d = np.asarray(dense, dtype=np.float64)
    lex = np.asarray(lexical, dtype=np.float64)
    m = len(d)
    depth = m if depth is None else min(m, int(depth))
    if fusion.rule == "rrf":
        rank_d, rank_l = _ranks(d), _ranks(lex)
        return np.where(rank_d <= depth, 1.0 / (fusion.c + rank_d), 0.0) + np.where(
            (lex > 0) & (rank_l <= depth), 1.0 / (fusion.c + rank_l), 0.0
        )
    if fusion.rule == "adaptive":
        raise QueryError(
            "fuse the adaptive rule with its weight: fuse(d, l, Fusion('convex', weight=dense_weight(...)))"
        )
    low = float(np.partition(d, m - depth)[m - depth]) if m else 0.0  # the depth-th best model score
    span = d.max() - low if m else 0.0
    dn = np.clip((d - low) / span, 0.0, 1.0) if span > 0 else np.zeros_like(d)
    top = lex.max() if len(lex) else 0.0
    ln = lex / top if top > 0 else np.zeros_like(lex)
    return fusion.weight * dn + (1.0 - fusion.weight) * ln


def sorted_union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``numpy.union1d(a, b)`` (the sorted distinct values of both), without its fixed cost:
    a search calls it per question on a few hundred rows.

    Example
    -------
    >>> sorted_union(np.array([5, 1, 5]), np.array([3, 1])).tolist()
    [1, 3, 5]
    """
    both = np.concatenate([np.ravel(a), np.ravel(b)])
    both.sort()
    if len(both) < 2:
        return both
    keep = np.empty(len(both), dtype=bool)
    keep[0] = True
    np.not_equal(both[1:], both[:-1], out=keep[1:])
    return both[keep]


def _scores_of_rows(
    lexical: Any, terms: np.ndarray, rows: np.ndarray, known: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """BM25 scores of ``rows``, those of the sorted ``known[0]`` taken from ``known[1]`` (its
    scores, already computed) and only the others scored: the same float32 numbers."""
    seen, seen_scores = known
    out = np.empty(len(rows), np.float32)
    inside = np.zeros(len(rows), bool)
    if len(seen):
        at = np.minimum(np.searchsorted(seen, rows), len(seen) - 1)
        inside = seen[at] == rows
        out[inside] = seen_scores[at[inside]]
    out[~inside] = lexical.scores_of_rows(terms, rows[~inside])
    return out


def union_candidates(dense_rows: np.ndarray, lexical_rows: list[np.ndarray]) -> np.ndarray:
    """Per question, the sorted union of its dense rows (``-1``: none) and lexical rows,
    padded with ``-1`` to one width: int64 (n, width)."""
    unions = [sorted_union(d[d >= 0], lx) for d, lx in zip(dense_rows, lexical_rows, strict=True)]
    width = max((len(u) for u in unions), default=0)
    out = np.full((len(unions), width), -1, dtype=np.int64)
    for i, u in enumerate(unions):
        out[i, : len(u)] = u
    return out


def dense_ratio(
    model: Any, vectors: np.ndarray, lexical: LexicalIndex, answer: Callable[[int], str]
) -> dict[str, Any] | None:
    """The corpus's label-free dense/BM25 ratio (the ``adaptive`` rule's ``rho``), or None.

    A fixed-seed sample of at most :data:`RATIO_POOL` answers is the pool; from
    :data:`RATIO_QUESTIONS` of them (those with more than :data:`RATIO_WORDS` words of two
    or more characters, English stopwords left out) a pseudo-question is cut: :data:`RATIO_WORDS`
    of its words, in order (words of its first :data:`RATIO_TEXT_CHARS` characters). Each
    pseudo-question is searched in the pool by the model
    (exact scores) and by BM25 (the pool's own statistics); the reciprocal rank of its
    source answer (ties count against it) is averaged per ranker, and::

        rho = MRR(model) / MRR(BM25)

    None when fewer than :data:`RATIO_MIN_QUESTIONS` pseudo-questions can be cut. The
    sample depends only on the number of answers and their texts, so an index changed by
    ``add``/``remove`` gets the ratio of a fresh build of the same answers.

    Returns
    -------
    dict or None
        ``{"ratio", "dense_mrr", "bm25_mrr", "questions", "pool"}``.
    """
    n = len(lexical)
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(n, size=min(RATIO_POOL, n), replace=False)) if n > RATIO_POOL else np.arange(n)
    questions: list[str] = []
    source: list[int] = []
    for i in rng.permutation(len(rows)).tolist():
        words = [w for w in _WORD.findall(answer(int(rows[i]))[:RATIO_TEXT_CHARS]) if w.lower() not in STOPWORDS_EN]
        if len(words) <= RATIO_WORDS:
            continue
        pick = np.sort(rng.choice(len(words), size=RATIO_WORDS, replace=False))
        questions.append(" ".join(words[j] for j in pick))
        source.append(i)
        if len(questions) == RATIO_QUESTIONS:
            break
    if len(questions) < RATIO_MIN_QUESTIONS:
        return None
    pool = lexical.kept(rows)
    pool_vectors = np.ascontiguousarray(np.asarray(vectors[rows]), dtype=np.float32)  # the sample's rows only
    qv = np.ascontiguousarray(model.encode(questions, role="question"), dtype=np.float32)
    src = np.asarray(source)
    dense_rr = np.empty(len(questions))
    chunk = max(1, (1 << 21) // max(1, pool_vectors.size))  # about 8 MB of gathered vectors at a time
    for start in range(0, len(questions), chunk):
        q = qv[start : start + chunk]
        scores, _ = model.score_checked(q, np.broadcast_to(pool_vectors, (len(q), *pool_vectors.shape)))
        own = scores[np.arange(len(q)), src[start : start + chunk]]
        dense_rr[start : start + chunk] = 1.0 / (1.0 + (scores >= own[:, None]).sum(axis=1) - 1)
    bm25_rr = np.empty(len(questions))
    for j, question in enumerate(questions):
        scores = pool.scores(question)
        bm25_rr[j] = 1.0 / ((scores >= scores[src[j]]).sum())
    dense_mrr, bm25_mrr = float(dense_rr.mean()), float(bm25_rr.mean())
    return {
        "ratio": round(dense_mrr / bm25_mrr, 6),
        "dense_mrr": round(dense_mrr, 6),
        "bm25_mrr": round(bm25_mrr, 6),
        "questions": len(questions),
        "pool": len(rows),
    }


def with_dense_ratio(
    model: Any, vectors: np.ndarray, lexical: LexicalIndex, answer: Callable[[int], str], previous: Any = None
) -> LexicalIndex:
    """``lexical`` with its :func:`dense_ratio` (what a Ranker stores after a build, ``add`` or
    ``remove``).

    ``previous``: the ratio information of the index before an ``add``/``remove``; it is kept
    while the number of answers stays within :data:`RATIO_REMEASURE` of the number it was
    measured on (a one-answer ``add`` costs no new measurement), and measured again beyond.
    """
    if isinstance(previous, Mapping) and "answers" in previous:
        measured_on = int(previous["answers"])
        if abs(len(lexical) - measured_on) <= RATIO_REMEASURE * measured_on:
            return lexical.with_ratio(previous)
    info = dense_ratio(model, vectors, lexical, answer)
    return lexical.with_ratio(None if info is None else {**info, "answers": len(lexical)})


def hybrid_arrays(
    model: Any,
    vectors: np.ndarray | RowSource,
    lexical: Any,
    questions: list[str],
    qv: np.ndarray,
    dense_rows: np.ndarray,
    k: int,
    fusion: Fusion = DEFAULT_FUSION,
    allowed: np.ndarray | None = None,
    *,
    scan: bool | None = None,
    explain: list[list[Explanation]] | None = None,
    memory_budget: int | None = None,
    keys: list[Evidence] | None = None,
    matched_out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
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
        The dense stage's candidates (``-1``: none); a BM25 scan adds its ``m`` best.
    k : int
    fusion : Fusion
    allowed : bool array (N,), optional
        Rows a filter lets through: BM25 adds only its best allowed rows (``dense_rows``
        must hold allowed rows only).
    scan : bool, keyword-only, optional
        True: BM25 scores every answer and adds its ``m`` best to the candidates. False (no
        scan; the cost does not grow with ``N``): BM25 adds its ``m`` best among the answers
        of the ``m`` highest-weighted postings of each question term
        (:meth:`~qaindex.lexical.LexicalIndex.impact_rows`), and scores only the candidates
        (:meth:`~qaindex.lexical.LexicalIndex.scores_of_rows`, equal to the full scores
        there). None (default): scan up to :data:`LEXICAL_SCAN_LIMIT` answers.
    explain : list, keyword-only, optional
        A list that gets, per question, the :class:`~qaindex.search.hits.Explanation` of each
        hit (ranks among the candidates, matched terms, fused value).
    memory_budget : int, keyword-only, optional
        The request's budget (:mod:`qaindex.search.budget`): candidate vectors are gathered
        for the scorer in column blocks of a quarter of it (default: the default budget).
    keys : list, keyword-only, optional
        Per question, what its stored questions add (:func:`qaindex.search.keys.key_evidence`:
        rows, their best key's model score and distance, whether a key holds exactly the
        question's terms). Those rows join the candidates, one per record: a record's model
        score is the best of its answer's and its keys' (the key's distance with it), and a
        record whose key holds the question's terms gets the best BM25 score among the
        candidates (a stored question typed again is as strong a lexical match as any). A
        key's looser BM25 match adds nothing: short stored questions share words with many
        paraphrases of other questions.
    matched_out : int8 array (n, k), keyword-only, optional
        Gets each hit's key (:data:`qaindex.search.hits.MATCHED` code: 1 where a stored
        question's score is the record's).

    Returns
    -------
    scores, distances, rows : (n, k) arrays
        The model's scores and distances of the hits (not the fused values), in fused order;
        ``-inf``, ``inf``, ``-1`` where missing.
    probabilities : (n, k) array
        The hits' ``score`` (:func:`hybrid_scores`: non-increasing along each row; 0 where
        missing). The model's calibration of a candidate's score is relative to the best
        model score among all the candidates, not among the hits, so it does not depend on ``k``.
    """
    n, m = dense_rows.shape
    if scan is None:
        scan = len(lexical) <= LEXICAL_SCAN_LIMIT
    queries = [lexical.query(q) for q in questions]
    ratio = lexical.ratio
    if scan:
        lex_scores = [lexical.scores_of_terms(terms) for terms, _ in queries]
        if allowed is None:
            lex_rows = [top_rows(scores, m) for scores in lex_scores]
        else:  # the best allowed rows: others ranked last, then dropped
            ranked = [top_rows(np.where(allowed, scores, -np.inf), m) for scores in lex_scores]
            lex_rows = [r[allowed[r]] for r in ranked]
    else:
        lex_rows, known = [], []
        for terms, _ in queries:
            extra = lexical.impact_rows(terms, m)
            if allowed is not None:
                extra = extra[allowed[extra]]
            known.append((extra, lexical.scores_of_rows(terms, extra)))
            lex_rows.append(extra[top_rows(known[-1][1], m)])
    if keys is not None:  # the records the stored questions vouch for join the candidates
        lex_rows = [sorted_union(extra, found[0]) for extra, found in zip(lex_rows, keys, strict=True)]
    cand = union_candidates(dense_rows, lex_rows)
    valid = cand >= 0
    safe = np.where(valid, cand, 0)
    score, dist = model.score_rows(qv, vectors, safe, budget.scorer_bytes(memory_budget))
    top_s = np.full((n, k), -np.inf, np.float32)
    top_d = np.full((n, k), np.inf, np.float32)
    top_r = np.full((n, k), -1, np.int64)
    top_p = np.zeros((n, k), np.float64)
    for i in range(n):
        rows = cand[i, valid[i]]
        terms, length = queries[i]
        lex = lex_scores[i][rows] if scan else _scores_of_rows(lexical, terms, rows, known[i])
        found = fuse_candidates(
            model,
            lexical,
            fusion,
            ratio,
            (terms, length),
            (rows, score[i, valid[i]], dist[i, valid[i]], lex),
            k,
            keys=None if keys is None else keys[i],
            explain=explain,
        )
        w = len(found[2])
        top_s[i, :w], top_d[i, :w], top_r[i, :w], top_p[i, :w] = found[:4]
        if matched_out is not None:
            matched_out[i, :w] = found[4]
    return top_s, top_d, top_r, top_p


def fuse_candidates(
    model: Any,
    lexical: Any,
    fusion: Fusion,
    ratio: float | None,
    query: tuple[np.ndarray, int],
    candidates: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    k: int,
    *,
    keys: Evidence | None = None,
    explain: list[list[Explanation]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One question's ``k`` best candidates by the fused score (:func:`hybrid_arrays`' ranking,
    also a sharded index's over the candidates of all its shards).

    ``query``: the question's BM25 ``(terms, length)`` (:meth:`~qaindex.text.lexical.LexicalIndex.query`);
    ``candidates``: its candidates' rows (sorted), model scores, distances and BM25 scores;
    ``lexical`` gives the question's coverage, score bound and matched terms
    (``coverage``, ``score_bound``, ``matched_terms``); ``keys``: the question's
    :func:`qaindex.search.keys.key_evidence`. Returns the hits' model scores, distances,
    rows, ``score`` (:func:`hybrid_scores`) and key codes, in fused order; appends the hits'
    explanations to ``explain``.
    """
    terms, length = query
    rows, s, d, lex = candidates
    rule = fusion
    cov = question_coverage(fusion, lexical, terms, length, rows, lex)
    if fusion.rule == "adaptive":
        rule = Fusion("convex", weight=dense_weight(fusion, ratio, length, cov))
    codes = np.zeros(len(rows), np.int8)
    top = _question_top(s, keys)
    if keys is not None and len(keys[0]):
        s, d, lex, codes = _with_keys(rows, s, d, lex, keys)
    fused = fuse(s, lex, rule, CANDIDATE_FLOOR)
    order = np.lexsort((rows, -s.astype(np.float64), -fused))[:k]
    if not len(order):
        if explain is not None:
            explain.append([])
        return s[order], d[order], rows[order], np.zeros(0, np.float64), codes[order]
    best = float(s.max())
    best_lex = float(lex.max())
    bound = lexical.score_bound(terms, length)
    match = best_lex / bound if bound > 0 else 0.0
    probabilities = hybrid_scores(
        fusion,
        model.calibration(s[order], best),
        model.calibration(top),
        lex[order] / best_lex if best_lex > 0 else np.zeros(len(order)),
        fused[order],
        match,
        cov,
        length,
    )
    if explain is not None:
        weight = rule.weight if rule.rule == "convex" else None
        # the coverage even where this fusion does not read it: a calibration fit reads it here
        coverage = best_coverage(lexical, terms, length, rows, candidates[3])
        explain.append(_explanations(lexical, terms, rows, s, lex, fused, order, weight, (top, coverage, match)))
    return s[order], d[order], rows[order], probabilities, codes[order]


def _question_top(s: np.ndarray, keys: Evidence | None) -> float:
    """The best model score of a question's candidates' answers and stored questions: what the
    question-level ``p_top`` of :func:`hybrid_scores` reads. Passages are left out: they rank
    their records, but the best of many short windows runs higher than the best of whole
    answers for any question, off-topic ones too, and the calibration was fitted on the latter."""
    top = float(s.max()) if len(s) else -np.inf
    return top if keys is None else max(top, float(keys[5]))


def _with_keys(
    rows: np.ndarray,
    s: np.ndarray,
    d: np.ndarray,
    lex: np.ndarray,
    found: Evidence,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One question's candidates (``rows`` sorted) with the evidence of their keys
    (:func:`hybrid_arrays`' ``keys``): model scores, distances, BM25 scores and key codes."""
    key_rows, key_s, key_d, same, key_codes, _ = found
    at = np.searchsorted(rows, key_rows)
    wins = key_s > s[at]  # a key counts where it scores above the record's answer
    s, d, lex = s.copy(), d.copy(), np.asarray(lex, np.float64).copy()
    s[at[wins]], d[at[wins]] = key_s[wins], key_d[wins]
    codes = np.zeros(len(rows), np.int8)
    codes[at[wins]] = key_codes[wins]
    top = float(lex.max()) if len(lex) else 0.0
    lex[at[same]] = top if top > 0 else 1.0
    return s, d, lex, codes


def _explanations(
    lexical: Any,
    terms: np.ndarray,
    rows: np.ndarray,
    dense: np.ndarray,
    lex: np.ndarray,
    fused: np.ndarray,
    order: np.ndarray,
    weight: float | None,
    question: tuple[float, float, float],
) -> list[Explanation]:
    """The :class:`~qaindex.search.hits.Explanation` of the hits ``order`` of one question's
    candidates (``question``: the question's best model score, lexical coverage and BM25
    match, which the hybrid score reads)."""
    top, coverage, match = question
    rank_d, rank_l = _ranks(np.asarray(dense, np.float64)), _ranks(np.asarray(lex, np.float64))
    return [
        Explanation(
            dense_score=float(dense[j]),
            dense_rank=int(rank_d[j]),
            bm25_score=float(lex[j]),
            bm25_rank=int(rank_l[j]) if lex[j] > 0 else None,
            matched_terms=lexical.matched_terms(terms, int(rows[j])) if lex[j] > 0 else (),
            fused=float(fused[j]),
            dense_weight=weight,
            question_top=top,
            question_coverage=coverage,
            question_match=match,
        )
        for j in order.tolist()
    ]
