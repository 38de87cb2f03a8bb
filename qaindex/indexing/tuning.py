"""Build-time tuning of the coarse stage's search breadth to a recall target.

An approximate coarse index (``hnsw``, ``hnsw_sq8``, ``ivf``, ``ivf_sq8``, ``pq``, see
:mod:`qaindex.vector_index`) recalls the ``k × overfetch`` candidates that the exact rerank
orders. How many of the true top ``k`` it recalls depends on its search breadth
(``ef_search`` for HNSW, ``nprobe`` for IVF, ``refine`` for PQ) and on the data, so a fixed default is either
slow or inaccurate. :func:`tune_breadth` measures it instead: for a sample of queries it
computes the exact top ``k`` by brute force in float64 (the model's own ranking rule over
every vector, :func:`qaindex.vector_index.exact_search`), then tries breadths on a ladder
(×√2 steps from the candidate count, then bisection) and keeps the smallest that reaches
the target; when the recall stops growing measurably short of it (a doubling of the breadth
gains no more than the standard error of the measure), the smallest breadth within one
standard error of the best recall measured. Where the index's own metric (the lift it
searches) recalls less than the target even over every answer, as the origin-relative lift
does for queries cut from the answers themselves, the breadths aim at that ceiling instead of
climbing towards a recall no breadth reaches. Because the exact rerank restores the order among the candidates, the
pipeline's recall@k equals the share of the true top ``k`` among the candidates (up to
float32 ties), which is what is measured.

``qaindex build --recall 0.99`` and ``Ranker.build(..., recall=0.99)`` use it; the result is
stored in the index manifest (``coarse.tuning``) and shown by ``qaindex info``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..checks import shown
from ..errors import QueryError
from ..geometry import Geometry
from ..store.records import RecordStore
from ..vector_index import BREADTH_PARAM, HNSW_KINDS, CoarseIndex, exact_search

if TYPE_CHECKING:
    from ..corpus import Record
    from ..model import Model

__all__ = [
    "DEFAULT_TUNING_QUERIES",
    "MAX_EF_SEARCH",
    "answer_spans",
    "check_target",
    "recall_at",
    "sample_texts",
    "tune_breadth",
    "tune_for_corpus",
]

DEFAULT_TUNING_QUERIES = 200
# Ladder steps (×√2 each, so two are a doubling of the breadth) whose total gain in recall, when
# no larger than the standard error of the recall measured, ends the climb: the target counts as
# out of reach. Without it an unreachable target climbs to the ladder's end (for pq, re-scoring
# every answer for each tuning query), and a recall that only creeps up, as HNSW's does on
# answer spans at a million answers, climbs to a breadth 20 times slower than the one where it
# stopped rising measurably (benchmarks/speed/ann_difficulty.py measures recall against
# breadth, for spans and for real questions).
_FLAT_STEPS = 2
MAX_EF_SEARCH = 16_384
_log = logging.getLogger(__name__)


def check_target(target: Any) -> float:
    """Validate a recall target: a number in (0, 1].

    Example
    -------
    >>> check_target(0.99)
    0.99
    """
    message = f"recall must be a number above 0 and at most 1 (e.g. 0.99), got {shown(target)}"
    if isinstance(target, bool) or not isinstance(target, int | float):
        raise QueryError(message)
    try:
        value = float(target)
    except OverflowError:
        raise QueryError(message) from None
    if not 0.0 < value <= 1.0:
        raise QueryError(message)
    return value


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    """Share of the true rows (``truth``, n × k) that appear among ``found`` (n × m; -1 ignored).

    Example
    -------
    >>> recall_at(np.array([[3, 1, -1]]), np.array([[1, 2]]))
    0.5
    """
    hits = sum(len(set(f[f >= 0].tolist()) & set(t[t >= 0].tolist())) for f, t in zip(found, truth, strict=True))
    return hits / max(1, int((truth >= 0).sum()))


def _ladder(start: int, stop: int) -> list[int]:
    values: list[int] = []
    x = float(max(1, start))
    while True:
        v = min(stop, round(x))
        if not values or v > values[-1]:
            values.append(v)
        if v >= stop:
            return values
        x *= math.sqrt(2.0)


def tune_breadth(
    coarse: CoarseIndex,
    vectors: np.ndarray,
    queries: np.ndarray,
    *,
    target: float,
    k: int = 10,
    overfetch: int = 10,
    geometry: str | Geometry,
    ranking: str = "distance",
    max_breadth: int | None = None,
    exclude: np.ndarray | None = None,
) -> dict[str, Any]:
    """Set the smallest search breadth at which the coarse stage reaches ``target`` recall@k.

    Parameters
    ----------
    coarse : CoarseIndex
        Holds ``vectors`` (row for row). ``flat`` indexes are measured, not changed.
    vectors : array (N, dim)
        The answers' vectors (the ground truth's database).
    queries : array (n, dim)
        Question vectors to tune with.
    target : float, keyword-only
        Recall@k to reach, in (0, 1].
    k, overfetch : int, keyword-only
        The coarse stage recalls ``k × overfetch`` candidates (as :class:`~qaindex.Ranker`
        search does); recall is of the true top ``k`` among them.
    geometry : str or Geometry, keyword-only
        The model's geometry (:mod:`qaindex.geometry`), for the exact ground truth.
    ranking : str, keyword-only
        The ranking rule, with a geometry name (a Geometry object carries its own).
    max_breadth : int, keyword-only, optional
        Largest breadth tried (default :data:`MAX_EF_SEARCH` for HNSW, ``nlist`` for IVF).
    exclude : array (n,) of int, keyword-only, optional
        A row to leave out per query (-1: none), for queries made from a stored answer: that
        answer is then neither in the truth nor counted when found (a held-out query).

    Returns
    -------
    dict
        ``{"target", "recall", "ceiling", "reached", "param", "value", "k", "candidates",
        "queries", "tried", "seconds"}``; also stored as ``coarse.tuning``. ``ceiling`` is the
        recall of the index's own metric searching every answer
        (:meth:`~qaindex.vector_index.CoarseIndex.exhaustive_search`), what its widest breadth
        reaches (for ``flat``, the recall measured).
        Below the target, the breadths aim at ``ceiling`` less one standard error (the error
        of a share of ``queries × k`` hits, ``√(r(1−r)/(queries·k))``) instead. When the aim is
        out of reach (the ladder ends, or a doubling of the breadth, :data:`_FLAT_STEPS` steps,
        gains no more recall than one standard error) the smallest breadth within one standard
        error of the best recall measured is kept.
        ``reached`` says whether the target itself was.

    Example
    -------
    >>> rng = np.random.default_rng(0)
    >>> vecs = rng.uniform(-0.3, 0.3, (500, 8)).astype(np.float32)
    >>> ix = CoarseIndex("poincare", 8, "ivf", {"nlist": 16}, count=500)
    >>> ix.add(vecs)
    >>> out = tune_breadth(ix, vecs, vecs[:20], target=1.0, k=5, overfetch=2, geometry="poincare")
    >>> out["reached"], out["param"]
    (True, 'nprobe')
    """
    target = check_target(target)
    started = time.perf_counter()
    total = len(vectors)
    kk = min(k, total)
    m = min(total, kk * overfetch)
    q = np.ascontiguousarray(queries, dtype=np.float32)
    drop = np.full(len(q), -1, dtype=np.int64) if exclude is None else np.asarray(exclude, dtype=np.int64)
    _, truth = exact_search(q, vectors, min(total, kk + 1), geometry=geometry, ranking=ranking)
    truth = _without(truth, drop, kk)
    tried: list[list[float]] = []
    param = BREADTH_PARAM.get(coarse.kind)
    ceiling, aim = 1.0, target
    if param is not None:  # what the index's own metric recalls over every row: the widest breadth's recall
        ceiling = recall_at(_without(coarse.exhaustive_search(q, m, vectors), drop, m), truth)
        if ceiling < target:
            aim = max(0.0, ceiling - _error(ceiling, len(q) * kk))

    def measure(value: int | None) -> float:
        if value is not None:
            coarse.set_breadth(value)
        got = recall_at(_without(coarse.search(q, m, vectors=vectors), drop, m), truth)
        if value is not None:
            tried.append([int(value), round(got, 6)])
        return got

    if param is None:  # flat: nothing to tune; its search is the exhaustive one
        got = ceiling = measure(None)
        value = None
    else:
        if coarse.kind in HNSW_KINDS:
            stop, start = min(max_breadth or MAX_EF_SEARCH, total), m  # ef beyond N adds nothing
        elif param == "refine":  # re-scoring beyond every answer adds nothing
            stop, start = min(max_breadth or total, -(-total // m)), 1
        else:
            stop, start = min(max_breadth or coarse.params["nlist"], coarse.params["nlist"]), 1
        stop = max(stop, start)
        low: int | None = None  # the largest breadth known to miss the target
        value, got = stop, -1.0
        climbed: list[tuple[int, float]] = []
        for candidate in _ladder(start, stop):
            r = measure(candidate)
            if r >= aim:
                value, got = candidate, r
                break
            low = candidate
            climbed.append((candidate, r))
            if len(climbed) > _FLAT_STEPS and r - climbed[-1 - _FLAT_STEPS][1] <= _error(r, len(q) * kk):
                break  # doubling the breadth gained no more than the measure's noise: out of reach
        if got < aim:  # the cheapest breadth within one standard error of the best recall measured
            best = max(r for _, r in climbed)
            value, got = next((c, r) for c, r in climbed if r >= best - _error(best, len(q) * kk))
        if got >= aim and low is not None:
            high = value
            while high - low > max(1, high // 20):  # to about 5%
                mid = (low + high) // 2
                r = measure(mid)
                if r >= aim:
                    high, got = mid, r
                else:
                    low = mid
            value = high
        if got < target:
            _log.warning(
                "the %s index reaches recall@%d %.4f at %s=%d, below the target %.4f (its own metric "
                "recalls %.4f searching every answer); raise overfetch or choose --index-kind flat",
                coarse.kind,
                kk,
                got,
                param,
                value,
                target,
                ceiling,
            )
        coarse.set_breadth(value)
    result: dict[str, Any] = {
        "target": target,
        "recall": round(got, 6),
        "ceiling": round(ceiling, 6),
        "reached": bool(got >= target),
        "param": param,
        "value": value,
        "k": kk,
        "candidates": m,
        "queries": len(q),
        "tried": tried,
        "seconds": round(time.perf_counter() - started, 3),
    }
    coarse.tuning = result
    return result


def _error(recall: float, hits: int) -> float:
    """The standard error of a recall measured as a share of ``hits`` true rows: ``√(r(1−r)/hits)``."""
    return math.sqrt(recall * (1.0 - recall) / max(1, hits))


def _without(rows: np.ndarray, drop: np.ndarray, width: int) -> np.ndarray:
    """``rows`` less each query's excluded row, cut to ``width`` columns (-1 padded)."""
    out = np.full((len(rows), width), -1, dtype=np.int64)
    for i, (r, d) in enumerate(zip(rows, drop, strict=True)):
        kept = r[r != d][:width] if d >= 0 else r[:width]
        out[i, : len(kept)] = kept
    return out


def answer_spans(texts: Sequence[str], n: int = DEFAULT_TUNING_QUERIES, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """Question-like queries cut from answers: a seeded span of 4–10 words of ``n`` answers.

    Returns the spans and the row of the answer each comes from (to hold it out).

    Example
    -------
    >>> spans, rows = answer_spans(["one two three four five six seven eight nine ten eleven"], 1)
    >>> len(spans[0].split()) >= 4, rows.tolist()
    (True, [0])
    """
    rng = np.random.default_rng(seed)
    rows = np.arange(len(texts)) if len(texts) <= n else np.sort(rng.choice(len(texts), size=n, replace=False))
    spans = []
    for row in rows:
        words = texts[row].split()
        length = min(len(words), int(rng.integers(4, 11)))
        start = int(rng.integers(0, len(words) - length + 1)) if words else 0
        spans.append(" ".join(words[start : start + length]) or texts[row])
    return spans, rows.astype(np.int64)


def sample_texts(texts: Sequence[str], n: int = DEFAULT_TUNING_QUERIES, seed: int = 0) -> list[str]:
    """A seeded sample of ``n`` texts (all of them, in order, when there are fewer).

    Example
    -------
    >>> sample_texts(["a", "b", "c"], 2)
    ['b', 'c']
    """
    if len(texts) <= n:
        return list(texts)
    pick = np.sort(np.random.default_rng(seed).choice(len(texts), size=n, replace=False))
    return [texts[i] for i in pick]


class _Answers(Sequence[str]):
    """The answer texts of a corpus, read one record at a time (never all held in memory)."""

    def __init__(self, get: Callable[[int], Record], count: int) -> None:
        self._get, self._count = get, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, row: Any) -> Any:
        if isinstance(row, slice):
            return [self._get(i).answer for i in range(*row.indices(self._count))]
        return self._get(int(row)).answer


def tune_for_corpus(
    coarse: CoarseIndex,
    model: Model,
    records: Sequence[Record] | RecordStore,
    vectors: np.ndarray,
    *,
    target: float,
    overfetch: int,
) -> dict[str, Any]:
    """Tune ``coarse``'s breadth to ``target`` recall@10 on a corpus's questions (or answers).

    Queries are up to :data:`DEFAULT_TUNING_QUERIES` of the corpus's stored questions or,
    when it has none, :func:`answer_spans` (each answer held out of its own span's truth).
    A :class:`~qaindex.store.records.RecordStore` (a streamed build) is read one record at a time.

    Returns
    -------
    dict
        :func:`tune_breadth`'s result, with ``source`` saying where the queries came from.
    """
    get = records.get if isinstance(records, RecordStore) else records.__getitem__
    count = len(records)
    texts = [q for i in range(count) for q in get(i).questions]
    exclude = None
    if texts:
        sample, source = sample_texts(texts, DEFAULT_TUNING_QUERIES), "stored questions"
    else:
        sample, exclude = answer_spans(_Answers(get, count), DEFAULT_TUNING_QUERIES)
        source = "held-out answer spans"
    qv = model.encode(sample, role="question")
    out = tune_breadth(
        coarse,
        vectors,
        qv,
        target=target,
        k=10,
        overfetch=overfetch,
        geometry=model.space,
        exclude=exclude,
    )
    out["source"] = source
    _log.info("tuned %s=%s: recall@%d %.4f (target %.4f)", out["param"], out["value"], out["k"], out["recall"], target)
    return out
