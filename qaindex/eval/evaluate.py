"""Evaluate a model on labelled answer-selection data (MAP, MRR, P@1).

Two paths that must agree:

- :func:`evaluate_model` scores each question's own candidates directly with the model's
  ONNX scorer;
- :func:`evaluate_via_index` goes through the served path: a :class:`~qaindex.Ranker` over
  every distinct answer of the data, a full ranking per question, and the served scores of
  the question's own candidates read from it.

:func:`evaluate_pooled` measures what a user of the library sees instead: every distinct
answer of the data in one index, each question searched against all of them through the
real :class:`~qaindex.Ranker` (FAISS recall + exact rerank), and MRR@k, recall@k and P@1 of
the top ``k`` (:func:`pooled_metrics`). Both index paths search the same
:class:`AnswerPool` (:func:`answer_pool`): a benchmark that ranks the pool with another system
scores its rankings against the same rows.

Both rank candidates by score and report expected values under random tie-breaking
(:mod:`qaindex.eval.metrics`): candidate order in the file never breaks a tie. Questions without
a correct candidate are skipped. A candidate answer is identified by its ``aid`` together
with its text, so an ``aid`` reused with a different text counts as a different answer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import positive_int, shown, text_list
from ..corpus import Record
from ..errors import CorpusError, ModelFormatError, QueryError
from ..model import Model
from ..reranker import Reranker
from .datasets import QuestionGroup
from .metrics import evaluate_scores

__all__ = ["AnswerPool", "answer_pool", "evaluate_model", "evaluate_pooled", "evaluate_via_index", "pooled_metrics"]

# Scorer calls get at most this many float32 candidate coordinates (64 MiB).
_SCORE_BUDGET = 1 << 24


@dataclass(frozen=True)
class AnswerPool:
    """The distinct answers of labelled data, in index order, and the questions to search them with.

    What :func:`evaluate_pooled` and :func:`evaluate_via_index` index and ask; a benchmark that
    ranks the same pool with another system (BM25, a foreign encoder) gets the same rows from
    it, so its rankings are scored against the same correct answers by :func:`pooled_metrics`.

    Attributes
    ----------
    keys : list of (str, str)
        ``(aid, answer text)`` of each distinct answer, in first-appearance order: row ``i``
        of the pool is ``keys[i]``.
    groups : list of QuestionGroup
        The evaluated questions: those with at least one correct candidate.
    rows : list of int64 arrays
        Per evaluated question, its candidates' rows in the pool, in the file's order.
    labels : list of int64 arrays
        Per evaluated question, its candidates' labels (1 correct, 0 not), aligned with ``rows``.
    skipped : int
        Questions without a correct candidate (not evaluated).

    Example
    -------
    >>> from qaindex.eval.datasets import read_labelled
    >>> pool = answer_pool(read_labelled("test.jsonl"))
    >>> len(pool.answers), len(pool.questions), pool.relevant[0].tolist(), pool.skipped
    (6, 6, [0], 0)
    """

    keys: list[tuple[str, str]]
    groups: list[QuestionGroup]
    rows: list[npt.NDArray[np.int64]]
    labels: list[npt.NDArray[np.int64]]
    skipped: int

    @property
    def answers(self) -> list[str]:
        """The answer texts, one per row."""
        return [text for _, text in self.keys]

    @property
    def questions(self) -> list[str]:
        """The evaluated questions' texts, in the order of :attr:`rows`."""
        return [g.question for g in self.groups]

    @property
    def relevant(self) -> list[npt.NDArray[np.int64]]:
        """Per evaluated question, the rows of its correct answers."""
        return [rows[labels == 1] for rows, labels in zip(self.rows, self.labels, strict=True)]

    @property
    def ids(self) -> list[str]:
        """Unique index ids, one per row: the aid, or ``aid#2``, ``aid#3``... for an aid reused with other text."""
        return _answer_ids(self.keys)

    def records(self) -> list[Record]:
        """The pool as records to build a :class:`~qaindex.Ranker` on: row ``i`` is record ``i``."""
        return [Record(ident, text) for ident, (_, text) in zip(self.ids, self.keys, strict=True)]


def answer_pool(groups: Sequence[QuestionGroup]) -> AnswerPool:
    """The pool of labelled data: every distinct answer (by ``aid`` and text) and the evaluated questions.

    Parameters
    ----------
    groups : sequence of QuestionGroup
        Labelled data, e.g. from :func:`qaindex.eval.datasets.read_labelled`.

    Returns
    -------
    AnswerPool

    Raises
    ------
    QueryError
        If ``groups`` is not a list of ``QuestionGroup`` or a label is not 0 or 1.

    Example
    -------
    >>> from qaindex.eval.datasets import Candidate, QuestionGroup
    >>> group = QuestionGroup("q1", "Who?", (Candidate("a1", "Ann", 1), Candidate("a2", "Bob", 0)))
    >>> pool = answer_pool([group, QuestionGroup("q2", "When?", (Candidate("a1", "Ann", 0),))])
    >>> pool.answers, pool.questions, pool.relevant[0].tolist(), pool.skipped
    (['Ann', 'Bob'], ['Who?'], [0], 1)
    """
    return _plan(_check_group_list(groups))


def _plan(groups: Sequence[QuestionGroup]) -> AnswerPool:
    where: dict[tuple[str, str], int] = {}
    keys: list[tuple[str, str]] = []
    kept: list[QuestionGroup] = []
    rows: list[npt.NDArray[np.int64]] = []
    labels: list[npt.NDArray[np.int64]] = []
    skipped = 0
    for group in groups:
        own = []
        for cand in group.candidates:
            key = (cand.aid, cand.answer)
            if key not in where:
                where[key] = len(keys)
                keys.append(key)
            own.append(where[key])
        if not any(c.label == 1 for c in group.candidates):
            skipped += 1
            continue
        kept.append(group)
        rows.append(np.asarray(own, dtype=np.int64))
        labels.append(np.asarray([c.label for c in group.candidates], dtype=np.int64))
    return AnswerPool(keys, kept, rows, labels, skipped)


def _empty_result(plan: AnswerPool) -> dict[str, Any]:
    return {
        "map": math.nan,
        "mrr": math.nan,
        "p@1": math.nan,
        "questions": 0,
        "skipped": plan.skipped,
        "candidates": 0,
        "answers": len(plan.keys),
    }


def _finish(plan: AnswerPool, scores: list[npt.NDArray[np.float32]], model: Model | Reranker) -> dict[str, Any]:
    for group, s in zip(plan.groups, scores, strict=True):
        if np.isnan(s).any():
            raise ModelFormatError(
                f"{model.directory}: the scorer returned NaN for question {group.qid!r}; "
                "the model is broken, re-export it"
            )
    result = evaluate_scores(list(zip(scores, plan.labels, strict=True)))
    result["skipped"] += plan.skipped
    result["candidates"] = int(sum(len(r) for r in plan.rows))
    result["answers"] = len(plan.keys)
    return result


def _encode_questions(model: Model, plan: AnswerPool, batch_size: int) -> npt.NDArray[np.float32]:
    return model.encode(plan.questions, role="question", batch_size=batch_size)


def _encode_answers(model: Model, plan: AnswerPool, batch_size: int) -> npt.NDArray[np.float32]:
    # the same texts in the same order as Ranker.build encodes them, so both paths agree
    return model.encode(plan.answers, role="answer", batch_size=batch_size)


def _check_batch_size(batch_size: Any) -> int:
    return positive_int(batch_size, "batch_size")


def _check_groups(model: Any, groups: Any, *, reranker: bool = False) -> list[QuestionGroup]:
    if isinstance(model, Reranker) and not reranker:
        raise QueryError("a Reranker scores pairs and cannot index answers; use evaluate_model, or pass a Model")
    if not isinstance(model, Model | Reranker):
        raise QueryError(f"model must be a loaded Model (Model.load(path)), got {type(model).__name__}")
    return _check_group_list(groups)


def _check_group_list(groups: Any) -> list[QuestionGroup]:
    if isinstance(groups, str | bytes | QuestionGroup) or not isinstance(groups, Iterable):
        raise QueryError(f"groups must be a list of QuestionGroup (from read_labelled), got {type(groups).__name__}")
    out = list(groups)
    for i, group in enumerate(out):
        if not isinstance(group, QuestionGroup):
            raise QueryError(f"groups[{i}] must be a QuestionGroup (from read_labelled), got {type(group).__name__}")
        text_list([group.question, *(c.answer for c in group.candidates)], f"groups[{i}] texts")
        for c in group.candidates:
            if isinstance(c.label, bool) or c.label not in (0, 1):
                raise QueryError(f"groups[{i}]: candidate {c.aid!r} has label {c.label!r}; labels are 0 or 1")
    return out


def evaluate_model(
    model: Model | Reranker, groups: Sequence[QuestionGroup], *, batch_size: int = 256
) -> dict[str, Any]:
    """Score each question's own candidates with the model and compute MAP, MRR, P@1.

    Parameters
    ----------
    model : Model or Reranker
        A loaded model; a :class:`~qaindex.reranker.Reranker` scores each question's own
        candidates jointly, pair by pair.
    groups : sequence of QuestionGroup
        Labelled data, e.g. from :func:`qaindex.eval.datasets.read_labelled`.
    batch_size : int, keyword-only
        Texts per encoder call, and questions per scorer call.

    Returns
    -------
    dict
        ``map``, ``mrr``, ``p@1`` (expected values under random tie-breaking; NaN when no
        question has a correct candidate), ``questions`` (evaluated), ``skipped`` (without
        a correct candidate), ``candidates`` (question-candidate pairs scored) and
        ``answers`` (distinct answers encoded).

    Raises
    ------
    ModelFormatError
        If the model's scorer returns NaN.

    Example
    -------
    >>> from qaindex.eval.datasets import read_labelled
    >>> model = Model.load()                                       # or Model.load("path/to/model")
    >>> result = evaluate_model(model, read_labelled("test.jsonl"))
    >>> 0.0 < result["map"] <= 1.0, result["questions"]
    (True, 6)
    """
    batch_size = _check_batch_size(batch_size)
    plan = _plan(_check_groups(model, groups, reranker=True))
    if not plan.groups:
        return _empty_result(plan)
    if isinstance(model, Reranker):  # a joint scorer: each question with its own candidates
        texts = [[plan.keys[r][1] for r in rows] for rows in plan.rows]
        return _finish(plan, [model.score(g.question, t) for g, t in zip(plan.groups, texts, strict=True)], model)
    qv = _encode_questions(model, plan, batch_size)
    av = _encode_answers(model, plan, batch_size)
    # questions with similar candidate counts share a scorer call (padded to the longest)
    order = np.argsort([len(r) for r in plan.rows], kind="stable")
    scores: list[npt.NDArray[np.float32]] = [np.zeros(0, np.float32)] * len(plan.rows)
    start = 0
    while start < len(order):
        width = max(1, len(plan.rows[order[start]]))
        stop = start + 1
        while stop < len(order) and stop - start < batch_size:
            wider = max(width, len(plan.rows[order[stop]]))
            if (stop - start + 1) * wider * model.dimension > _SCORE_BUDGET:
                break
            width = wider
            stop += 1
        chunk = order[start:stop]
        padded = np.zeros((len(chunk), width), dtype=np.int64)
        for i, q in enumerate(chunk):
            r = plan.rows[q]
            padded[i, : len(r)] = r
            padded[i, len(r) :] = r[0] if len(r) else 0
        score, distance = model.score(qv[chunk], av[padded])
        if model.space.saturates:  # bilinear: rank by q·c, the order of σ(q·c + b), which saturates in float32
            score = -distance
        for i, q in enumerate(chunk):
            scores[q] = score[i, : len(plan.rows[q])]
        start = stop
    return _finish(plan, scores, model)


def _answer_ids(keys: Sequence[tuple[str, str]]) -> list[str]:
    """Index ids: the aid, or ``aid#2``, ``aid#3``... for an aid reused with other text."""
    used: set[str] = set()
    texts_per_aid: dict[str, int] = {}
    for aid, _ in keys:
        texts_per_aid[aid] = texts_per_aid.get(aid, 0) + 1
    ids: list[str] = []
    for aid, _ in keys:
        base = aid if aid.strip() else "answer"
        ident = base if texts_per_aid[aid] == 1 and base not in used else None
        n = 1
        while ident is None or ident in used:
            n += 1
            ident = f"{base}#{n}"
        used.add(ident)
        ids.append(ident)
    return ids


def evaluate_via_index(
    model: Model,
    groups: Sequence[QuestionGroup],
    *,
    index_kind: str = "auto",
    device: str = "auto",
    batch_size: int = 256,
) -> dict[str, Any]:
    """Evaluate through the served path: a Ranker over all answers, full ranking per question.

    Builds a :class:`~qaindex.Ranker` over every distinct answer of ``groups`` (keyed by
    ``aid`` and text), searches it with each question's vector for ``k`` = every stored
    answer, and reads the served scores of the question's own candidates from that
    ranking. Gives the same numbers as :func:`evaluate_model`.

    Parameters
    ----------
    model : Model
        A loaded model.
    groups : sequence of QuestionGroup
        Labelled data.
    index_kind : {"auto", "flat", "hnsw"}, keyword-only
        The FAISS index kind (a full ranking reranks every answer exactly, whatever the kind).
    device : {"auto", "cpu", "cuda"}, keyword-only
        Where FAISS runs.
    batch_size : int, keyword-only
        Texts per encoder call.

    Returns
    -------
    dict
        The same keys as :func:`evaluate_model`.

    Example
    -------
    >>> from qaindex.eval.datasets import read_labelled
    >>> groups = read_labelled("test.jsonl")
    >>> evaluate_via_index(model, groups, index_kind="flat")["mrr"] == evaluate_model(model, groups)["mrr"]
    True
    """
    from ..ranker import Ranker

    batch_size = _check_batch_size(batch_size)
    plan = _plan(_check_groups(model, groups))
    if not plan.groups:
        return _empty_result(plan)
    for aid, text in plan.keys:
        if not text.strip():
            raise CorpusError(
                f"answer {aid!r} is empty, and an index cannot store an empty answer; "
                "drop it from the data or evaluate without the index"
            )
    qv = _encode_questions(model, plan, batch_size)
    records = plan.records()
    # the model's own ranking (dense): hybrid search is measured by benchmarks/quality/hybrid.py
    ranker = Ranker.build(
        records, model=model, device=device, index_kind=index_kind, batch_size=batch_size, hybrid=False
    )
    total = len(ranker)
    if total != len(plan.keys):
        raise AssertionError(f"the index holds {total} answers, expected {len(plan.keys)}")
    step = max(1, _SCORE_BUDGET // max(1, total * model.dimension))
    scores: list[npt.NDArray[np.float32]] = []
    for start in range(0, len(qv), step):
        served, _, rows = ranker.search_vectors(qv[start : start + step], total, use_coarse=True)
        for i in range(len(rows)):
            # an answer the coarse stage did not recall is ranked last, as a user would see it
            found = rows[i] >= 0
            full = np.full(total, -np.inf, dtype=np.float32)
            full[rows[i][found]] = served[i][found]
            scores.append(full[plan.rows[start + i]])
    return _finish(plan, scores, model)


def _sequence(values: Any, name: str) -> list[Any]:
    if isinstance(values, str | bytes | bytearray | Mapping) or not isinstance(values, Iterable):
        raise QueryError(f"{name} must be a list of lists of answer rows, got {type(values).__name__}")
    if isinstance(values, np.ndarray) and values.ndim == 0:
        raise QueryError(f"{name} must be a list of lists of answer rows, got an array of shape ()")
    return list(values)


def _row_list(values: Any, name: str) -> list[int]:
    """Answer rows (ints) from a list or an integer array; anything else is a QueryError."""
    items = _sequence(values, name)
    out = []
    for i, r in enumerate(items):
        if isinstance(r, bool | np.bool_) or not isinstance(r, int | np.integer):
            raise QueryError(f"{name}[{i}] must be an integer answer row, got {type(r).__name__} {shown(r)}")
        out.append(int(r))
    return out


def pooled_metrics(
    rankings: Sequence[Sequence[int]] | Sequence[npt.NDArray[np.int64]] | npt.NDArray[np.int64],
    relevant: Sequence[Sequence[int]] | Sequence[npt.NDArray[np.int64]],
    k: int = 10,
) -> dict[str, Any]:
    """MRR@k, recall@k and P@1 of ranked answer rows against each question's correct rows.

    Parameters
    ----------
    rankings : sequence of sequences of int
        Per question, answer rows best first (at least the top ``k``; negative rows are
        "no hit" and ignored).
    relevant : sequence of sequences of int
        Per question, its correct answer rows (non-empty).
    k : int

    Returns
    -------
    dict
        ``mrr@k`` (mean of 1/rank of the first correct answer within the top k, else 0),
        ``recall@k`` (mean share of a question's correct answers within the top k), ``p@1``
        (share of questions whose first hit is correct), ``questions``, ``k``.

    Example
    -------
    >>> pooled_metrics([[3, 1, 2], [0, 2, 1]], [[1], [1, 2]], k=2)
    {'mrr@2': 0.5, 'recall@2': 0.75, 'p@1': 0.0, 'questions': 2, 'k': 2}
    """
    k = positive_int(k, "k")
    ranked_rows = [_row_list(r, f"rankings[{i}]") for i, r in enumerate(_sequence(rankings, "rankings"))]
    relevant_rows = [_row_list(r, f"relevant[{i}]") for i, r in enumerate(_sequence(relevant, "relevant"))]
    if len(ranked_rows) != len(relevant_rows):
        raise QueryError(
            f"{len(ranked_rows)} rankings for {len(relevant_rows)} questions; give one ranking per question"
        )
    rr, recall, first = [], [], []
    for ranked, rel in zip(ranked_rows, relevant_rows, strict=True):
        good = set(rel)
        if not good:
            raise QueryError("every question needs at least one correct answer (relevant rows)")
        top = [r for r in ranked if r >= 0][:k]
        hits = [i for i, r in enumerate(top) if r in good]
        rr.append(1.0 / (hits[0] + 1) if hits else 0.0)
        recall.append(len(hits) / len(good))
        first.append(1.0 if top and top[0] in good else 0.0)
    n = len(rr)
    return {
        f"mrr@{k}": float(np.mean(rr)) if n else math.nan,
        f"recall@{k}": float(np.mean(recall)) if n else math.nan,
        "p@1": float(np.mean(first)) if n else math.nan,
        "questions": n,
        "k": k,
    }


def evaluate_pooled(
    model: Model,
    groups: Sequence[QuestionGroup],
    *,
    k: int = 10,
    index_kind: str = "auto",
    device: str = "auto",
    batch_size: int = 256,
) -> dict[str, Any]:
    """Whole-corpus evaluation: every question searched against every distinct answer.

    A :class:`~qaindex.Ranker` is built over every distinct answer of ``groups`` (keyed by
    ``aid`` and text), each question with a correct candidate is searched for its top ``k``
    through the Ranker's real path (FAISS recall of ``k × overfetch``, exact rerank by the
    model's scorer, deterministic ties), and the hits are scored against the question's
    correct answers with :func:`pooled_metrics`. Unlike :func:`evaluate_model`, a question
    competes with *all* answers of the split, not only its own candidates.

    Parameters
    ----------
    model : Model
    groups : sequence of QuestionGroup
    k : int, keyword-only
        Cut-off for MRR and recall (default 10).
    index_kind : {"auto", "flat", "hnsw"}, keyword-only
    device : {"auto", "cpu", "cuda"}, keyword-only
    batch_size : int, keyword-only

    Returns
    -------
    dict
        ``mrr@k``, ``recall@k``, ``p@1``, ``questions`` (evaluated), ``skipped`` (without a
        correct candidate), ``answers`` (pool size), ``k``.

    Example
    -------
    >>> from qaindex.eval.datasets import read_labelled
    >>> result = evaluate_pooled(Model.load(), read_labelled("test.jsonl"))
    >>> 0.0 < result["mrr@10"] <= 1.0
    True
    """
    from ..ranker import Ranker

    batch_size = _check_batch_size(batch_size)
    k = positive_int(k, "k")
    plan = _plan(_check_groups(model, groups))
    if not plan.groups:
        out = {f"mrr@{k}": math.nan, f"recall@{k}": math.nan, "p@1": math.nan, "questions": 0, "k": k}
        return {**out, "skipped": plan.skipped, "answers": len(plan.keys)}
    for aid, text in plan.keys:
        if not text.strip():
            raise CorpusError(
                f"answer {aid!r} is empty, and an index cannot store an empty answer; drop it from the data"
            )
    records = plan.records()
    # the model's own ranking (dense): hybrid search is measured by benchmarks/quality/hybrid.py
    ranker = Ranker.build(
        records, model=model, device=device, index_kind=index_kind, batch_size=batch_size, hybrid=False
    )
    if len(ranker) != len(plan.keys):
        raise AssertionError(f"the index holds {len(ranker)} answers, expected {len(plan.keys)}")
    qv = _encode_questions(model, plan, batch_size)
    depth = min(k, len(plan.keys))
    rankings: list[npt.NDArray[np.int64]] = []
    for start in range(0, len(qv), batch_size):
        _, _, rows = ranker.search_vectors(qv[start : start + batch_size], depth)
        rankings.extend(np.asarray(r, dtype=np.int64) for r in rows)
    result = pooled_metrics(rankings, plan.relevant, k)
    result["skipped"] = plan.skipped
    result["answers"] = len(plan.keys)
    return result
