"""A search's plan: its arguments checked once, at the Ranker, and what they decide.

:meth:`qaindex.Ranker.search` and :meth:`~qaindex.Ranker.search_batch` check what the caller
passed here and nowhere else; the pipeline (:mod:`.pipeline`) runs the :class:`SearchPlan`
they get and checks nothing again. The plan says which stages the search runs:

- the filter (``where`` compiled, :func:`qaindex.search.filters.compile_where`);
- the fusion with BM25, or none (:func:`fusion_setting`);
- the reranking stage, or none (:func:`qaindex.reranker.rerank_stage`): with one, the first
  stage finds ``depth`` candidates and the reranker orders and cuts them to ``k``;
- how many questions one call may take within the memory budget
  (:func:`qaindex.search.budget.questions_per_call`), what the CLI searches at a time.

The command line asks the Ranker for the plan (:meth:`qaindex.Ranker.plan`) instead of
deciding the stages itself.

Example
-------
>>> plan = ranker.plan(5, where={"category": "billing"})
>>> plan.k, plan.first_k, plan.stage is None, plan.where is not None
(5, 5, True, True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..checks import MAX_INT64, MAX_SETTING, finite_number, finite_vectors, flag, positive_int, text_list
from ..corpus import Record
from ..errors import QueryError
from ..reranker import Reranker, RerankStage, rerank_stage
from . import budget
from .filters import Filter, compile_where
from .fusion import Fusion, fusion_from

if TYPE_CHECKING:
    from ..model import Model
    from .state import IndexState

__all__ = [
    "SearchPlan",
    "Where",
    "check_k",
    "check_queries",
    "check_question",
    "check_questions",
    "check_recall",
    "check_settings",
    "fusion_setting",
    "search_plan",
]

Where = Mapping[str, Any] | Callable[[Record], bool]


@dataclass(frozen=True)
class SearchPlan:
    """What one search does, its arguments checked.

    Attributes
    ----------
    k : int
        Hits per question the caller asked for (not yet bounded by the index size).
    where : Filter or None
        The compiled filter; None: every answer.
    min_score : float or None
        Hits scored below it are dropped (by the reranker's score when there is a stage).
    stage : RerankStage or None
        The reranking stage; None: the first stage gives the hits.
    fusion : Fusion or None
        The fusion with BM25; None: a dense search.
    explain : bool
        Give each hit its explanation.
    questions_per_call : int
        Questions one call may take within the memory budget (at least 1).
    """

    k: int
    where: Filter | None
    min_score: float | None
    stage: RerankStage | None
    fusion: Fusion | None
    explain: bool
    questions_per_call: int

    @property
    def first_k(self) -> int:
        """Hits the first stage finds per question: the stage's ``depth``, else ``k``."""
        return self.k if self.stage is None else self.stage.depth


def check_k(k: Any) -> int:
    """``k``: any positive integer (searches bound it by the index size before allocating)."""
    return positive_int(k, "k")


def check_question(question: Any) -> list[str]:
    """One question (a non-empty text) as the list :func:`check_questions` gives."""
    if not isinstance(question, str):
        raise QueryError(f"the question must be text, got {type(question).__name__}")
    return check_questions([question])


def check_questions(questions: Any) -> list[str]:
    """A list of non-empty question texts (a single string is refused)."""
    if isinstance(questions, str):
        raise QueryError("search_batch takes a list of questions; use search() for one question")
    out = text_list(questions, "questions", what="question")
    for i, q in enumerate(out):
        if not q.strip():
            where = "the question" if len(out) == 1 else f"question {i + 1}"
            raise QueryError(f"{where} is empty; ask a question with at least one word")
    return out


def check_queries(model: Model, queries: Any) -> np.ndarray:
    """Question vectors of the model's dimension, finite (inside the ball for Poincaré)."""
    return finite_vectors(queries, "queries", shape=(None, model.dimension), ball=model.space.ball)


def check_settings(**settings: Any) -> dict[str, int]:
    """The settings of :meth:`~qaindex.Ranker.configure` that are not None, each checked: the
    over-fetch factor and breadths (positive, at most ``MAX_SETTING``), the memory budget."""
    out = {}
    for name, value in settings.items():
        if value is None:
            continue
        if name == "memory_budget":
            out[name] = budget.check_budget_value(value)
        else:
            out[name] = positive_int(value, name, maximum=MAX_SETTING)
    return out


def check_recall(k: Any, questions: Any, sample: Any, seed: Any) -> tuple[int, list[str] | None, int, int]:
    """The arguments of :meth:`~qaindex.Ranker.recall`: ``k`` and ``sample`` positive, ``seed``
    a non-negative integer, ``questions`` None or a non-empty list of questions."""
    k = check_k(k)
    sample = positive_int(sample, "sample")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or not 0 <= seed <= MAX_INT64:
        raise QueryError(f"seed must be a non-negative integer, got {seed!r}")
    if questions is None:
        return k, None, sample, int(seed)
    qs = check_questions(questions)
    if not qs:
        raise QueryError("no questions to measure recall with; give at least one question")
    return k, qs, sample, int(seed)


def fusion_setting(state: IndexState, hybrid: Any, fusion: Any) -> Fusion | None:
    """The fusion a search uses, or None for a dense search."""
    if hybrid is not None:
        flag(hybrid, "hybrid")
    if hybrid is False or (hybrid is None and state.lexical is None):
        if fusion is not None:
            fusion_from(fusion, state.model)  # the caller's argument is checked all the same
        return None
    chosen = fusion_from(fusion, state.model)
    if state.lexical is None:
        raise QueryError(
            "this index has no lexical index, so it cannot search with hybrid=True; build it with "
            "`qaindex build CORPUS --hybrid` (Python: Ranker.build(..., hybrid=True) or ranker.enable_hybrid())"
        )
    return chosen


def search_plan(
    state: IndexState,
    k: Any,
    *,
    where: Where | None = None,
    min_score: Any = None,
    rerank: Reranker | str | os.PathLike[str] | bool | None = None,
    depth: Any = None,
    hybrid: Any = None,
    fusion: Fusion | Mapping[str, Any] | None = None,
    explain: Any = False,
) -> SearchPlan:
    """The plan of a search of ``state`` with these arguments (see :meth:`qaindex.Ranker.search`),
    each checked; a :class:`~qaindex.QueryError` names the first bad one."""
    flag(explain, "explain")
    k = check_k(k)
    flt = compile_where(where)
    if min_score is not None:
        min_score = finite_number(min_score, "min_score", optional=True)
    stage = rerank_stage(state.reranker, rerank, depth, k, min_score)
    fused = fusion_setting(state, hybrid, fusion)
    first_k = k if stage is None else stage.depth
    per_call = budget.questions_per_call(state, first_k)
    return SearchPlan(k, flt, min_score, stage, fused, bool(explain), per_call)
