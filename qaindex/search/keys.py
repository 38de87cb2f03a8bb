"""Searching the keys: a record's best key, in dense and hybrid search.

An index with keys (:mod:`qaindex.key_index`) ranks records, each by its best key: its
answer, one of its stored questions or one of its answer's passages. Keys are scored exactly
(every key, or every key of a record a filter lets through) by the model's scorer, as
answers are; a key is encoded on the answer side, so the two are on one scale.

- A dense search merges the answers' hits with the keys' (each record's best key)::

      merged = merge(answers, keys) by model score, answers first on ties, each record once

  so a record whose keys score below its answer ranks as it did without keys.
- A hybrid search fuses one list of records (:func:`key_evidence`, read by
  :func:`qaindex.search.fusion.hybrid_arrays`): the records of the best keys join the
  answers' candidates, a record's model score is its best key's, and a record with a key
  holding exactly the question's terms gets the best BM25 score of the candidates.

Each hit says which key matched: ``"answer"``, ``"question"`` or ``"passage"``.

Example
-------
>>> import numpy as np
>>> answers = (np.array([[2.0, 1.0]]), np.zeros((1, 2)), np.array([[0, 1]]), None)
>>> keys = (np.array([[3.0, 0.5]]), np.zeros((1, 2)), np.array([[1, 0]]), None)
>>> s, d, r, p, matched, columns = merge(answers, keys, 2, np.array([[2, 1]]))
>>> r.tolist(), matched.tolist()
([[1, 0]], [[2, 0]])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..key_index import QUESTION
from . import filters
from .fusion import CANDIDATE_FLOOR, Evidence
from .hits import MATCHED

if TYPE_CHECKING:
    from ..key_index import KeyIndex
    from .state import IndexState

__all__ = [
    "MATCHED",
    "allowed_records",
    "best_keys",
    "best_per_record",
    "key_arrays",
    "key_evidence",
    "key_scores",
    "merge",
    "same_keys",
    "with_keys",
]

_BLOCK_BYTES = 1 << 24  # key vectors gathered per scorer call (16 MiB)

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


def allowed_records(state: IndexState, flt: filters.Filter | None) -> np.ndarray | None:
    """The records a filter lets through, as a bool mask over record rows (None: no filter).

    A predicate is called on the records that own keys only (the others cannot match by a key).
    """
    if flt is None:
        return None
    records = state.records
    mask = np.zeros(len(records), dtype=bool)
    if flt.predicate is None:
        mask[filters.matching_rows(records, flt)] = True
    elif state.keys is not None:
        for row in np.unique(state.keys.owners).tolist():
            mask[row] = flt.matches(records.get(row))
    return mask


def _exact_key_scores(state: IndexState, qv: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's scores and distances of keys ``rows`` for each question: (n, len(rows))."""
    keys = state.keys
    assert keys is not None
    every = np.broadcast_to(rows, (len(qv), len(rows)))  # the same keys for every question
    return state.model.score_rows(qv, np.asarray(keys.vectors), every, _BLOCK_BYTES)


def key_scores(
    state: IndexState, qv: np.ndarray, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The keys a search considers (those of ``allowed`` records) and their exact model
    scores and distances: ``(rows (K',), scores (n, K'), distances (n, K'))``; None for an
    index without keys or when no key counts (a filter lets none through).

    A dense search merges them with the answers' hits (:func:`with_keys`); a hybrid search
    reads them through :func:`key_evidence`."""
    keys = state.keys
    if keys is None or not len(keys):
        return None
    candidates = np.arange(len(keys), dtype=np.int64)
    if allowed is not None:
        candidates = candidates[allowed[keys.owners]]
        if not len(candidates):
            return None
    return (candidates, *_exact_key_scores(state, qv, candidates))


def best_per_record(owners: np.ndarray, order: np.ndarray, width: int) -> np.ndarray:
    """The positions in ``order`` of each record's first key, the first ``width`` of them.

    Example
    -------
    >>> best_per_record(np.array([7, 7, 3]), np.array([1, 0, 2]), 5).tolist()
    [1, 2]
    """
    _, first = np.unique(owners[order], return_index=True)
    return order[np.sort(first)[:width]]


def key_evidence(
    state: IndexState, questions: list[str], exact: tuple[np.ndarray, np.ndarray, np.ndarray], width: int
) -> list[Evidence]:
    """What the stored questions add to a hybrid search's records, per question
    (:func:`qaindex.search.fusion.hybrid_arrays`'s ``keys``).

    The records of the ``max(width * overfetch, CANDIDATE_FLOOR)`` best keys by the model's
    score (the keys' pool, as wide as the answers') and of every key holding exactly the
    question's terms (:meth:`~qaindex.text.lexical.LexicalIndex.same_terms`, in an index
    with the keys' BM25 rows), each with its best key's score and distance and whether one
    of its keys holds the question's terms and its best key's code, and the best stored
    question's score: ``(rows, scores, distances, same, codes, question_top)``, rows sorted.
    """
    keys = state.keys
    assert keys is not None
    candidates, score, dist = exact
    m = min(len(candidates), max(width * state.overfetch, CANDIDATE_FLOOR))
    out = []
    for i, question in enumerate(questions):
        pool = np.lexsort((candidates, dist[i], -score[i]))[:m]  # positions in `candidates`
        same = same_keys(keys, question, candidates)
        owners, kinds = keys.owners[candidates], keys.kind_codes(candidates)
        out.append(best_keys(candidates, owners, score[i], dist[i], pool, same, kinds))
    return out


def same_keys(keys: KeyIndex, question: str, candidates: np.ndarray) -> np.ndarray:
    """The positions in ``candidates`` (key numbers) of the keys holding exactly the
    question's terms (:meth:`~qaindex.text.lexical.LexicalIndex.same_terms`; none without
    the keys' BM25 index)."""
    if keys.lexical is None:
        return np.zeros(0, np.int64)
    terms, length = keys.lexical.query(question)
    if not len(terms):
        return np.zeros(0, np.int64)
    matching = np.flatnonzero(keys.lexical.scores_of_terms(terms)[candidates] > 0)
    out: np.ndarray = matching[keys.lexical.same_terms(terms, length, candidates[matching])]
    return out


def best_keys(
    numbers: np.ndarray,
    owners: np.ndarray,
    score: np.ndarray,
    dist: np.ndarray,
    pool: np.ndarray,
    same: np.ndarray,
    kinds: np.ndarray,
) -> Evidence:
    """:func:`key_evidence` of one question from its keys (``numbers``, their ``owners``,
    scores, distances and kind codes) and the positions of the
    keys' pool and of those holding the question's terms: each of their records with its
    best key (best score, then distance, then key number), whether one of its keys holds the
    terms and its best key's code, rows sorted; and the best score of the stored questions
    among those keys (passages left out), which the hybrid score's question-level ``p_top``
    reads (:func:`qaindex.search.fusion.fuse_candidates`).

    Example
    -------
    >>> rows, s, d, same, codes, top = best_keys(np.arange(3), np.array([4, 4, 9]), np.array([0.5, 0.9, 0.1]),
    ...                                          np.zeros(3), np.array([0, 1]), np.array([2]), np.array([1, 2, 1]))
    >>> rows.tolist(), s.tolist(), same.tolist(), codes.tolist(), top
    ([4, 9], [0.9, 0.1], [False, True], [2, 1], 0.5)
    """
    pos = np.union1d(pool, same)
    order = pos[np.lexsort((numbers[pos], dist[pos], -score[pos]))]  # best key first
    rows, first = np.unique(owners[order], return_index=True)  # each record's best key
    best = order[first]
    codes = np.asarray(kinds, np.int8)
    questions = pos[codes[pos] == QUESTION]
    top = float(score[questions].max()) if len(questions) else -np.inf
    return rows, score[best], dist[best], np.isin(rows, owners[same]), codes[best], top


def key_arrays(
    state: IndexState, exact: tuple[np.ndarray, np.ndarray, np.ndarray], width: int
) -> tuple[Arrays, np.ndarray]:
    """The best key of each of the ``width`` best records by their keys' model scores, for
    each question (``exact``: :func:`key_scores`): ``(scores, distances, rows, None)`` as
    :func:`qaindex.search.pipeline.search_vectors` returns them, ``rows`` being the keys'
    record rows (``-1`` where missing), best first; and the :data:`MATCHED` code of each key."""
    keys = state.keys
    assert keys is not None
    candidates, score, dist = exact
    n = score.shape[0]
    s_out = np.full((n, width), -np.inf, np.float32)
    d_out = np.full((n, width), np.inf, np.float32)
    r_out = np.full((n, width), -1, np.int64)
    codes = np.zeros((n, width), np.int8)
    if not len(candidates):
        return (s_out, d_out, r_out, None), codes
    order = np.lexsort((np.broadcast_to(candidates, score.shape), dist, -score), axis=-1)
    for i in range(n):
        pick = best_per_record(keys.owners[candidates], order[i], width)
        s_out[i, : len(pick)], d_out[i, : len(pick)] = score[i, pick], dist[i, pick]
        r_out[i, : len(pick)] = keys.owners[candidates[pick]]
        codes[i, : len(pick)] = keys.kind_codes(candidates[pick])
    return (s_out, d_out, r_out, None), codes


def merge(
    answers: Arrays, keys: Arrays, width: int, codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """The answers' and the keys' hits merged (module docstring): ``(scores, distances, rows,
    probabilities, matched, columns)``, ``width`` columns, ``matched`` the :data:`MATCHED` code
    of each (a key's from ``codes``, the keys' codes) and
    ``columns`` its column in the answers' or the keys' arrays (``-1`` where missing)."""
    a_s, a_d, a_r, a_p = answers
    k_s, k_d, k_r, k_p = keys
    n = a_r.shape[0]
    a_v = a_s.astype(np.float64) if a_p is None else np.asarray(a_p, np.float64)
    k_v = k_s.astype(np.float64) if k_p is None or a_p is None else np.asarray(k_p, np.float64)
    s = np.full((n, width), -np.inf, np.float32)
    d = np.full((n, width), np.inf, np.float32)
    r = np.full((n, width), -1, np.int64)
    p = None if a_p is None else np.zeros((n, width), np.float64)
    matched = np.zeros((n, width), np.int8)
    columns = np.full((n, width), -1, np.int64)
    for i in range(n):
        a_rows = a_r[i].tolist()
        k_rows = k_r[i].tolist()
        ai = ki = out = 0
        seen: set[int] = set()
        while out < width:
            a_ok = ai < len(a_rows) and a_rows[ai] >= 0
            k_ok = ki < len(k_rows) and k_rows[ki] >= 0
            if not a_ok and not k_ok:
                break
            take_key = k_ok and (not a_ok or k_v[i, ki] > a_v[i, ai])
            src_s, src_d, src_p, j = (k_s, k_d, k_p, ki) if take_key else (a_s, a_d, a_p, ai)
            row = k_rows[ki] if take_key else a_rows[ai]
            if take_key:
                ki += 1
            else:
                ai += 1
            if row in seen:
                continue
            seen.add(row)
            code = int(codes[i, j]) if take_key else 0
            s[i, out], d[i, out], r[i, out], matched[i, out] = src_s[i, j], src_d[i, j], row, code
            columns[i, out] = j
            if p is not None:
                p[i, out] = 0.0 if src_p is None else src_p[i, j]
            out += 1
    return s, d, r, p, matched, columns


def with_keys(
    state: IndexState, found: Arrays, exact: tuple[np.ndarray, np.ndarray, np.ndarray] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """A dense search's answers' arrays ``found`` merged with the keys' (:func:`merge`), as
    wide as the answers', and the hits' key codes; unchanged (codes None: every hit an
    answer's) for an index without keys. ``exact``: :func:`key_scores` of the questions (with
    the filter's ``allowed``)."""
    if exact is None:
        return (*found, None)
    width = found[2].shape[1]
    arrays, codes = key_arrays(state, exact, width)
    s, d, r, p, matched, _ = merge(found, arrays, width, codes)
    return s, d, r, p, matched
