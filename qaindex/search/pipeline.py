"""The query pipeline behind :class:`~qaindex.Ranker`'s searches: coarse recall, exact scoring,
filters, fusion with BM25 and the reranking stage, each within the request's memory budget.

``question → encoder → coarse rows (FAISS, or every row) → exact scores → where / fusion →
reranker → hits``. The functions read an :class:`~qaindex.search.state.IndexState` (the
records, vectors, coarse and lexical indexes the Ranker hands down under its read lock, its
coarse index up to date) and run a :class:`~qaindex.search.plan.SearchPlan` (the arguments the
Ranker checked); they check nothing again and never call back into the Ranker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..store.index_checks import stored_vectors_error
from . import budget, exact, filters, keys
from .fusion import CANDIDATE_FLOOR, Fusion, hybrid_arrays
from .hits import Explanation, Hit, cut, dense_explanations, hit_bytes, make_hits

if TYPE_CHECKING:
    from .filters import Filter
    from .plan import SearchPlan
    from .state import IndexState

__all__ = ["candidate_rows", "candidates", "filtered_vectors", "pool_size", "search_batch", "search_vectors"]

_QUERY_CHUNK = 256
Found = tuple[np.ndarray, np.ndarray, np.ndarray]  # scores, distances, rows of one question


def pool_size(k: int, overfetch: int, total: int) -> int:
    """The candidates a search of ``k`` hits scores exactly: ``min(total, max(k * overfetch,
    CANDIDATE_FLOOR))``. The floor keeps the pool of a small ``k`` as wide as that of the
    default one, so the first hits do not depend on ``k`` (a pool never shrinks as ``k`` falls).

    Example
    -------
    >>> pool_size(1, 10, 10_000), pool_size(50, 10, 10_000), pool_size(50, 10, 30)
    (100, 500, 30)
    """
    return min(total, max(k * overfetch, CANDIDATE_FLOOR))


def search_batch(state: IndexState, qs: list[str], plan: SearchPlan) -> list[list[Hit]]:
    """:meth:`~qaindex.Ranker.search_batch`: one list of hits per (checked) question, as ``plan``
    says (each with its :class:`~qaindex.search.hits.Explanation` when ``plan.explain``)."""
    stage, flt, fused, explain = plan.stage, plan.where, plan.fusion, plan.explain
    k, min_score = (plan.k, plan.min_score) if stage is None else (stage.depth, None)
    if not qs:
        return []
    total = len(state.records)
    k = min(k, total)
    records = state.records
    limit = budget.request_budget(state.memory_budget)
    budget.check_result(
        len(qs) * k * hit_bytes(records),
        limit,
        f"a search of {len(qs):,} question(s) for {k:,} hits each",
        "ask fewer questions per call or a smaller k (or rerank depth)",
    )
    qv = state.model.encode(qs, role="question")

    def hits(
        scores: np.ndarray,
        distances: np.ndarray,
        rows: np.ndarray,
        probabilities: np.ndarray | None = None,
        matched: np.ndarray | None = None,
        why: list[list[Explanation]] | None = None,
    ) -> list[list[Hit]]:
        if explain and why is None:
            why = dense_explanations(scores, rows)
        return make_hits(
            records,
            state.calibration,
            scores,
            distances,
            rows,
            state.memory_budget,
            probabilities,
            why,
            matched,
        )

    def first_stage(pick: list[int], width: int) -> list[list[Hit]]:
        if fused is None:
            exact = keys.key_scores(state, qv[pick])  # the stored questions' scores (qaindex.search.keys)
            s, d, r, _, matched = keys.with_keys(state, (*search_vectors(state, qv[pick], width), None), exact)
            return hits(s, d, r, None, matched)
        m = pool_size(width, state.overfetch, total)
        # questions in chunks whose candidates (dense + BM25, scores, sort keys) fit the budget
        step = budget.chunk((2 * m * budget.CANDIDATE_BYTES + total * 4), limit, max(1, len(pick)))
        chunked: list[list[Hit]] = []
        for start in range(0, len(pick), step):
            part = pick[start : start + step]
            exact = keys.key_scores(state, qv[part])
            rows = candidate_rows(state, qv[part], m)
            s, d, r, p, matched, why = _fused_arrays(
                state, [qs[i] for i in part], qv[part], rows, width, fused, exact, explain, memory_budget=limit
            )
            chunked.extend(hits(s, d, r, p, matched, why))
        return chunked

    if flt is None:
        first = [cut(row, k, min_score) for row in first_stage(list(range(len(qs))), k)]
        return stage.apply(qs, first) if stage is not None else first
    out: list[list[Hit]]
    if fused is None:
        # the plan qaindex.search.filters chooses: exact among the matches, post-filter, ...
        found = filtered_vectors(state, qv, k, flt)
        allowed = keys.allowed_records(state, flt) if state.keys is not None else None
        every = keys.key_scores(state, qv, allowed)  # the stored questions' scores, all questions at once
        out = []
        for i, (s, d, r) in enumerate(found):  # each merged with its stored questions' hits (qaindex.search.keys)
            exact = None if every is None else (every[0], every[1][i : i + 1], every[2][i : i + 1])
            merged = keys.with_keys(state, (s[None], d[None], r[None], None), exact)
            out.append(cut(hits(*merged)[0], k, min_score))
    else:
        rows = filters.matching_rows(records, flt) if flt.predicate is None else None
        if rows is not None and len(rows) <= filters.prefilter_limit(k, state.overfetch, total):
            out = _fused_among(state, qs, qv, rows, k, fused, min_score, explain)
        else:  # a fused search widens its first stage until each question has k matching hits
            out = [[] for _ in qs]
            pending = list(range(len(qs)))
            width = min(total, 4 * k)
            while pending:
                still = []
                for i, row_hits in zip(pending, first_stage(pending, width), strict=True):
                    kept = cut([h for h in row_hits if flt.matches(records.get(h.row))], k, min_score)
                    out[i] = kept
                    # scores fall with rank: past a hit below min_score, every hit is below it
                    below = min_score is not None and bool(row_hits) and row_hits[-1].score < min_score
                    if len(kept) < k and width < total and not below:
                        still.append(i)
                pending = still
                width = min(total, width * 4)
    return stage.apply(qs, out) if stage is not None else out


def filtered_vectors(state: IndexState, queries: np.ndarray, k: int, flt: Filter) -> list[Found]:
    """A dense search among the answers that pass ``flt``: the
    :class:`~qaindex.search.filters.FilterPlan` that :func:`qaindex.search.filters.plan`
    chooses, run here (whole index, exact among the matches, post-filter or a predicate's
    widening coarse stage; a question whose coarse candidates hold too few matches has every
    match scored).

    Parameters
    ----------
    state : IndexState
    queries : array (n, dimension)
        Question vectors, checked.
    k : int
        Hits per question (at most ``len(state)``).
    flt : Filter

    Returns
    -------
    list of (scores, distances, rows)
        One triple of 1-D arrays per question, best first, at most ``k`` long.
    """
    store = state.records
    how = filters.plan(store, k, flt, overfetch=state.overfetch, dimension=queries.shape[1])
    if how.kind == "whole":
        s, d, r = search_vectors(state, queries, how.candidates)
        out = []
        for i in range(len(queries)):
            valid = [j for j, row in enumerate(r[i].tolist()) if row >= 0]
            keep = [j for j, ok in zip(valid, filters.passes(store, flt, r[i, valid]), strict=True) if ok][:k]
            out.append((s[i, keep], d[i, keep], r[i, keep]))
        return out
    if how.kind == "none":
        empty = (np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))
        return [empty for _ in range(len(queries))]
    if how.kind == "exact":
        assert how.rows is not None
        state.check_rows(how.rows)
        es, ed, er = exact.screened_among(
            queries, state.vectors, how.rows, k, state.model.score_checked, state.model.space
        )
        return [(es[i], ed[i], er[i]) for i in range(len(queries))]
    found: list[Found | None]
    if how.kind == "post":
        found = _post_filter(state, queries, k, flt, how.rows, how.candidates)
    else:
        found = [_predicate_search(state, q[None], k, flt, how.candidates) for q in queries]
    short = [i for i, f in enumerate(found) if f is None]
    if short:  # the matching answers are not among the question's neighbours: score them all
        rows = filters.matching_rows(store, flt) if how.rows is None else how.rows
        state.check_rows(rows)
        es, ed, er = exact.screened_among(
            queries[short], state.vectors, rows, k, state.model.score_checked, state.model.space
        )
        for j, i in enumerate(short):
            found[i] = (es[j], ed[j], er[j])
    return [f for f in found if f is not None]


def _predicate_search(state: IndexState, query: np.ndarray, k: int, flt: Filter, m: int) -> Found | None:
    """Post-filter for a predicate (selectivity unknown): the coarse stage widened
    (:func:`qaindex.search.filters.widen`) until about ``k * overfetch`` candidates match (the
    rerank margin of an unfiltered search); None when that would recall over half the answers."""
    store, total, want = state.records, len(state.records), k * state.overfetch
    while True:
        recalled = candidate_rows(state, query, m)[0]
        recalled = recalled[recalled >= 0]
        keep = recalled[filters.passes(store, flt, recalled)]
        if len(keep) >= want or m >= total:
            state.check_rows(keep)
            es, ed, er = exact.exact_among(query, state.vectors, keep, k, state.model.score_checked)
            return es[0], ed[0], er[0]
        wider = filters.widen(m, len(keep), want, total)
        if wider is None:
            return None
        m = wider


def _post_filter(
    state: IndexState, queries: np.ndarray, k: int, flt: Filter, rows: np.ndarray | None, m: int
) -> list[Found | None]:
    """The coarse stage's ``m`` candidates, the matching ones scored exactly; None for a
    question with fewer than ``k`` matching candidates (unless they are all the answers)."""
    store = state.records
    mask = None
    if rows is not None:
        mask = np.zeros(len(store), bool)
        mask[rows] = True
    cand = candidate_rows(state, queries, m)
    out: list[Found | None] = []
    for i in range(len(queries)):
        recalled = cand[i][cand[i] >= 0]
        keep = recalled[filters.passes(store, flt, recalled, mask)]
        if len(keep) < k and m < len(store):
            out.append(None)
            continue
        state.check_rows(keep)
        es, ed, er = exact.exact_among(queries[i : i + 1], state.vectors, keep, k, state.model.score_checked)
        out.append((es[0], ed[0], er[0]))
    return out


def _fused_among(
    state: IndexState,
    qs: list[str],
    qv: np.ndarray,
    rows: np.ndarray,
    k: int,
    fused: Fusion,
    min_score: float | None,
    explain: bool = False,
) -> list[list[Hit]]:
    """Hybrid search among ``rows`` (a filter's few matches): every one scored exactly and by
    BM25, then fused, as an unfiltered hybrid search ranks its candidates."""
    if len(rows) == 0:
        return [[] for _ in qs]
    allowed = np.zeros(len(state.records), dtype=bool)
    allowed[rows] = True
    dense = np.ascontiguousarray(np.broadcast_to(rows, (len(qs), len(rows))))
    exact = keys.key_scores(state, qv, allowed)  # the stored questions' scores (qaindex.search.keys)
    s, d, r, p, matched, why = _fused_arrays(
        state,
        qs,
        qv,
        dense,
        k,
        fused,
        exact,
        explain,
        allowed,
        memory_budget=budget.request_budget(state.memory_budget),
    )
    found = make_hits(state.records, state.calibration, s, d, r, state.memory_budget, p, why, matched)
    return [cut(row, k, min_score) for row in found]


def _fused_arrays(
    state: IndexState,
    qs: list[str],
    qv: np.ndarray,
    rows: np.ndarray,
    k: int,
    fused: Fusion,
    exact: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    explain: bool,
    allowed: np.ndarray | None = None,
    *,
    memory_budget: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[list[Explanation]] | None]:
    """A hybrid search's hits among the answers' candidate ``rows`` and the records the
    stored questions vouch for (:func:`qaindex.search.keys.key_evidence`), fused as one list
    of records, with their key codes and, when ``explain``, their explanations."""
    why: list[list[Explanation]] | None = [] if explain else None
    evidence = None if exact is None else keys.key_evidence(state, qs, exact, k)
    matched = np.zeros((len(qs), k), np.int8)
    arrays = hybrid_arrays(
        state.model,
        state.row_reader(),  # the rows it gathers are verified first
        state.lexical,
        qs,
        qv,
        rows,
        k,
        fused,
        allowed=allowed,
        explain=why,
        keys=evidence,
        matched_out=matched,
        memory_budget=memory_budget,
    )
    if np.isnan(arrays[0]).any():  # queries are checked: a damaged vectors.npy loaded with verify=False
        raise stored_vectors_error(state.vectors_source, arrays[2][np.isnan(arrays[0])])
    return (*arrays, matched, why)


def search_vectors(
    state: IndexState, queries: np.ndarray, k: int, *, use_coarse: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:meth:`~qaindex.Ranker.search_vectors`: search with question vectors, in query chunks.

    Parameters
    ----------
    state : IndexState
    queries : array (n, dimension)
        Question vectors (from ``model.encode(..., role="question")``), checked by the Ranker
        (:func:`qaindex.search.plan.check_queries`): finite, inside the unit ball for Poincaré models.
    k : int
        Any positive integer; the arrays have ``min(k, len(state))`` columns, so a huge
        ``k`` costs no more than ``k = len(state)``.
    use_coarse : bool, keyword-only
        Go through FAISS even when the candidate pool (:func:`pool_size`) covers every answer
        (by default such small searches rerank every answer exactly and skip FAISS).

    Returns
    -------
    scores : numpy.ndarray (n, min(k, len(state))), float32, ``-inf`` where missing
    distances : numpy.ndarray (n, min(k, len(state))), float32, ``inf`` where missing
    rows : numpy.ndarray (n, min(k, len(state))), int64, ``-1`` where missing (an
        approximate index may recall fewer candidates than asked)
    """
    k = min(k, len(state.records))
    q = queries
    limit = budget.request_budget(state.memory_budget)
    budget.check_result(
        len(q) * k * budget.ARRAY_ENTRY_BYTES,
        limit,
        f"a search of {len(q):,} question vectors for {k:,} hits each",
        "search fewer vectors per call or a smaller k",
    )
    m = pool_size(k, state.overfetch, len(state.records))
    budget.check_work(
        m * budget.CANDIDATE_BYTES,
        limit,
        f"ranking {m:,} candidates (k={k:,} x overfetch {state.overfetch})",
        "use a smaller k or overfetch",
    )
    step = budget.chunk(m * budget.CANDIDATE_BYTES, limit, _QUERY_CHUNK)
    parts = [_search_chunk(state, q[s : s + step], k, use_coarse, limit) for s in range(0, len(q), step)]
    if not parts:
        return np.zeros((0, k), np.float32), np.zeros((0, k), np.float32), np.zeros((0, k), np.int64)
    return tuple(np.concatenate(p) for p in zip(*parts, strict=True))  # type: ignore[return-value]


def candidates(state: IndexState, queries: np.ndarray, m: int, *, use_coarse: bool = False) -> np.ndarray:
    """:meth:`~qaindex.Ranker.candidates`: the coarse stage's rows, in chunks within the budget.

    Parameters
    ----------
    state : IndexState
    queries : array (n, dimension)
        Question vectors, checked, as for :func:`search_vectors`.
    m : int
        Candidates per question, any positive integer (bounded by the index size).
    use_coarse : bool, keyword-only
        Search FAISS even when ``m`` covers every answer.

    Returns
    -------
    numpy.ndarray (n, min(m, len(state))), int64, ``-1`` where fewer were recalled
    """
    m = min(m, len(state.records))
    limit = budget.request_budget(state.memory_budget)
    budget.check_result(
        len(queries) * m * 8,
        limit,
        f"candidates of {len(queries):,} question vectors, {m:,} each",
        "pass fewer vectors per call or a smaller m",
    )
    step = budget.chunk(m * budget.CANDIDATE_BYTES, limit, max(1, len(queries)))
    if step >= len(queries):
        return candidate_rows(state, queries, m, use_coarse=use_coarse)
    starts = range(0, len(queries), step)
    return np.concatenate([candidate_rows(state, queries[s : s + step], m, use_coarse=use_coarse) for s in starts])


def candidate_rows(state: IndexState, queries: np.ndarray, m: int, *, use_coarse: bool = False) -> np.ndarray:
    """Rows recalled for checked queries: every row when ``m`` covers them, else FAISS's."""
    total = len(state.records)
    if m >= total and not use_coarse:
        return np.broadcast_to(np.arange(total, dtype=np.int64), (len(queries), total)).copy()
    return state.coarse.search(queries, m, vectors=state.row_reader())


def _search_chunk(
    state: IndexState, q: np.ndarray, k: int, use_coarse: bool, limit: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(q)
    rows = candidate_rows(state, q, pool_size(k, state.overfetch, len(state.records)), use_coarse=use_coarse)
    valid = rows >= 0
    all_valid = bool(valid.all())
    safe_rows = rows if all_valid else np.where(valid, rows, 0)
    state.check_rows(safe_rows)
    vectors = np.asarray(state.vectors)
    score, dist = state.model.score_rows(q, vectors, safe_rows, budget.scorer_bytes(limit))
    if not np.isfinite(score).all():  # queries are checked: a damaged vectors.npy loaded with verify=False
        raise stored_vectors_error(state.vectors_source, safe_rows[~np.isfinite(score)])
    if not all_valid:
        score = np.where(valid, score, -np.inf)
        dist = np.where(valid, dist, np.inf)
        rows = np.where(valid, rows, np.iinfo(np.int64).max)
    # best score first; ties by distance, then by row (missing rows sort last)
    order = np.lexsort((rows, dist, -score), axis=-1)[:, :k]
    pick = (np.arange(n)[:, None], order)
    w = order.shape[1]
    # k <= len(state) here (search_vectors bounds it), so nothing below scales with a huge k
    top_s = np.full((n, k), -np.inf, dtype=np.float32)
    top_d = np.full((n, k), np.inf, dtype=np.float32)
    top_r = np.full((n, k), -1, dtype=np.int64)
    top_s[:, :w] = score[pick]
    top_d[:, :w] = dist[pick]
    top_r[:, :w] = np.where(np.isneginf(top_s[:, :w]), -1, rows[pick])
    return top_s, top_d, top_r
