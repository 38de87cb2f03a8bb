"""Fusion of the dense and lexical (BM25) rankings: the second stage of hybrid search.

For each question the candidates are the union of the dense stage's ``k × overfetch``
best answers (the coarse index's recall) and BM25's ``k × overfetch`` best answers (at
scale, :data:`LEXICAL_SCAN_LIMIT`, BM25 scores the dense candidates only: see
:func:`hybrid_arrays`). Every candidate gets both scores exactly: the model's score (the
ONNX scorer, as in a dense search) and its BM25 score (0 when no term matches). The two are
fused by one of three rules, and the ``k`` best fused candidates are the hits (ties: higher
model score, then lower row).

- ``rrf`` (reciprocal-rank fusion, Cormack et al., 2009)::

      fused(a) = 1 / (c + rank_dense(a)) + [bm25(a) > 0] / (c + rank_bm25(a))

  ranks are 1-based within the candidate set (ties by row), and answers without a matching
  term get no lexical part;
- ``convex``: a convex combination of min-max normalised scores over the candidate set::

      fused(a) = w * (s(a) - min s) / (max s - min s) + (1 - w) * bm25(a) / max bm25

  (a constant part counts 0);
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

  ``e`` = 0 (``d`` = 1), as in manifests fitted before the question part existed, is the
  rule ``clip(a + b * rho, 0, 1) * min(1, terms / n(q))``.

The constants ``a``, ``b``, ``d``, ``e``, ``terms`` are fitted per model by ``benchmarks/hybrid.py --fit``
on held-out labelled corpora and stored in the model manifest (``"fusion"``), which
:func:`fusion_from` reads; a model without one uses :data:`DEFAULT_FUSION`.

Example
-------
>>> fuse(np.array([3.0, 2.0, 1.0]), np.array([0.0, 1.0, 5.0]), Fusion("rrf", c=60)).round(4).tolist()
[0.0164, 0.0323, 0.0323]
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import ModelFormatError, QueryError
from ..text.lexical import STOPWORDS_EN, LexicalIndex, top_rows

__all__ = [
    "DEFAULT_FUSION",
    "FUSION_RULES",
    "LEXICAL_SCAN_LIMIT",
    "Fusion",
    "best_coverage",
    "dense_ratio",
    "dense_weight",
    "fuse",
    "fusion_from",
    "hybrid_probability",
    "question_coverage",
    "union_candidates",
    "with_dense_ratio",
]

FUSION_RULES = ("rrf", "convex", "adaptive")
# answers beyond which BM25 scores only the dense candidates (no full scan; benchmarks/hybrid.py)
LEXICAL_SCAN_LIMIT = 50_000
# the label-free dense/BM25 ratio: pseudo-questions of RATIO_WORDS words cut from RATIO_QUESTIONS
# answers of a sample of at most RATIO_POOL answers (fixed, so the ratio does not depend on N)
RATIO_POOL = 2000
RATIO_QUESTIONS = 200
RATIO_WORDS = 3
RATIO_MIN_QUESTIONS = 20
RATIO_REMEASURE = 0.1  # add/remove measure the ratio again once the corpus changed by this share
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
        The calibration of hybrid hits' ``score`` (:func:`hybrid_probability`): bias and the
        weights of the model's calibrated logit, the normalised BM25 score, the fused value
        and (optional) the question's BM25 match. None: hits keep the model's calibrated
        probability.
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

    def __post_init__(self) -> None:
        if self.rule not in FUSION_RULES:
            raise QueryError(f"fusion rule must be one of {', '.join(FUSION_RULES)}; got {self.rule!r}")
        if not (isinstance(self.c, int | float) and math.isfinite(self.c) and self.c >= 0):
            raise QueryError(f"the rrf constant c must be a non-negative number, got {self.c!r}")
        if not (isinstance(self.weight, int | float) and 0.0 <= self.weight <= 1.0):
            raise QueryError(f"the convex weight must be a number in [0, 1], got {self.weight!r}")
        for name in ("a", "b", "d", "e"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int | float) and math.isfinite(value)):
                raise QueryError(f"the adaptive constant {name} must be a finite number, got {value!r}")
        if isinstance(self.terms, bool) or not (isinstance(self.terms, int | float) and self.terms > 0):
            raise QueryError(f"the adaptive constant terms must be a positive number (or inf), got {self.terms!r}")
        if self.score is not None and (
            not isinstance(self.score, tuple)
            or len(self.score) not in (4, 5)
            or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in self.score)
        ):
            raise QueryError(f"the hybrid score calibration must be 4 or 5 finite numbers, got {self.score!r}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "c": self.c, "weight": self.weight}
        if self.rule == "adaptive":
            out.update(a=self.a, b=self.b, terms=None if math.isinf(self.terms) else self.terms, d=self.d, e=self.e)
        if self.score is not None:
            out["score"] = dict(zip((*SCORE_FIELDS, MATCH_FIELD), self.score, strict=False))
        return out


# the fallback of models whose manifest has no "fusion" (benchmarks/hybrid.py --fit writes one);
# fitted for the built-in default model (see docs/hybrid.md)
DEFAULT_FUSION = Fusion("adaptive", weight=0.5, a=0.0, b=2.0, terms=10.0, d=1.25, e=1.5)
FIELDS = ("rule", "c", "weight", "a", "b", "terms", "d", "e", "score")
SCORE_FIELDS = ("bias", "dense", "bm25", "fused")


def _from_mapping(value: Mapping[str, Any]) -> Fusion:
    unknown = set(value) - set(FIELDS)
    if unknown:
        raise QueryError(f"unknown fusion field(s) {sorted(unknown)}; use {', '.join(FIELDS)}")
    fields = dict(value)
    if fields.get("terms", 0) is None:  # JSON has no inf
        fields["terms"] = math.inf
    score = fields.get("score")
    if isinstance(score, Mapping):
        if set(score) - {MATCH_FIELD} != set(SCORE_FIELDS):
            raise QueryError(
                f"the hybrid score calibration needs exactly {', '.join(SCORE_FIELDS)} (and optionally "
                f"{MATCH_FIELD}), got {sorted(score)}"
            )
        fields["score"] = tuple(score[k] for k in SCORE_FIELDS) + (
            (score[MATCH_FIELD],) if MATCH_FIELD in score else ()
        )
    elif isinstance(score, list):
        fields["score"] = tuple(score)
    base = DEFAULT_FUSION if fields.get("rule", DEFAULT_FUSION.rule) == DEFAULT_FUSION.rule else Fusion()
    return replace(base, **fields)


def fusion_from(value: Any, model: Any = None) -> Fusion:
    """A :class:`Fusion` from a Fusion, ``None`` (the default) or a mapping of its fields.

    ``None`` gives the model's fitted fusion (its manifest's ``"fusion"``) when ``model`` has
    one, else :data:`DEFAULT_FUSION`; a mapping's missing fields come from the default (a
    stored ``adaptive`` fusion without ``e``, fitted before the question part existed, keeps
    its rule: ``e`` = 0).

    Example
    -------
    >>> fusion_from({"rule": "rrf", "c": 10}).c
    10
    """
    if value is None:
        stored = None if model is None else getattr(model, "manifest", {}).get("fusion")
        if stored is None:
            return DEFAULT_FUSION
        try:
            fields = {k: v for k, v in stored.items() if k in FIELDS}
            if fields.get("rule", DEFAULT_FUSION.rule) == "adaptive" and "e" not in fields:
                fields.update(d=1.0, e=0.0)  # fitted before the question part: the rule without it
            return _from_mapping(fields)
        except (QueryError, TypeError, AttributeError) as exc:
            raise ModelFormatError(
                f'{model.directory / "manifest.json"}: field "fusion" is invalid ({exc}); refit it with '
                "`python -m benchmarks.hybrid --fit` or remove the field"
            ) from None
    if isinstance(value, Fusion):
        return value
    if isinstance(value, Mapping):
        return _from_mapping(value)
    raise QueryError(f"fusion must be a Fusion, a mapping or None, got {type(value).__name__}")


MATCH_FIELD = "match"  # the optional fifth weight of Fusion.score (models fitted before it have four)


def hybrid_probability(fusion: Fusion, dense_probability: Any, bm25: Any, fused: Any, match: Any = 0.0) -> np.ndarray:
    """The calibrated ``score`` of hybrid hits, from what a fused search knows of each hit::

        p = sigmoid(bias + w_d * logit(p_dense) + w_l * bm25 + w_f * fused + w_m * match)

    ``p_dense`` is the model's calibrated probability, ``bm25`` the hit's BM25 score over the
    best among the candidates, ``fused`` its fused value, ``match`` the best candidate's
    BM25 score over the question's bound
    (:meth:`~qaindex.text.lexical.LexicalIndex.score_bound`: how much of the question's term
    evidence the corpus matches at all; one value per question, so it changes no order within
    a search, and low for questions the corpus does not answer). ``w_m`` is 0 for a 4-weight
    ``fusion.score``. Without ``fusion.score`` the model's probability is returned unchanged.

    Example
    -------
    >>> rule = Fusion("adaptive", score=(0.0, 1.0, 0.0, 0.0))
    >>> hybrid_probability(rule, np.array([0.25]), np.array([1.0]), np.array([0.5])).round(6).tolist()
    [0.25]
    """
    p = np.asarray(dense_probability, dtype=np.float64)
    if fusion.score is None:
        return p
    bias, w_dense, w_bm25, w_fused = fusion.score[:4]
    w_match = fusion.score[4] if len(fusion.score) > 4 else 0.0
    clipped = np.clip(p, 1e-6, 1.0 - 1e-6)
    z = bias + w_dense * np.log(clipped / (1.0 - clipped)) + w_bm25 * np.asarray(bm25) + w_fused * np.asarray(fused)
    z = z + w_match * np.asarray(match, dtype=np.float64)
    return np.asarray(1.0 / (1.0 + np.exp(-z)))


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
    """The lexical coverage the ``adaptive`` rule needs for one question: that of its best
    BM25 candidate (ties: the first of ``rows``), 0 when no candidate matches a term or
    the rule does not use it.

    Example
    -------
    >>> from qaindex.text.lexical import LexicalIndex
    >>> lex = LexicalIndex.from_texts(["cats purr", "dogs bark", "cats and dogs"])
    >>> terms, length = lex.query("cats and dogs")
    >>> rows = np.array([0, 2])
    >>> question_coverage(Fusion("adaptive", e=1.0), lex, terms, length, rows, lex.scores_of_rows(terms, rows))
    1.0
    """
    if fusion.rule != "adaptive" or fusion.e == 0:
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
    if fusion.rule == "adaptive":
        raise QueryError(
            "fuse the adaptive rule with its weight: fuse(d, l, Fusion('convex', weight=dense_weight(...)))"
        )
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


def dense_ratio(
    model: Any, vectors: np.ndarray, lexical: LexicalIndex, answer: Callable[[int], str]
) -> dict[str, Any] | None:
    """The corpus's label-free dense/BM25 ratio (the ``adaptive`` rule's ``rho``), or None.

    A fixed-seed sample of at most :data:`RATIO_POOL` answers is the pool; from
    :data:`RATIO_QUESTIONS` of them (those with more than :data:`RATIO_WORDS` words of two
    or more characters, English stopwords left out) a pseudo-question is cut: :data:`RATIO_WORDS`
    of its words, in order. Each pseudo-question is searched in the pool by the model
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
        words = [w for w in _WORD.findall(answer(int(rows[i]))) if w.lower() not in STOPWORDS_EN]
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
    pool_vectors = np.ascontiguousarray(np.asarray(vectors)[rows], dtype=np.float32)
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
    vectors: np.ndarray,
    lexical: Any,
    questions: list[str],
    qv: np.ndarray,
    dense_rows: np.ndarray,
    k: int,
    fusion: Fusion = DEFAULT_FUSION,
    allowed: np.ndarray | None = None,
    *,
    scan: bool | None = None,
    dense_best: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
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
    dense_best : array (n,), keyword-only, optional
        Model scores of hits found elsewhere (a record's stored questions,
        :mod:`qaindex.search.keys`): the calibration's best of the hits is at least this.

    Returns
    -------
    scores, distances, rows : (n, k) arrays
        The model's scores and distances of the hits (not the fused values), in fused order;
        ``-inf``, ``inf``, ``-1`` where missing.
    probabilities : (n, k) array or None
        The hits' calibrated ``score`` (:func:`hybrid_probability`; 0 where missing), or None
        when ``fusion`` has no score calibration (hits keep the model's).
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
        cand = union_candidates(dense_rows, lex_rows)
    else:
        lex_rows = []
        for terms, _ in queries:
            extra = lexical.impact_rows(terms, m)
            if allowed is not None:
                extra = extra[allowed[extra]]
            lex_rows.append(extra[top_rows(lexical.scores_of_rows(terms, extra), m)])
        cand = union_candidates(dense_rows, lex_rows)
    width = cand.shape[1]
    valid = cand >= 0
    safe = np.where(valid, cand, 0)
    gathered = np.asarray(np.asarray(vectors)[safe.ravel()], dtype=np.float32).reshape(n, width, -1)
    score, dist = model.score_checked(np.ascontiguousarray(qv, dtype=np.float32), gathered)
    top_s = np.full((n, k), -np.inf, np.float32)
    top_d = np.full((n, k), np.inf, np.float32)
    top_r = np.full((n, k), -1, np.int64)
    top_p = None if fusion.score is None else np.zeros((n, k), np.float64)
    for i in range(n):
        rows = cand[i, valid[i]]
        s, d = score[i, valid[i]], dist[i, valid[i]]
        terms, length = queries[i]
        lex = lex_scores[i][rows] if scan else lexical.scores_of_rows(terms, rows)
        rule = fusion
        if fusion.rule == "adaptive":
            cov = question_coverage(fusion, lexical, terms, length, rows, lex)
            rule = Fusion("convex", weight=dense_weight(fusion, ratio, length, cov))
        fused = fuse(s, lex, rule)
        order = np.lexsort((rows, -s.astype(np.float64), -fused))[:k]
        top_s[i, : len(order)] = s[order]
        top_d[i, : len(order)] = d[order]
        top_r[i, : len(order)] = rows[order]
        if top_p is not None and len(order):
            best = float(s[order].max()) if dense_best is None else max(float(s[order].max()), float(dense_best[i]))
            dense_p = model.calibration(s[order], best)  # as Ranker.hits: best of the hits
            best_lex = float(lex.max())
            bound = lexical.score_bound(terms, length)
            top_p[i, : len(order)] = hybrid_probability(
                fusion, dense_p, lex[order] / best_lex if best_lex > 0 else np.zeros(len(order)), fused[order],
                best_lex / bound if bound > 0 else 0.0,
            )  # fmt: skip
    return top_s, top_d, top_r, top_p
