"""Searching the stored-question keys and merging them with the answers' hits.

An index with keys (:mod:`qaindex.store.keys`) answers a question from two lists: the
answers' hits, as a search without keys finds them, and the keys' hits, each key standing
for its record. Keys are scored exactly (every key, or every key of a record a filter lets
through) by the model's scorer, as answers are; in a hybrid search they are fused with the
keys' BM25 ranking by the same rule (:func:`qaindex.search.fusion.hybrid_arrays`). Each
list keeps a record's best key only, and the two are merged::

    merged = merge(answers, keys) by score, answers first on ties, each record once

where ``score`` is the hit's calibrated score in a hybrid search whose fusion has one (the
``score`` the hits report), else the model's raw score (what calibration turns into
``score``; a stored question is encoded on the answer side, so the two are on one scale).
The answers' own order is kept, so a record whose keys score below its answer ranks as it
did without keys. Each merged hit says which key matched: ``"answer"`` or ``"question"``.

Example
-------
>>> import numpy as np
>>> answers = (np.array([[2.0, 1.0]]), np.zeros((1, 2)), np.array([[0, 1]]), None)
>>> keys = (np.array([[3.0, 0.5]]), np.zeros((1, 2)), np.array([[1, 0]]), None)
>>> s, d, r, p, matched, columns = merge(answers, keys, 2)
>>> r.tolist(), matched.tolist()
([[1, 0]], [[1, 0]])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import filters
from .fusion import CANDIDATE_FLOOR
from .hits import MATCHED, Explanation

if TYPE_CHECKING:
    from ..ranker import Ranker

__all__ = [
    "MATCHED",
    "allowed_records",
    "best_scores",
    "dense_key_rows",
    "key_arrays",
    "key_scores",
    "merge",
    "with_keys",
]

_BLOCK = 1 << 22  # floats of key vectors per scorer call (16 MiB)

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]
#: merged hits: scores, distances, rows, probabilities, matched codes, explanations (per question)
Merged = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, list[list[Explanation]] | None]


def allowed_records(ranker: Ranker, flt: filters.Filter | None) -> np.ndarray | None:
    """The records a filter lets through, as a bool mask over record rows (None: no filter).

    A predicate is called on the records that own keys only (the others cannot match by a key).
    """
    if flt is None:
        return None
    records = ranker._records
    mask = np.zeros(len(records), dtype=bool)
    if flt.predicate is None:
        mask[filters.matching_rows(records, flt)] = True
    elif ranker._keys is not None:
        for row in np.unique(ranker._keys.owners).tolist():
            mask[row] = flt.matches(records.get(row))
    return mask


def _exact_key_scores(ranker: Ranker, qv: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's scores and distances of keys ``rows`` for each question: (n, len(rows))."""
    keys = ranker._keys
    assert keys is not None
    n, dim = qv.shape
    score = np.empty((n, len(rows)), np.float32)
    dist = np.empty((n, len(rows)), np.float32)
    block = max(1, _BLOCK // max(1, n * dim))
    vectors = np.asarray(keys.vectors)
    q = np.ascontiguousarray(qv, dtype=np.float32)
    for start in range(0, len(rows), block):
        part = np.asarray(vectors[rows[start : start + block]], dtype=np.float32)
        gathered = np.ascontiguousarray(np.broadcast_to(part, (n, *part.shape)))
        score[:, start : start + len(part)], dist[:, start : start + len(part)] = ranker.model.score_checked(
            q, gathered
        )
    return score, dist


def key_scores(
    ranker: Ranker, qv: np.ndarray, allowed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The keys a search considers (those of ``allowed`` records) and their exact model
    scores and distances: ``(rows (K',), scores (n, K'), distances (n, K'))``; None for an
    index without keys or when no key counts (a filter lets none through).

    A search computes these first, then the answers' hits (a hybrid search's calibration
    takes :func:`best_scores` as a floor of its best of the hits: the hits are one list),
    then :func:`with_keys`."""
    keys = ranker._keys
    if keys is None or not len(keys):
        return None
    candidates = np.arange(len(keys), dtype=np.int64)
    if allowed is not None:
        candidates = candidates[allowed[keys.owners]]
        if not len(candidates):
            return None
    return (candidates, *_exact_key_scores(ranker, qv, candidates))


def _best_per_record(owners: np.ndarray, order: np.ndarray, width: int) -> np.ndarray:
    """The positions in ``order`` of each record's first key, the first ``width`` of them."""
    _, first = np.unique(owners[order], return_index=True)
    return order[np.sort(first)[:width]]


def dense_key_rows(ranker: Ranker, exact: tuple[np.ndarray, np.ndarray, np.ndarray], width: int) -> np.ndarray:
    """The ``min(K', max(width * overfetch, CANDIDATE_FLOOR))`` best keys of each question by
    the model's score (the dense candidates of a hybrid search over the keys, a pool as wide as
    the answers' so that the first hits do not depend on ``k``): int64 (n, m), best first."""
    candidates, score, dist = exact
    m = min(len(candidates), max(width * ranker.overfetch, CANDIDATE_FLOOR))
    order = np.lexsort((np.broadcast_to(candidates, score.shape), dist, -score), axis=-1)
    return np.ascontiguousarray(candidates[order[:, :m]])


def key_arrays(
    ranker: Ranker,
    exact: tuple[np.ndarray, np.ndarray, np.ndarray],
    width: int,
    fused: Arrays | None = None,
    *,
    probabilities: bool = False,
    why: list[list[Explanation]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The best key of each of the ``width`` best records by their keys, for each question.

    Parameters
    ----------
    ranker : Ranker
        An index with keys.
    exact : tuple
        :func:`key_scores` of the questions.
    width : int
        Records per question.
    fused : tuple of arrays, optional
        A hybrid search's arrays over the keys (:func:`qaindex.search.fusion.hybrid_arrays` of
        the keys' vectors and BM25 rows, rows being key rows, in fused order); without them
        the keys are ranked by the model's exact scores.
    probabilities : bool, keyword-only
        Give a probabilities array (the hybrid calibration's, 0 where ``fused`` has none).
    why : list, keyword-only, optional
        The :class:`~qaindex.search.hits.Explanation` of each of ``fused``'s hits (its
        ``explain`` list).

    Returns
    -------
    scores, distances, rows, probabilities
        As :func:`qaindex.search.fusion.hybrid_arrays` returns them, ``rows`` being the keys'
        record rows (``-1`` where missing), best first.
    explanations : object array (n, width) or None
        The picked keys' explanations, with ``why`` (None where missing).
    """
    keys = ranker._keys
    assert keys is not None
    candidates, score, dist = exact
    n = score.shape[0]
    s_out = np.full((n, width), -np.inf, np.float32)
    d_out = np.full((n, width), np.inf, np.float32)
    r_out = np.full((n, width), -1, np.int64)
    p_out = np.zeros((n, width), np.float64) if probabilities else None
    w_out = None if why is None else np.full((n, width), None, dtype=object)
    if not len(candidates):
        return s_out, d_out, r_out, p_out, w_out
    if fused is None:
        order = np.lexsort((np.broadcast_to(candidates, score.shape), dist, -score), axis=-1)
        for i in range(n):
            pick = _best_per_record(keys.owners[candidates], order[i], width)
            s_out[i, : len(pick)], d_out[i, : len(pick)] = score[i, pick], dist[i, pick]
            r_out[i, : len(pick)] = keys.owners[candidates[pick]]
        return s_out, d_out, r_out, p_out, w_out
    s, d, rows, p = fused
    for i in range(n):
        valid = np.flatnonzero(rows[i] >= 0)
        pick = _best_per_record(keys.owners[rows[i, valid]], valid, width)
        s_out[i, : len(pick)], d_out[i, : len(pick)] = s[i, pick], d[i, pick]
        r_out[i, : len(pick)] = keys.owners[rows[i, pick]]
        if p_out is not None and p is not None:
            p_out[i, : len(pick)] = p[i, pick]
        if w_out is not None and why is not None:  # the hits' explanations are in column order
            for out, j in enumerate(pick.tolist()):
                w_out[i, out] = why[i][j]
    return s_out, d_out, r_out, p_out, w_out


def merge(
    answers: Arrays, keys: Arrays, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """The answers' and the keys' hits merged (module docstring): ``(scores, distances, rows,
    probabilities, matched, columns)``, ``width`` columns, ``matched`` the :data:`MATCHED` code
    of each and ``columns`` its column in the answers' or the keys' arrays (``-1`` where missing)."""
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
            s[i, out], d[i, out], r[i, out], matched[i, out] = src_s[i, j], src_d[i, j], row, int(take_key)
            columns[i, out] = j
            if p is not None:
                p[i, out] = 0.0 if src_p is None else src_p[i, j]
            out += 1
    return s, d, r, p, matched, columns


def best_scores(exact: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> np.ndarray | None:
    """The best key score of each question (``-inf`` where no key counts), or None without keys."""
    return None if exact is None else exact[1].max(axis=1, initial=-np.inf).astype(np.float64)


def with_keys(
    ranker: Ranker,
    found: Arrays,
    exact: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    fused: Arrays | None = None,
    why: tuple[list[list[Explanation]], list[list[Explanation]] | None] | None = None,
) -> Merged:
    """The answers' arrays ``found`` merged with the keys' (:func:`merge`), as wide as the
    answers', and the hits' explanations with ``why``; unchanged (``matched`` None: every hit
    an answer's) for an index without keys.

    ``exact``: :func:`key_scores` of the questions (with the filter's ``allowed``); ``fused``:
    a hybrid search's arrays over the keys (see :func:`key_arrays`); ``why``: the explanations
    of the answers' hits and of ``fused``'s (the hybrid searches' ``explain`` lists). A key
    hit without one (keys ranked by the model alone) is explained by its score and position.
    """
    if exact is None:
        return (*found, None, None if why is None else why[0])
    width = found[2].shape[1]
    key_why = None if why is None else why[1]
    k_s, k_d, k_r, k_p, picked = key_arrays(
        ranker, exact, width, fused, probabilities=found[3] is not None, why=key_why
    )
    s, d, r, p, matched, columns = merge(found, (k_s, k_d, k_r, k_p), width)
    if why is None:
        return s, d, r, p, matched, None
    explained: list[list[Explanation]] = []
    for i in range(len(r)):
        row: list[Explanation] = []
        for out in np.flatnonzero(r[i] >= 0).tolist():
            j = int(columns[i, out])
            if not matched[i, out]:
                row.append(why[0][i][j])
            elif picked is not None and picked[i, j] is not None:
                row.append(picked[i, j])
            else:
                row.append(Explanation(dense_score=float(s[i, out]), dense_rank=out + 1, key=MATCHED[1]))
        explained.append(row)
    return s, d, r, p, matched, explained
