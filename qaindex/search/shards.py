"""Searching an index split into shards: what each shard finds, and how their finds merge
into exactly what one index of the whole collection returns.

A search of one index (:mod:`.pipeline`) ranks a *pool* of candidates: the coarse stage's
``m`` best rows, BM25's ``m`` best (every answer scored, or the best postings of each question
term above :data:`~.fusion.LEXICAL_SCAN_LIMIT` answers) and the records of the best stored
questions (:mod:`.keys`), scored exactly and fused over the whole pool. Each of those stages
keeps the ``m`` best of something (coarse scores, BM25 scores, a term's posting weights, key
scores), with ties to the lower row, and what is best of the whole collection within one
shard is among that shard's ``m`` best. So each shard (:func:`shard_candidates`) returns its
own ``m`` best of each stage with the values that rank them, and the exact model score,
distance and BM25 score of each (its shards' BM25 statistics are the collection's:
:class:`~qaindex.text.lexical.CollectionStats`); the coordinator (:func:`merge_shards`) keeps
the ``m`` best of the union of each stage, as one index would, and fuses the same pool with
the same code (:func:`~.fusion.fuse_candidates`). Rows are numbered through the shards in
order (shard ``s``'s row ``r`` is ``offset[s] + r``), so ties fall as in one index.

The hits are those of one index of the whole collection, up to a coarse stage's own
approximation: exact kinds (``flat``) give the same hits and scores; an approximate kind
searches each shard with its own codes, so its recall is that of one index at each shard's
size (no lower). Not supported on a sharded index: filters (``where``), a reranking stage.

Example
-------
See :class:`qaindex.sharded.ShardedRanker`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..text.lexical import bm25_bound, bm25_idf, matched_words, top_rows
from . import budget
from .fusion import CANDIDATE_FLOOR, Fusion, fuse_candidates, sorted_union
from .hits import Explanation, dense_explanations
from .keys import best_keys, best_per_record, key_scores, merge, same_keys

if TYPE_CHECKING:
    from .state import IndexState

__all__ = ["KeyPart", "ShardPart", "ShardQuery", "merge_shards", "shard_candidates"]


@dataclass(frozen=True)
class ShardQuery:
    """What the coordinator asks of every shard for a batch of questions.

    Attributes
    ----------
    vectors : numpy.ndarray (n, dimension)
        The questions' vectors (checked).
    questions : tuple of str
    tokens : tuple of tuples of str, or None
        Each question's BM25 terms (:func:`~qaindex.text.lexical.question_tokens`); None: a
        dense search.
    m : int
        Candidates each stage keeps (:func:`~.pipeline.pool_size` of the whole collection).
    width : int
        Hits of the first stage (``k``).
    every : bool
        ``m`` covers every answer of the collection: every row is a candidate, no coarse search.
    scan : bool
        BM25 scores every answer (the collection has at most ``LEXICAL_SCAN_LIMIT``).
    key_pool : int
        Keys in a hybrid search's keys' pool (of the whole collection's keys).
    """

    vectors: np.ndarray
    questions: tuple[str, ...]
    tokens: tuple[tuple[str, ...], ...] | None
    m: int
    width: int
    every: bool
    scan: bool
    key_pool: int


@dataclass(frozen=True)
class KeyPart:
    """The keys one shard returns for one question (local numbers and rows): a dense
    search's best key of each of its ``width`` best records; a hybrid search's keys' pool
    (``pooled``) and the keys holding exactly the question's terms (``same``); each key's
    :data:`~.hits.MATCHED` code (``kinds``)."""

    numbers: np.ndarray
    owners: np.ndarray
    scores: np.ndarray
    distances: np.ndarray
    pooled: np.ndarray
    same: np.ndarray
    kinds: np.ndarray


@dataclass(frozen=True)
class ShardPart:
    """One question's candidates in one shard (local rows).

    ``dense_rows`` / ``dense_coarse``: the coarse stage's ``m`` best and their coarse scores
    (every row, scores unused, when the query says ``every``); ``lex_rows`` / ``lex_scores``:
    BM25's ``m`` best (scan) or, per distinct question term, its ``m`` best postings
    (``term_rows`` / ``term_weights``); ``rows`` (sorted) every candidate with its model
    ``scores``, ``distances``, BM25 scores (``bm25``) and the distinct question terms it holds
    (``held``); ``df`` the collection's document frequency of each distinct term (0: not in
    this shard's vocabulary); ``keys`` the stored questions' part (None: the shard has none).
    """

    dense_rows: np.ndarray
    dense_coarse: np.ndarray
    lex_rows: np.ndarray
    lex_scores: np.ndarray
    term_rows: tuple[np.ndarray, ...]
    term_weights: tuple[np.ndarray, ...]
    rows: np.ndarray
    scores: np.ndarray
    distances: np.ndarray
    bm25: np.ndarray
    held: np.ndarray
    df: np.ndarray
    keys: KeyPart | None


_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0, np.float32)


def distinct(tokens: tuple[str, ...]) -> list[str]:
    """A question's distinct terms, in order of first occurrence."""
    return list(dict.fromkeys(tokens))


# ------------------------------------------------------------------------------ one shard


def shard_candidates(state: IndexState, query: ShardQuery) -> list[ShardPart]:
    """What one shard finds for each question of ``query`` (see the module docstring)."""
    n, total, m = len(query.vectors), len(state.records), query.m
    qv = np.ascontiguousarray(query.vectors, dtype=np.float32)
    if query.every:
        dense_rows = np.broadcast_to(np.arange(total, dtype=np.int64), (n, total))
        dense_coarse = np.zeros((n, total), np.float32)
    else:
        dense_coarse, dense_rows = state.coarse.search_scored(qv, min(m, total), vectors=state.row_reader())
    exact = key_scores(state, qv)
    lexical = state.lexical if query.tokens is not None else None
    parts = []
    for i in range(n):
        valid = dense_rows[i] >= 0
        d_rows, d_coarse = np.asarray(dense_rows[i][valid]), np.asarray(dense_coarse[i][valid])
        lex_rows, lex_scores, term_rows, term_weights = _EMPTY_I, _EMPTY_F, [], []
        terms = np.zeros(0, np.int64)
        words: list[str] = []
        every_score = None
        ids: list[int] = []
        if lexical is not None and query.tokens is not None:
            words = distinct(query.tokens[i])
            ids = lexical.term_ids(words)
            terms = lexical.query_of_tokens(query.tokens[i])[0]
            if query.scan:
                every_score = lexical.scores_of_terms(terms)
                lex_rows = top_rows(every_score, m)
                lex_scores = every_score[lex_rows]
            else:
                for term in ids:
                    found = lexical.best_postings(term, m) if term >= 0 else (_EMPTY_I, _EMPTY_F)
                    term_rows.append(found[0])
                    term_weights.append(found[1])
                lex_rows = np.unique(np.concatenate([_EMPTY_I, *term_rows]))
        keys = _key_part(state, query, exact, i) if exact is not None else None
        rows = sorted_union(d_rows, lex_rows)
        if keys is not None:
            rows = sorted_union(rows, keys.owners)
        if lexical is None:
            bm25, held, df = np.zeros(len(rows), np.float32), np.zeros((len(rows), 0), bool), _EMPTY_I
        else:
            bm25 = every_score[rows] if every_score is not None else lexical.scores_of_rows(terms, rows)
            held, df = lexical.holds(ids, rows), _collection_df(lexical, ids)
        parts.append(
            ShardPart(
                d_rows,
                d_coarse,
                lex_rows,
                lex_scores,
                tuple(term_rows),
                tuple(term_weights),
                rows,
                *_exact(state, qv[i], rows),
                np.asarray(bm25, np.float32),
                held,
                df,
                keys,
            )
        )
    return parts


def _exact(state: IndexState, q: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's scores and distances of one question's candidate ``rows``."""
    if not len(rows):
        return _EMPTY_F, _EMPTY_F
    block = budget.scorer_bytes(state.memory_budget)
    score, dist = state.model.score_rows(q[None], state.row_reader(), rows[None], block)
    return score[0], dist[0]


def _collection_df(lexical: Any, ids: list[int]) -> np.ndarray:
    """The collection's document frequency of each question term (ids here, 0 where this
    shard's vocabulary lacks it): every shard of a set holds the collection's statistics."""
    assert lexical.collection is not None, "a shard set's shards score BM25 with the collection's statistics"
    return np.asarray([int(lexical.collection.df[t]) if t >= 0 else 0 for t in ids], np.int64)


def _key_part(
    state: IndexState, query: ShardQuery, exact: tuple[np.ndarray, np.ndarray, np.ndarray], i: int
) -> KeyPart:
    """One question's keys in one shard (:class:`KeyPart`)."""
    keys = state.keys
    assert keys is not None
    numbers, score, dist = exact[0], exact[1][i], exact[2][i]
    order = np.lexsort((numbers, dist, -score))
    if query.tokens is None:  # a dense search: the best key of each of the width best records
        pick = best_per_record(keys.owners[numbers], order, query.width)
        none = np.zeros(len(pick), bool)
        at = numbers[pick]
        return KeyPart(at, keys.owners[at], score[pick], dist[pick], ~none, none, keys.kind_codes(at))
    pool = order[: min(len(numbers), query.key_pool)]
    same = same_keys(keys, query.questions[i], numbers)
    pos = np.union1d(pool, same)
    at = numbers[pos]
    return KeyPart(
        at, keys.owners[at], score[pos], dist[pos], np.isin(pos, pool), np.isin(pos, same), keys.kind_codes(at)
    )


# ------------------------------------------------------------------------------ the coordinator


@dataclass(frozen=True)
class Collection:
    """What the coordinator knows of the whole collection: each shard's first row and first
    key number, its answers, the BM25 ``N`` and the adaptive fusion's ratio."""

    offsets: np.ndarray  # (shards + 1,) first row of each shard, then the total
    key_offsets: np.ndarray  # (shards + 1,)
    ratio: float | None


class _QueryLexical:
    """The BM25 side of one question over the pool (what :func:`~.fusion.fuse_candidates`
    asks a lexical index): its distinct terms' idf in the collection and which candidates
    hold them."""

    def __init__(self, words: list[str], idf: np.ndarray, answers: int, held: dict[int, np.ndarray]) -> None:
        self.vocab, self._idf, self._answers, self._held_rows = words, idf, answers, held

    def score_bound(self, terms: np.ndarray, length: int) -> float:
        return bm25_bound(self._idf[terms], length, self._answers)

    def coverage(self, terms: np.ndarray, length: int, row: int) -> float:
        total = self.score_bound(terms, length)
        if total <= 0:
            return 0.0
        return float(self._idf[terms][self._held_rows[row][terms]].sum()) / total

    def matched_terms(self, terms: np.ndarray, row: int) -> tuple[str, ...]:
        return matched_words(self.vocab, terms, self._held_rows[row][terms])


def merge_shards(
    model: Any,
    collection: Collection,
    query: ShardQuery,
    parts: list[list[ShardPart]],
    fusion: Fusion | None,
    *,
    explain: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, list[list[Explanation]] | None]:
    """The first stage of a sharded search: ``(scores, distances, rows, probabilities,
    matched, explanations)`` of ``query.width`` columns, rows global, as
    :func:`~.pipeline.search_batch` has them before making hits (probabilities None for a
    dense search). ``parts[s][i]``: shard ``s``'s :class:`ShardPart` of question ``i``."""
    n, k = len(query.vectors), query.width
    s_out = np.full((n, k), -np.inf, np.float32)
    d_out = np.full((n, k), np.inf, np.float32)
    r_out = np.full((n, k), -1, np.int64)
    p_out = None if fusion is None else np.zeros((n, k), np.float64)
    matched = np.zeros((n, k), np.int8)
    why: list[list[Explanation]] | None = [] if explain and fusion is not None else None
    for i in range(n):
        mine = [shard[i] for shard in parts]
        found: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]
        if fusion is None:
            found = _dense(collection, query, mine)
        else:
            found = _fused(model, collection, query, mine, fusion, i, why)
        w = len(found[2])
        s_out[i, :w], d_out[i, :w], r_out[i, :w], matched[i, :w] = found[0], found[1], found[2], found[4]
        if p_out is not None and found[3] is not None:
            p_out[i, :w] = found[3]
    if explain and fusion is None:
        why = dense_explanations(s_out, r_out)
    return s_out, d_out, r_out, p_out, matched, why


def _global(collection: Collection, mine: list[ShardPart], field: str, offsets: np.ndarray | None = None) -> np.ndarray:
    """A field of every shard's part, shard after shard, rows (with ``offsets``) made global
    (so sorted where each part's is)."""
    first = getattr(mine[0], field)
    parts = [getattr(p, field) if offsets is None else getattr(p, field) + offsets[s] for s, p in enumerate(mine)]
    return np.concatenate([np.zeros((0, *first.shape[1:]), first.dtype), *parts])


class _Joined:
    """One question's candidates of every shard, joined once: global rows (sorted) and their
    model scores, distances, BM25 scores and held terms."""

    def __init__(self, collection: Collection, mine: list[ShardPart]) -> None:
        self.rows = _global(collection, mine, "rows", collection.offsets).astype(np.int64)
        self._values = [_global(collection, mine, f) for f in ("scores", "distances", "bm25", "held")]

    def of(self, wanted: np.ndarray) -> list[np.ndarray]:
        """The values of the global ``wanted`` rows (each among some shard's candidates)."""
        at = np.searchsorted(self.rows, wanted)
        return [v[at] for v in self._values]


def _dense_pool(collection: Collection, query: ShardQuery, mine: list[ShardPart]) -> np.ndarray:
    """The whole collection's coarse candidates, sorted: the ``m`` best of the shards' by
    coarse score (ties to the lower row), or every row."""
    rows = _global(collection, mine, "dense_rows", collection.offsets).astype(np.int64)
    if not query.every:
        rows = rows[np.lexsort((rows, -_global(collection, mine, "dense_coarse")))[: query.m]]
    return np.sort(rows)


def _dense(
    collection: Collection, query: ShardQuery, mine: list[ShardPart]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, None, np.ndarray]:
    """A dense search's hits of one question (:func:`~.pipeline.search_vectors`, then the
    stored questions merged by :func:`~.keys.merge`)."""
    k = query.width
    rows = _dense_pool(collection, query, mine)
    s, d, _, _ = _Joined(collection, mine).of(rows)
    order = np.lexsort((rows, d, -s))[:k]
    answers = _padded((s[order], d[order], rows[order]), k)
    if all(p.keys is None for p in mine):
        return (*answers, None, np.zeros(len(order), np.int8))
    numbers, owners, ks, kd, _, _, kinds = _keys_joined(collection, mine)
    pick = best_per_record(owners, np.lexsort((numbers, kd, -ks)), k)
    keys = _padded((ks[pick], kd[pick], owners[pick]), k)
    key_codes = np.zeros(k, np.int8)
    key_codes[: len(pick)] = kinds[pick]
    s2, d2, r2, _, codes, _ = merge(
        (answers[0][None], answers[1][None], answers[2][None], None),
        (keys[0][None], keys[1][None], keys[2][None], None),
        k,
        key_codes[None],
    )
    w = int((r2[0] >= 0).sum())
    return s2[0, :w], d2[0, :w], r2[0, :w], None, codes[0, :w]


def _padded(arrays: tuple[np.ndarray, np.ndarray, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores, distances and rows of up to ``k`` hits as ``k`` columns (``-inf``, ``inf``, ``-1`` after)."""
    s, d, r = (np.full(k, -np.inf, np.float32), np.full(k, np.inf, np.float32), np.full(k, -1, np.int64))
    w = len(arrays[2])
    s[:w], d[:w], r[:w] = arrays
    return s, d, r


def _keys_joined(collection: Collection, mine: list[ShardPart]) -> tuple[np.ndarray, ...]:
    """Every shard's keys of one question: global key numbers, owners (global rows), scores,
    distances, the pooled and same flags, then the kind codes."""
    parts = [(s, p.keys) for s, p in enumerate(mine) if p.keys is not None]
    numbers = np.concatenate([_EMPTY_I] + [kp.numbers + collection.key_offsets[s] for s, kp in parts])
    owners = np.concatenate([_EMPTY_I] + [kp.owners + collection.offsets[s] for s, kp in parts])
    scores = np.concatenate([_EMPTY_F] + [kp.scores for _, kp in parts])
    dists = np.concatenate([_EMPTY_F] + [kp.distances for _, kp in parts])
    pooled = np.concatenate([np.zeros(0, bool)] + [kp.pooled for _, kp in parts])
    same = np.concatenate([np.zeros(0, bool)] + [kp.same for _, kp in parts])
    kinds = np.concatenate([np.zeros(0, np.int8)] + [kp.kinds for _, kp in parts])
    return numbers.astype(np.int64), owners.astype(np.int64), scores, dists, pooled, same, kinds


def _lexical_pool(collection: Collection, query: ShardQuery, mine: list[ShardPart], bm25_of: Any) -> np.ndarray:
    """BM25's ``m`` best rows of the whole collection (sorted): of every answer's scores, or
    of the best postings of each question term (:meth:`~qaindex.text.lexical.LexicalIndex.impact_rows`)."""
    m = query.m
    if query.scan:
        rows = _global(collection, mine, "lex_rows", collection.offsets)
        best: np.ndarray = rows[top_rows(_global(collection, mine, "lex_scores"), m)]
        return best
    extra = _EMPTY_I
    for t in range(len(mine[0].term_rows)):
        rows = np.concatenate([_EMPTY_I] + [p.term_rows[t] + collection.offsets[s] for s, p in enumerate(mine)])
        weights = np.concatenate([_EMPTY_F] + [p.term_weights[t] for p in mine])
        extra = sorted_union(extra, rows[top_rows(weights, m)])
    out: np.ndarray = extra[top_rows(bm25_of(extra), m)]
    return out


def _fused(
    model: Any,
    collection: Collection,
    query: ShardQuery,
    mine: list[ShardPart],
    fusion: Fusion,
    i: int,
    why: list[list[Explanation]] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A hybrid search's hits of one question (:func:`~.fusion.hybrid_arrays`' pool, fused by
    :func:`~.fusion.fuse_candidates`)."""
    assert query.tokens is not None
    tokens = query.tokens[i]
    words = distinct(tokens)
    df = np.max(np.stack([p.df for p in mine]), axis=0) if words else _EMPTY_I
    known = df > 0
    position = {w: j for j, w in enumerate(words)}
    terms = np.asarray([position[t] for t in tokens if known[position[t]]], np.int64)
    answers = int(collection.offsets[-1])
    idf = bm25_idf(answers, df)

    joined = _Joined(collection, mine)
    lex_rows = _lexical_pool(collection, query, mine, lambda rows: joined.of(rows)[2])
    evidence = None
    if any(p.keys is not None for p in mine):
        numbers, owners, ks, kd, pooled, same, kinds = _keys_joined(collection, mine)
        candidates = np.flatnonzero(pooled)
        pool = candidates[np.lexsort((numbers[candidates], kd[candidates], -ks[candidates]))[: query.key_pool]]
        evidence = best_keys(numbers, owners, ks, kd, pool, np.flatnonzero(same), kinds)
        lex_rows = sorted_union(lex_rows, evidence[0])
    rows = sorted_union(_dense_pool(collection, query, mine), lex_rows)
    s, d, lex, held = joined.of(rows)
    lexical = _QueryLexical(words, idf, answers, dict(zip(rows.tolist(), held, strict=True)))
    explain: list[list[Explanation]] | None = [] if why is not None else None
    found = fuse_candidates(
        model,
        lexical,
        fusion,
        collection.ratio,
        (terms, len(tokens)),
        (rows, s, d, lex),
        query.width,
        keys=evidence,
        explain=explain,
    )
    if why is not None and explain is not None:
        why.extend(explain)
    return found


def key_pool(width: int, overfetch: int, keys: int) -> int:
    """The keys' pool of a hybrid search (:func:`~.keys.key_evidence`) over ``keys`` keys."""
    return min(keys, max(width * overfetch, CANDIDATE_FLOOR))
